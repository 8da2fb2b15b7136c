"""Checkpoints that survive real runs: written atomically wherever the run lives, found again when
the newest one is unreadable, holding the RNG states (as tensors and plain containers, so
``torch.load(weights_only=True)`` reads them) and, beside them, large replay buffers.

Atomic means: a save leaves either the previous file or the complete new one, never a truncated
file, whatever fails in between (a full disk, a kill, a crash). Lightning's own save writes a
temporary file in the system's temp directory and moves it into place; when that directory and the
run are on different filesystems (a container's mounted volume, NFS, a separate /tmp), the move is a
copy, and a full disk in the middle of it destroys the last good checkpoint. ``atomic_write`` keeps
the temporary file in the checkpoint's own directory, so the final step is a rename. Remote paths
(``s3://``, ``gs://``...) go through fsspec as Lightning writes them: object stores publish an object
whole or not at all, but no rename exists there to make a local-disk guarantee.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO

from rl_lightning.errors import ConfigError


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through ``write(file)`` so that it ends as the previous file or the complete new
    one: a temporary file in the same directory, flushed and fsynced, then renamed over ``path``, then
    the directory fsynced (the rename itself survives a power loss). On any failure the temporary file
    is removed and the previous file is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the file from the user's group
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # name the file the user knows, not the temporary one
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise type(e)(e.errno, f"{e.strerror} while writing", str(path)) from e
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` with local saves through ``atomic_write`` (streamed by
    ``torch.save``, not built in memory first). ``RLModule`` installs it on its trainer's strategy."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_write(path, lambda f: torch.save(checkpoint, f))


def install_atomic_checkpoints(trainer: Any) -> None:
    """Route the trainer's checkpoint saves through ``AtomicCheckpointIO``, unless a custom IO is set."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def is_loadable(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint ``torch.load(weights_only=True)`` reads (memory-mapped, so a
    large one is checked without reading all of it)."""
    return checkpoint_env_steps(path) is not None


def checkpoint_env_steps(path: str | Path) -> int | None:
    """The env step a checkpoint was written at (0 if it does not say), or ``None`` if it does not load."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return None
    return int(checkpoint.get("rl_lightning", {}).get("env_steps", 0))


def newest_loadable(candidates: list[Path]) -> tuple[Path | None, list[Path]]:
    """The newest of ``candidates`` (by modification time) that loads, and the newer ones that did not."""
    unreadable = []
    for path in sorted(candidates, key=lambda p: p.stat().st_mtime, reverse=True):
        if is_loadable(path):
            return path, unreadable
        unreadable.append(path)
    return None, unreadable


def plain_hyperparameters(hparams: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Make a checkpoint's hyperparameters plain containers, so ``torch.load(weights_only=True)`` reads
    them: dataclass configs become dicts, and those in ``resolved`` (name -> config or None) replace
    the arguments as given."""
    for key, value in hparams.items():
        if dataclasses.is_dataclass(value):
            hparams[key] = dataclasses.asdict(value)
    for key, config in resolved.items():
        if key in hparams and config is not None:
            hparams[key] = dataclasses.asdict(config)


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
    written atomically (``atomic_write``) *before* the checkpoint that names it, so
    a kill at any moment leaves every checkpoint with the buffer of its own step: rewriting
    ``last.ckpt`` never touches the file the previous ``last.ckpt`` points at. Older side files of a
    checkpoint are deleted only after it was replaced, and with it when Lightning removes the
    checkpoint. Loading through this IO (``fit(..., ckpt_path=...)``) puts the buffer back; both
    files hold only tensors and plain containers.
    """

    min_bytes = 64 * 2**20

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner
        self.side_io = AtomicCheckpointIO()  # the side file is a local torch file, whatever ``inner`` is

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
