"""What checkpoints hold beyond Lightning's own state, and how large parts of it are written: the RNG
states (as tensors and plain containers, so ``torch.load(weights_only=True)`` reads them) and replay
buffers in side files next to their checkpoint."""

from __future__ import annotations

import glob
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO

from rl_lightning.errors import ConfigError


def rng_state() -> dict[str, Any]:
    """torch, numpy and python RNG states as tensors and plain containers (weights_only-safe)."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "python": {"version": py_state[0], "state": list(py_state[1]), "gauss": py_state[2]},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


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
