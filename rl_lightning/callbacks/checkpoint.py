"""Checkpointing for long, fragile RL runs."""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning.errors import ConfigError, DivergenceError


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


class ReplaySideFileIO(CheckpointIO):
    """Writes a large replay buffer to a side file next to its checkpoint instead of into it.

    Wraps the strategy's checkpoint IO (off-policy modules with ``save_replay_buffer`` install it in
    ``setup``). A buffer of at least ``min_bytes`` goes to ``<checkpoint>.replay-<env step>.pt``,
    written atomically (Lightning's ``TorchCheckpointIO``) *before* the checkpoint that names it, so
    a kill at any moment leaves every checkpoint with the buffer of its own step: rewriting
    ``last.ckpt`` never touches the file the previous ``last.ckpt`` points at. Older side files of a
    checkpoint are deleted only after it was replaced, and with it when Lightning removes the
    checkpoint. Loading through this IO (``fit(..., ckpt_path=...)``) puts the buffer back; both
    files hold only tensors and plain containers.
    """

    min_bytes = 64 * 2**20

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner
        self.side_io = TorchCheckpointIO()  # the side file is a local torch file, whatever ``inner`` is

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        state = checkpoint.get("rl_lightning", {})
        replay = state.get("replay_buffer")
        keep = None
        if replay is not None and _is_local(path) and _nbytes(replay) >= self.min_bytes:
            keep = _side_path(path, state["env_steps"])
            self.side_io.save_checkpoint(replay, keep)
            state = {k: v for k, v in state.items() if k != "replay_buffer"} | {"replay_buffer_file": keep.name}
            checkpoint = {**checkpoint, "rl_lightning": state}
        self.inner.save_checkpoint(checkpoint, path, storage_options)
        for stale in _side_files(path):
            if stale != keep:
                stale.unlink(missing_ok=True)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        checkpoint = self.inner.load_checkpoint(path, *args, **kwargs)
        state = checkpoint.get("rl_lightning", {})
        if "replay_buffer_file" in state:
            side = Path(path).parent / state.pop("replay_buffer_file")
            if not side.is_file():
                raise ConfigError(
                    f"Checkpoint {path} keeps its replay buffer in {side}, which is missing. Copy it next "
                    "to the checkpoint, or resume without the buffer by loading the weights only."
                )
            state["replay_buffer"] = self.side_io.load_checkpoint(side, map_location="cpu", weights_only=True)
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)
        for side in _side_files(path):
            side.unlink(missing_ok=True)

    def teardown(self) -> None:
        self.inner.teardown()


def install_replay_side_files(trainer: Any) -> None:
    """Route the trainer's checkpoints through ``ReplaySideFileIO`` (once)."""
    strategy = trainer.strategy
    if not isinstance(strategy.checkpoint_io, ReplaySideFileIO):
        strategy.checkpoint_io = ReplaySideFileIO(strategy.checkpoint_io)


def _is_local(path: Any) -> bool:
    return "://" not in str(path)


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _side_path(path: Any, env_steps: int) -> Path:
    path = Path(path)
    return path.with_name(f"{path.name}.replay-{env_steps:012d}.pt")


def _side_files(path: Any) -> Iterator[Path]:
    path = Path(path)
    return path.parent.glob(f"{glob.escape(path.name)}.replay-*.pt") if _is_local(path) else iter(())
