from rl_lightning.callbacks.checkpoint import LastCheckpoint
from rl_lightning.callbacks.progress import RLProgressBar
from rl_lightning.callbacks.video import RecordEpisodes

__all__ = ["LastCheckpoint", "RLProgressBar", "RecordEpisodes"]
