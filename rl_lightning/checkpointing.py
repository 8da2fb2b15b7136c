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
import inspect
import io
import os
import pickle
import shutil
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch
from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.config import ReplayConfig, RunConfig, constructor_defaults
from rl_lightning.errors import ConfigError
from rl_lightning.seeding import rng_state, set_rng_state


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
            try:
                write(f)
            except RuntimeError as e:
                # torch's zip writer reports a failed write ("[enforce fail at inline_container.cc]
                # unexpected pos 64 vs 0") and hides the OSError (no space left...) it raised in.
                behind = _os_error_behind(e)
                if behind is None:
                    raise
                raise behind from e
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


def _os_error_behind(error: BaseException) -> OSError | None:
    """The ``OSError`` an exception was raised while handling, if any (along ``__context__``)."""
    cause = error.__context__
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__context__
    return cause


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Remove the temporary files ``atomic_write`` left in ``directory`` when its process was killed
    mid-write (``.<name>.<random>.tmp``); returns them. Called when a run starts writing there."""
    removed = []
    for tmp in Path(directory).glob(".*.tmp") if Path(directory).is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` with local saves through ``atomic_write`` (streamed by
    ``torch.save``, not built in memory first), and loads that never run code from the file
    (``read_checkpoint``). ``RLModule`` installs it on its trainer's strategy."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_write(path, lambda f: torch.save(checkpoint, f))

    def load_checkpoint(
        self, path: Any, map_location: Any | None = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return read_checkpoint(path, map_location, weights_only)


def install_atomic_checkpoints(trainer: Any) -> None:
    """Route the trainer's checkpoint saves and loads through ``AtomicCheckpointIO``, unless a custom IO
    is set."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def prepare_checkpoints(trainer: Any) -> None:
    """What ``RLModule.setup`` does for the trainer's checkpoints: saves atomic and loads weights-only
    (``AtomicCheckpointIO``), large replay buffers beside the checkpoint (``ReplaySideFileIO``), and the
    temporary files a kill in the middle of an earlier save left in the checkpoint directories removed."""
    install_atomic_checkpoints(trainer)
    install_replay_side_files(trainer)
    if trainer.is_global_zero:
        for callback in trainer.checkpoint_callbacks:
            if getattr(callback, "dirpath", None):
                remove_stale_temporaries(callback.dirpath)


def read_checkpoint(path: Any, map_location: Any = "cpu", weights_only: bool | None = True) -> dict[str, Any]:
    """Load a checkpoint from a local path (``~`` expanded), an http(s) URL or any fsspec URL (``s3://``...)
    with ``torch.load(weights_only=True)``: tensors and plain containers only, so no code in the file ever
    runs. Lightning would unpickle a URL with ``weights_only=False`` (a payload in ``__reduce__`` runs);
    ``weights_only=False`` is refused here for every source. Raises ``ConfigError`` in one line."""
    if weights_only is False:
        raise ConfigError(
            f"Refusing to load {path} with weights_only=False: unpickling runs any code the file holds. "
            "rl_lightning checkpoints hold only tensors and plain containers; load them with weights_only=True."
        )
    with local_copy(path) as local:
        try:
            return torch.load(local, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as e:
            raise ConfigError(f"Checkpoint {path}: {refusal(e)}") from None


@contextlib.contextmanager
def local_copy(path: Any) -> Iterator[Path]:
    """``path`` as a local file: itself (``~`` expanded), or a remote file downloaded to a temporary one
    (removed afterwards; not torch hub's cache, which reuses any earlier file of the same name)."""
    if _is_local(path):
        yield Path(path).expanduser()
        return
    with tempfile.TemporaryDirectory(prefix="rl-lightning-ckpt-") as tmp:
        yield download_checkpoint(str(path), Path(tmp))


def download_checkpoint(url: str, directory: Path) -> Path:
    """``url`` (http(s), or any fsspec protocol) downloaded into ``directory``; one line if it fails."""
    local = directory / (Path(url.split("?")[0]).name or "checkpoint.ckpt")
    try:
        _download(url, local)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"Could not download the checkpoint {url}: {type(e).__name__}: {e}") from None
    return local


def _download(url: str, local: Path) -> None:
    if url.startswith(("http://", "https://")):
        with urllib.request.urlopen(url, timeout=60) as response, open(local, "wb") as f:
            shutil.copyfileobj(response, f)
        return
    try:
        import fsspec
    except ImportError:
        raise ConfigError(f"Reading {url} needs fsspec (pip install fsspec and its driver, e.g. s3fs).") from None
    with fsspec.open(url, "rb") as remote, open(local, "wb") as f:
        shutil.copyfileobj(remote, f)


def refusal(error: pickle.UnpicklingError) -> str:
    detail = next((line for line in str(error).splitlines() if "unsupported global" in line.lower()), "").strip()
    return (
        "refused: it holds Python objects whose loading would run code"
        + (f" ({detail.rstrip('.')})" if detail else "")
        + ". rl_lightning checkpoints hold only tensors and plain containers (torch.load(weights_only=True)); "
        "this file was not written by rl_lightning or was tampered with"
    )


def checkpoint_problem(path: str | Path) -> str | None:
    """Why a local checkpoint cannot be resumed from, or ``None`` if it can: it loads with
    ``torch.load(weights_only=True)`` (memory-mapped, so a large one is checked without reading all of it)
    and so does the replay side file it names, if any."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        return refusal(e)
    except Exception as e:
        return f"it does not load (truncated or corrupt: {type(e).__name__})"
    side_name = checkpoint.get("rl_lightning", {}).get("replay_buffer_file")
    if side_name is not None:
        side = Path(path).parent / side_name
        if not side.is_file():
            return f"its replay side file {side} is missing"
        try:
            torch.load(side, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:
            return f"its replay side file {side} does not load (truncated or corrupt: {type(e).__name__})"
    return None


def is_loadable(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint to resume from (``checkpoint_problem`` finds none)."""
    return checkpoint_problem(path) is None


def checkpoint_env_steps(path: str | Path) -> int | None:
    """The env step a checkpoint was written at (0 if it does not say), or ``None`` if it does not load."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return None
    return int(checkpoint.get("rl_lightning", {}).get("env_steps", 0))


def newest_loadable(candidates: list[Path]) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest of ``candidates`` (by modification time) that can be resumed from, and the newer ones
    that could not, each with the reason (``checkpoint_problem``)."""
    unreadable = []
    for path in sorted(candidates, key=lambda p: p.stat().st_mtime, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, unreadable
        unreadable.append((path, problem))
    return None, unreadable


def save_module_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """What ``RLModule.on_save_checkpoint`` adds to Lightning's checkpoint: the env-step counter, the env
    seed, the RNG states (under DDP each rank's), the algorithm's ``checkpointed_attributes``, the experience
    side's state (a replay buffer, where asked), and the configs as resolved (the env seed drawn in setup, the
    algorithm's defaults filled in), so a reload does not depend on the defaults of the code that loads it."""
    state = {"env_steps": module.env_steps, "env_seed": module.env_config.seed, "rng": rng_state()}
    if module._trainer is not None and module.trainer.world_size > 1:  # each rank's own (a gather: every rank saves)
        state["rng_ranks"] = [None] * module.trainer.world_size
        torch.distributed.all_gather_object(state["rng_ranks"], state["rng"])
    state.update({name: getattr(module, name) for name in module.checkpointed_attributes})
    if module.experience is not None and (experience := module.experience.state_dict()) is not None:
        state["replay_buffer"] = experience  # the key since replay buffers were first saved
    checkpoint["rl_lightning"] = state
    plain_hyperparameters(checkpoint.get("hyper_parameters", {}), resolved_configs(module))
    if module.splits_members:  # every rank's members in the one file (a gather: every rank saves)
        members_resized(checkpoint, module.population, module.gather_members)


def restore_module_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """``RLModule.on_load_checkpoint``: the reverse of ``save_module_state``, the networks built first
    (``load_from_checkpoint`` calls it before ``load_state_dict``). Loaded by a trainer (a resume or an
    evaluation), it warns about every hyperparameter that differs from the checkpoint's."""
    if module._trainer is not None:
        hparams = dict(module.hparams)
        plain_hyperparameters(hparams, resolved_configs(module))
        if changes := hyperparameter_changes(checkpoint.get("hyper_parameters", {}), hparams, module=type(module)):
            rank_zero_warn(
                f"The checkpoint was trained with other hyperparameters than this {type(module).__name__}'s "
                f"(checkpoint -> now): {'; '.join(changes)}. Training and evaluation go on with the new ones."
            )
    state = checkpoint.get("rl_lightning", {})
    module.env_steps = int(state.get("env_steps", 0))
    ranks = state.get("rng_ranks")
    if ranks and module._trainer is not None and module.trainer.world_size == len(ranks):
        set_rng_state(ranks[module.global_rank])  # DDP: each rank its own stream, as before the save
    elif "rng" in state:
        set_rng_state(state["rng"])
    if module.env_config.seed is None and state.get("env_seed") is not None:
        module.env_config.seed = int(state["env_seed"])
    for name in module.checkpointed_attributes:
        if name in state:
            setattr(module, name, type(getattr(module, name))(state[name]))
    module.build_for_env()
    if module.splits_members:  # the file holds every member: this rank's block of them
        members_resized(checkpoint, module.population_size, lambda t: t[module.own_members])
    if state.get("replay_buffer") is not None:
        module.experience.load_state_dict(state["replay_buffer"])


def members_resized(checkpoint: dict[str, Any], members: int, resize: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The population's tensors in Lightning's ``checkpoint`` (the module's state dict, its optimizers'
    state and per-member learning rates: each with a leading member dimension of ``members``) through
    ``resize``, in new containers (the optimizer's state dict shares its tensors' dicts with the optimizer)."""

    def member_tensor(t: Any) -> Any:
        return resize(t) if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == members else t

    checkpoint["state_dict"] = {k: member_tensor(v) for k, v in checkpoint["state_dict"].items()}
    if "optimizer_states" not in checkpoint:  # weights only
        return
    checkpoint["optimizer_states"] = [
        {
            **optimizer,
            "state": {i: {k: member_tensor(v) for k, v in st.items()} for i, st in optimizer["state"].items()},
            "param_groups": [{k: member_tensor(v) for k, v in g.items()} for g in optimizer["param_groups"]],
        }
        for optimizer in checkpoint["optimizer_states"]
    ]


def resolved_configs(module: Any) -> dict[str, Any]:
    return {"env": module.env_config, "run": module.run_config, "replay": module.replay_config}


def load_module(
    algorithm: type,
    lightning_load: Callable[..., Any],
    path: Any,
    map_location: Any,
    weights_only: bool | None,
    **kwargs: Any,
) -> Any:
    """Lightning's ``load_from_checkpoint`` (``lightning_load``) of a local copy of ``path`` (a URL is
    downloaded), always with ``weights_only=True``; ``weights_only=False`` is refused in one line."""
    if weights_only is False:
        read_checkpoint(path, weights_only=False)  # raises: the refusal, in one line
    with local_copy(path) as local:
        try:
            source: Any = local
            if inspect.getfullargspec(algorithm.__init__).varkw:  # a variant: its parent's fixed arguments out
                checkpoint = torch.load(local, map_location=map_location, weights_only=True)
                if without_fixed_hyperparameters(algorithm, checkpoint):
                    source = io.BytesIO()
                    torch.save(checkpoint, source)
                    source.seek(0)
            return lightning_load(source, map_location=map_location, weights_only=True, **kwargs)
        except pickle.UnpicklingError as e:
            raise ConfigError(f"Checkpoint {path}: {refusal(e)}") from None


def without_fixed_hyperparameters(algorithm: type, checkpoint: dict[str, Any]) -> list[str]:
    """Drop from a checkpoint's hyperparameters those ``algorithm`` fixes: Lightning saves its parent's
    arguments too, and would pass them back through ``**kwargs`` twice. Returns the names dropped."""
    hparams = checkpoint.get("hyper_parameters", {})
    taken = {*constructor_defaults(algorithm), "_instantiator", "_class_path"}
    dropped = [name for name in hparams if name not in taken]
    for name in dropped:
        del hparams[name]
    return dropped


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


def hyperparameter_changes(
    saved: dict[str, Any],
    current: dict[str, Any],
    ignored: tuple[str, ...] = ("env.seed",),
    module: type | None = None,
) -> list[str]:
    """``"name: old -> new"`` for each hyperparameter (nested ones dotted: ``run.total_env_steps``) that
    differs between a checkpoint (or a saved config) and now; ``ignored`` aside (env seeds by default:
    drawn per run, not chosen). ``module``: the class whose arguments these are."""
    old, new = _flatten(saved), _flatten(current)
    skip = {*ignored, "_instantiator", "_class_path"}
    # An argument or config field added since the checkpoint was written, at its default, is how the
    # old code trained.
    added = {k: v for k, v in new.items() if k not in old}
    arguments = constructor_defaults(module) if added and module is not None else {}
    skip |= {k for k, v in added.items() if _field_default(k, arguments) == (v,)}
    keys = [k for k in dict.fromkeys([*old, *new]) if k not in skip]
    return [f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}" for k in keys if old.get(k) != new.get(k)]


def _field_default(key: str, arguments: dict[str, Any]) -> tuple[Any] | tuple[()]:
    """``(default,)`` of the ``run`` or ``replay`` config field a dotted key names (``model.run.population_ddp``)
    or of the module argument it names (``anneal_lr``, ``model.anneal_lr``; ``arguments``: the module's
    ``constructor_defaults``), ``()`` for any other key."""
    parts = key.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    if len(parts) == 1:
        if parts[0] not in arguments:
            return ()
        default = arguments[parts[0]]
    else:
        config = {"run": RunConfig, "replay": ReplayConfig}.get(parts[0]) if len(parts) == 2 else None
        fields = {f.name: f for f in dataclasses.fields(config)} if config else {}
        if parts[-1] not in fields:
            return ()
        field = fields[parts[-1]]
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    return (list(default) if isinstance(default, tuple) else default,)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: list(tree) if isinstance(tree, tuple) else tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}{key}."))
    return {k.rstrip("."): v for k, v in flat.items()}


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
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
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
            try:
                state["replay_buffer"] = self.side_io.load_checkpoint(side, map_location="cpu", weights_only=True)
            except Exception as e:
                raise ConfigError(
                    f"Checkpoint {path} keeps its replay buffer in {side}, which does not load (truncated or "
                    f"corrupt: {type(e).__name__}). Resume from another checkpoint (`--ckpt_path last` takes the "
                    "newest whose files all load), or load the weights only."
                ) from e
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
