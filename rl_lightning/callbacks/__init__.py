from rl_lightning.callbacks.checkpoint import LastCheckpoint
from rl_lightning.callbacks.compile import CompileNetworks

__all__ = ["CompileNetworks", "LastCheckpoint"]
