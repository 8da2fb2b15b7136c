"""Checkpointing for long, fragile RL runs."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning.errors import DivergenceError


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``: the latest state, rewritten after every evaluation and on the way out of an
    interrupted run (SIGTERM, Ctrl-C, an environment fault), so a crash loses at most one epoch.

    Lightning writes checkpoints atomically (to a temporary file, then renamed), so a kill in the
    middle of a save leaves the previous ``last.ckpt`` intact. A run stopped because its loss or
    parameters went non-finite is not saved: that would overwrite the last good checkpoint.
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
        super().on_exception(trainer, pl_module, exception)
