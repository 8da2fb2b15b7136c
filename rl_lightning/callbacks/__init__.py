from rl_lightning.callbacks.checkpoint import LastCheckpoint

__all__ = ["LastCheckpoint"]
