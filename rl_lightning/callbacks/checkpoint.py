"""Checkpointing for long, fragile RL runs."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.errors import DivergenceError


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``: the latest state, rewritten after every evaluation and on the way out of an
    interrupted run (SIGTERM, Ctrl-C, an environment fault), so a crash loses at most one epoch.

    rl_lightning's algorithms write checkpoints atomically wherever the run lives
    (``rl_lightning.checkpointing``), so a kill or a full disk in the middle of a save leaves the
    previous ``last.ckpt`` intact. A run stopped because its loss or parameters went non-finite is not
    saved: that would overwrite the last good checkpoint. A save that fails on the way out (the disk
    is full) is reported as a warning, so the error that stopped the run is the one reported.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "last",
        save_on_exception: bool = True,
        enable_version_counter: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            save_on_exception=save_on_exception,
            enable_version_counter=enable_version_counter,
            **kwargs,
        )

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if isinstance(exception, DivergenceError):
            return
        try:
            super().on_exception(trainer, pl_module, exception)
        except OSError as e:
            previous = self.last_model_path or self.best_model_path
            kept = f"the previous one, {previous}, is intact" if previous else "no earlier checkpoint exists"
            rank_zero_warn(f"Could not write {self.filename}.ckpt on the way out: {e}; {kept}.")
