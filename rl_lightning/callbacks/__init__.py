from rl_lightning.callbacks.checkpoint import LastCheckpoint
from rl_lightning.callbacks.compile import CompileNetworks
from rl_lightning.callbacks.cuda_graphs import CUDAGraphs
from rl_lightning.callbacks.divergence import DivergenceCheck
from rl_lightning.callbacks.preemption import PreemptionExitCode
from rl_lightning.callbacks.progress import RLProgressBar
from rl_lightning.callbacks.video import RecordEpisodes

__all__ = [
    "CUDAGraphs",
    "CompileNetworks",
    "DivergenceCheck",
    "LastCheckpoint",
    "PreemptionExitCode",
    "RLProgressBar",
    "RecordEpisodes",
]
