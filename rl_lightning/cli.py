"""``rl-lightning``: LightningCLI with RL defaults.

    rl-lightning fit --config configs/ppo/cartpole.yaml
    rl-lightning fit --config configs/ppo/cartpole.yaml --model.learning_rate 3e-4 --seed_everything 1
    rl-lightning validate --config configs/ppo/cartpole.yaml --ckpt_path runs/.../checkpoints/last.ckpt
    rl-lightning fit --config configs/ppo/cartpole.yaml --config configs/trainer/bf16.yaml   # + a preset

Defaults differ from Lightning's where RL needs it: no epoch limit (the module stops at its env-step
budget), a TensorBoard logger under ``runs/``, checkpoints of the best evaluation return
(``best-epoch*.ckpt``) and of the latest state (``last.ckpt``), no sanity validation, logging
every 10 training steps, and a progress bar in env steps (``RLProgressBar``; off with
``--trainer.enable_progress_bar false``).

Beyond Lightning's own options: ``compile: true`` (``--compile true``) compiles the networks with
``torch.compile`` (the ``CompileNetworks`` callback); ``cuda_graphs: true`` runs each update as a
CUDA graph (the ``CUDAGraphs`` callback). ``precision: 16-mixed`` on CPU is refused
with a message: Lightning would run bfloat16 instead of the float16 asked for.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, NoReturn

import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.population import best_member
from rl_lightning.callbacks import LastCheckpoint, RLProgressBar
from rl_lightning.callbacks.compile import CompileNetworks
from rl_lightning.callbacks.cuda_graphs import CUDAGraphs
from rl_lightning.callbacks.preemption import SIGTERM_EXIT_CODE
from rl_lightning.checkpointing import (
    atomic_write,
    checkpoint_env_steps,
    checkpoint_problem,
    download_checkpoint,
    hyperparameter_changes,
    newest_loadable,
)
from rl_lightning.envs.make import EnvConfig, backend_tag
from rl_lightning.errors import CollectionError, ConfigError, DivergenceError, RunFailed
from rl_lightning.tune import tune


class RLArgumentParser(LightningArgumentParser):
    """Bad command-line or config input in one line: which argument, what was wrong (jsonargparse's own
    report is the usage screen plus a nested trace of every type it tried)."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:  # a nested parser: its caller reports the error, with the full key
            super().error(message, ex)
        print(f"rl-lightning: error: {_short_parser_error(message)}", file=sys.stderr)
        print("  (rl-lightning fit --help, or --model.help <Algorithm>, lists the arguments.)", file=sys.stderr)
        raise SystemExit(2)


def _short_parser_error(message: str) -> str:
    """``--model.activation: Expected a typing.Literal[...]. Got value: sigmoidd`` from jsonargparse's
    nested report: the chain of keys and the innermost message."""
    keys: list[str] = []
    detail = ""
    for line in message.splitlines():
        text = line.strip().removeprefix("- ")
        if match := re.fullmatch(r'(?:error: )?Parser key "([^"]+)":', text):
            keys.append(match.group(1))
        elif text and not text.startswith(
            (
                "Does not validate",
                "Subtypes:",
                "Errors:",
                "Given value",
                "Expected a <class 'NoneType'>",
                "Problem with",
            )
        ):
            detail = detail or text  # the first real message is the innermost one
    argument = "--" + ".".join(keys) if keys else ""
    return f"{argument}: {detail}" if argument and detail else (detail or message.strip())


class AtomicSaveConfigCallback(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, written atomically (``atomic_write``) into the run's directory:
    the one its checkpoints go in (``run_dir``), for every logger (Lightning's own would write W&B runs
    into one shared directory and stop on MLflow runs, which have no local log directory). The logger's
    ``hparams.yaml`` beside it is always of the same start."""

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank takes part
        if trainer.is_global_zero:
            where = run_dir(trainer) if trainer.loggers else log_dir
            if "://" in str(where) or self.multifile:
                super().setup(trainer, pl_module, stage)
                return
            text = self.parser.dump(self.config, skip_none=False)
            atomic_write(Path(where) / self.config_filename, lambda f: f.write(text.encode()))
            # A resumed run's hparams.yaml is the first start's (TensorBoard's logger writes it only where
            # none exists): removed, the logger writes this start's, which config.yaml describes.
            (Path(where) / "hparams.yaml").unlink(missing_ok=True)
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


def run_dir(trainer: Trainer) -> Path:
    """The directory of a logged run, where Lightning's ``ModelCheckpoint`` puts ``checkpoints/``:
    ``<save_dir or default_root_dir>/<name>/<version>`` of the first logger."""
    logger = trainer.loggers[0]
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(logger.save_dir or trainer.default_root_dir) / str(logger.name) / version


class RLCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """fit, validate and test (Lightning's ``predict`` needs a predict loop RL agents do not have:
        act with ``model(obs)`` or an exported policy instead)."""
        return {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Two checkpoints: the best evaluation so far, and the latest (to resume from). Lightning 2.6
        # updates `save_last` only when the monitored metric improved, so "last" is its own callback.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/episode_return",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best-epoch{epoch}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_argument(
            "--compile", type=bool, default=False, help="torch.compile the networks (the CompileNetworks callback)."
        )
        parser.add_argument(
            "--cuda_graphs", type=bool, default=False, help="each update as a CUDA graph (the CUDAGraphs callback)."
        )

    def before_instantiate_classes(self) -> None:
        self._check_precision()

    def _check_precision(self) -> None:
        trainer = self._get(self.config, "trainer")
        precision, accelerator = str(trainer.get("precision")), str(trainer.get("accelerator"))
        gpu_available = torch.cuda.is_available() or torch.backends.mps.is_available()
        on_cpu = accelerator == "cpu" or (accelerator == "auto" and not gpu_available)
        if precision in ("16", "16-mixed") and on_cpu:
            raise ConfigError(
                f"precision={precision!r} (float16 mixed precision) is not supported on CPU, and Lightning would "
                "silently run bfloat16 instead. On CPU use --trainer.precision bf16-mixed "
                "(configs/trainer/bf16.yaml); keep 16-mixed for CUDA GPUs (with --trainer.accelerator gpu)."
            )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        # The env-step progress bar by default. Not through trainer_defaults' callbacks: a config listing
        # its own callbacks would drop it, and --trainer.enable_progress_bar false would then be an error.
        config = self._get(self.config_init, "trainer", default={})
        callbacks = list(kwargs.get("callbacks", config.get("callbacks")) or [])
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
            kwargs["callbacks"] = [*callbacks, RLProgressBar()]
        trainer = super().instantiate_trainer(**kwargs)
        if self._get(self.config_init, "compile", default=False):
            trainer.callbacks.append(CompileNetworks())
        if self._get(self.config_init, "cuda_graphs", default=False):
            trainer.callbacks.append(CUDAGraphs())
        return trainer

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Trainer:
        # --trainer.enable_checkpointing false turns off the CLI's two checkpoint callbacks too (Lightning
        # would refuse them: "configured with enable_checkpointing=False but found ModelCheckpoint").
        if config.get("enable_checkpointing") is False:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        if self.subcommand not in ("validate", "test"):
            return super()._instantiate_trainer(config, callbacks)
        # validate and test print their results and write nothing: a logger would open a new run version
        # (runs/<name>/version_<n+1>) holding one point, and config.yaml would describe no training.
        callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        save_config, self.save_config_callback = self.save_config_callback, None
        try:
            return super()._instantiate_trainer({**config, "logger": False}, callbacks)
        finally:
            self.save_config_callback = save_config

    def _parse_ckpt_path(self) -> None:
        """Resolve and check ``--ckpt_path`` (``_continue_run``), then, only where no model is configured
        (``rl-lightning validate --ckpt_path x.ckpt`` alone), take the model's class and hyperparameters
        from the checkpoint as Lightning does. Where a config or ``--model.*`` arguments give them,
        they win: resuming with ``--model.run.total_env_steps`` raised extends the budget whether the
        checkpoint is named ``last`` or by its path."""
        subcommand = self.config.get("subcommand")
        if subcommand in ("fit", "validate", "test"):
            self._name_run(subcommand)
            self._continue_run(subcommand)
            if self.config[subcommand].get("model") is None:
                super()._parse_ckpt_path()

    def _name_run(self, subcommand: str) -> None:
        """A logger without a run name (TensorBoard's, CSV's and W&B's ``name``, MLflow's ``run_name``)
        names the run ``<algorithm>_<env>``: runs of different algorithms or envs never share a
        directory or a name, whatever the config file was."""
        config = self.config[subcommand]
        logger, model = config.trainer.get("logger"), config.get("model")
        if not hasattr(logger, "init_args") or model is None:
            return
        key = "run_name" if str(logger.class_path).endswith("MLFlowLogger") else "name"
        if logger.init_args.get(key) is not None:
            return
        env = model.init_args.get("env") if hasattr(model, "init_args") else None
        env_id = (env.get("env_id") if env is not None else None) or EnvConfig().env_id
        algorithm = str(model.class_path).rsplit(".", 1)[-1].lower()
        backend = env.get("backend") if env is not None else None
        backend = backend_tag(backend)
        logger.init_args[key] = f"{algorithm}_{env_slug(env_id)}{backend}"

    def _continue_run(self, subcommand: str) -> None:
        """Resolve ``--ckpt_path`` and say where the run starts from.

        ``last`` is this run's newest checkpoint: among the versions of the experiment the config's logger
        names (``runs/<name>/version_*``), the newest whose saved ``config.yaml`` trains what this config
        trains (the model's arguments and the seed), else the newest that differs only in its budget
        (``run.total_env_steps``: a resume that extends the run), else the newest of all, with a warning
        naming it and each difference. Within a version, the newest checkpoint whose
        files all load (its replay side file included); one that does not is skipped and named. An
        explicit path must load too; ``~`` is expanded; a URL (http, https, or any fsspec protocol) is
        downloaded to a temporary file. Every file is read with ``weights_only=True``: a checkpoint never
        runs code. ``fit`` then continues that run's logger version, so the TensorBoard curves simply
        continue. ``validate`` and ``test`` need a checkpoint: without one they would evaluate untrained
        weights."""
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if subcommand in ("validate", "test") and not ckpt_path:
            raise ConfigError(
                f"{subcommand} evaluates a trained agent: give --ckpt_path (a checkpoint file, or `last` for "
                "the newest checkpoint of the run the config's logger names)."
            )
        if not ckpt_path:
            return
        logger = config.trainer.get("logger")
        init_args = logger.init_args if hasattr(logger, "init_args") else {}
        run_root = Path(init_args.get("save_dir") or ".") / (init_args.get("name") or "default")
        if ckpt_path == "last":
            path = self._last_of_this_run(subcommand, run_root)
        elif "://" in str(ckpt_path):
            path = self._download(str(ckpt_path))
        else:
            path = Path(ckpt_path).expanduser()
            if not path.is_file():
                raise ConfigError(f"--ckpt_path {ckpt_path}: no such file.")
            if problem := checkpoint_problem(path):
                found, _ = newest_loadable([p for p in path.parent.glob("*.ckpt") if p != path])
                hint = f" The newest checkpoint beside it that loads: {found}." if found else ""
                raise ConfigError(f"--ckpt_path {ckpt_path}: {problem}.{hint}")
        config.ckpt_path = str(path)
        version = _version(path)
        resumes = subcommand == "fit" and version is not None and init_args.get("version") is None
        if resumes and hasattr(logger, "init_args"):
            logger.init_args.version = version
        if rank_zero_only.rank == 0:
            verb = "resuming" if subcommand == "fit" else f"{subcommand}: evaluating"
            run = f" run {path.parent.parent}," if path.parent.name == "checkpoints" else ""
            print(
                f"rl-lightning: {verb}{run} checkpoint {path.name} at env step {checkpoint_env_steps(path)}",
                file=sys.stderr,
                flush=True,
            )

    def _last_of_this_run(self, subcommand: str, run_root: Path) -> Path:
        """``--ckpt_path last`` (see ``_continue_run``)."""
        versions = sorted(
            (v for v in run_root.glob("version_*") if v.is_dir() and any(v.glob("checkpoints/*.ckpt"))),
            key=lambda v: max(p.stat().st_mtime for p in v.glob("checkpoints/*.ckpt")),
            reverse=True,
        )
        config = self._plain_config(subcommand)
        module = _model_class(config)
        differences = {v: _config_changes(_read_yaml(v / "config.yaml"), config, module) for v in versions}

        def rank(version: Path) -> int:  # same config first, then the same but for the budget (a resume
            changes = differences[version]  # that extends the run), then any, newest first within each
            return 0 if not changes else 1 if all(c.startswith("model.run.total_env_steps:") for c in changes) else 2

        skipped: list[tuple[Path, str]] = []
        for version in sorted(versions, key=rank):
            found, unreadable = newest_loadable(list(version.glob("checkpoints/*.ckpt")))
            skipped += unreadable
            if found is not None:
                break
        else:
            tried = "".join(f" {p}: {why}." for p, why in skipped)
            raise ConfigError(
                f"--ckpt_path last: no checkpoint that loads under {run_root}/version_*/checkpoints.{tried}"
            )
        notes = [f"Skipped {p}: {why}." for p, why in skipped]
        if rank(version) == 2:
            notes.append(
                f"No run under {run_root} was trained with this config; taking the newest, {version}, whose "
                f"config.yaml differs (saved -> given): {'; '.join(differences[version])}."
            )
        if notes and rank_zero_only.rank == 0:
            print(f"rl-lightning: warning: {' '.join(notes)} Using {found}.", file=sys.stderr, flush=True)
        return found

    def _plain_config(self, subcommand: str) -> dict[str, Any]:
        """The config as ``config.yaml`` would hold it."""
        with warnings.catch_warnings():  # jsonargparse >= 4.49 calls skip_none skip_unset (and warns)
            warnings.simplefilter("ignore", DeprecationWarning)
            dumped = self._parser(subcommand).dump(self.config[subcommand], skip_none=False)
        return yaml.safe_load(dumped) or {}

    def _download(self, url: str) -> Path:
        """A remote checkpoint, downloaded to a temporary file that lives as long as the process, and
        checked like a local one (``weights_only=True``)."""
        directory = Path(tempfile.mkdtemp(prefix="rl-lightning-ckpt-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = download_checkpoint(url, directory)  # once: local_copy's directory would go at its end
        if problem := checkpoint_problem(path):
            raise ConfigError(f"--ckpt_path {url}: {problem}.")
        return path

    def after_fit(self) -> None:
        """Say where the run went: its directory (TensorBoard) and its checkpoints."""
        trainer = self.trainer
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank takes part
        if not trainer.is_global_zero:
            return
        lines = []
        if isinstance(trainer.logger, TensorBoardLogger):
            lines.append(f"Run: {log_dir} (tensorboard --logdir {Path(log_dir).parent.parent})")
        elif trainer.logger is not None:  # without a logger log_dir is the cwd
            lines.append(f"Run: {run_dir(trainer)} ({type(trainer.logger).__name__})")
        for cb in trainer.checkpoint_callbacks:
            if isinstance(cb, LastCheckpoint):  # keeps its one file as its "best"
                if cb.best_model_path or cb.last_model_path:
                    lines.append(f"Checkpoint to resume from: {cb.best_model_path or cb.last_model_path}")
            elif cb.best_model_path:
                score = f" ({cb.monitor} {float(cb.best_model_score):g})" if cb.best_model_score is not None else ""
                lines.append(f"Best checkpoint: {cb.best_model_path}{score}")
        if (best := best_member(self.model, trainer.callback_metrics)) is not None:
            lines.append(best)
        print("\n".join(lines), flush=True)

    def _run_subcommand(self, subcommand: str) -> None:
        """Run it; a run that fails is reported in one line with what was lost and the way on, and one
        that failed before its first env step leaves no run directory behind. A preempted fit (SIGTERM)
        says where to continue and exits 143 (``PreemptionExitCode``)."""
        new_run = self._new_run_dir(subcommand)
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:
            if self.trainer.is_global_zero:
                print(f"rl-lightning: {_describe_preemption(self.trainer, subcommand)}", file=sys.stderr, flush=True)
            raise
        except (ConfigError, KeyboardInterrupt):
            self._remove_untrained_run(new_run)
            raise
        except Exception as e:
            self._remove_untrained_run(new_run)
            raise RunFailed(_describe_failure(e, self.trainer, subcommand)) from e

    def _new_run_dir(self, subcommand: str) -> Path | None:
        """The directory this fit's file logger is about to create, or ``None`` if it exists already
        (a resumed run) or the logger is not a local file logger (MLflow's and W&B's start remote runs)."""
        trainer = self.trainer
        logger = trainer.logger
        if subcommand != "fit" or not trainer.is_global_zero or not isinstance(logger, TensorBoardLogger | CSVLogger):
            return None
        path = run_dir(trainer)
        return None if path.exists() else path

    def _remove_untrained_run(self, path: Path | None) -> None:
        if path is None or getattr(self.model, "env_steps", 0) > 0 or not path.is_dir():
            return
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):  # the experiment's directory too, if this run was its only one
            path.parent.rmdir()


def _describe_preemption(trainer: Trainer, subcommand: str) -> str:
    module = trainer.lightning_module
    where = f" at env step {module.env_steps}" if hasattr(module, "env_steps") else ""
    dirs = {Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)}
    found, _ = newest_loadable([p for d in dirs if d.is_dir() for p in d.glob("*.ckpt")])
    way_on = (
        f" Newest checkpoint: {found} (env step {checkpoint_env_steps(found)}); continue with --ckpt_path {found}."
        if found is not None and subcommand == "fit"
        else ""
    )
    return f"{subcommand} stopped by SIGTERM{where} (preempted); exit status {SIGTERM_EXIT_CODE}.{way_on}"


def _describe_failure(error: BaseException, trainer: Trainer, subcommand: str) -> str:
    """One line: what failed (the error names the env and env step, or the file), and the newest
    checkpoint of the run that loads, found by loading the candidates."""
    module = trainer.lightning_module
    where = f" at env step {module.env_steps}" if module is not None and hasattr(module, "env_steps") else ""
    what = str(error) if isinstance(error, CollectionError | DivergenceError) else f"{type(error).__name__}: {error}"
    what = what.rstrip(".")
    if isinstance(error, OSError) and error.filename and str(error.filename) not in what:
        what += f" ({error.filename})"
    dirs = {Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)}
    found, _ = newest_loadable([p for d in dirs if d.is_dir() for p in d.glob("*.ckpt")])
    way_on = (
        f" Newest checkpoint that loads: {found} (env step {checkpoint_env_steps(found)}); continue with "
        f"--ckpt_path {found}."
        if found is not None and subcommand == "fit"
        else (" No checkpoint was written." if subcommand == "fit" else "")
    )
    return f"{subcommand} failed{where}: {what}.{way_on} (Full traceback: RL_LIGHTNING_DEBUG=1.)"


def debugging() -> bool:
    """``RL_LIGHTNING_DEBUG`` set to anything but empty, 0, false, no or off: show tracebacks."""
    return os.environ.get("RL_LIGHTNING_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def env_slug(env_id: str) -> str:
    """``cartpole`` for ``CartPole-v1``, ``pong`` for ``ALE/Pong-v5``, ``gridreach`` for
    ``rl_lightning.envs.examples:GridReach-v0``."""
    name = re.sub(r"-v\d+$", "", env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    return re.sub(r"\W+", "_", name).strip("_").lower() or "env"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def _config_changes(saved: dict[str, Any], given: dict[str, Any], module: type | None = None) -> list[str]:
    """``"key: saved -> given"`` for what two run configs train differently: the model's arguments (the
    number of evaluation episodes aside) and the seed (a seed drawn at random, ``seed_everything: true``,
    matches any)."""
    if not saved:
        return ["(no config.yaml)"]
    changes = hyperparameter_changes(
        {"model": _model_arguments(saved.get("model"))},
        {"model": _model_arguments(given.get("model"))},
        ignored=("model.run.eval_episodes",),  # how precisely a run is evaluated, not what it trains
        module=module,
    )
    seed = given.get("seed_everything")
    if seed not in (True, None) and saved.get("seed_everything") != seed:
        changes.append(f"seed_everything: {saved.get('seed_everything')!r} -> {seed!r}")
    return changes


def _model_class(config: dict[str, Any]) -> type | None:
    """The class a parsed config's ``model.class_path`` names: the parser imported it already (none is
    imported here)."""
    model = config.get("model")
    module, _, name = str(model.get("class_path") if isinstance(model, dict) else "").rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)
    return cls if isinstance(cls, type) else None


def _model_arguments(model: Any) -> dict[str, Any]:
    if not isinstance(model, dict):
        return {}
    return {"class_path": model.get("class_path"), **(model.get("init_args") or {})}


def _version(path: Path) -> int | None:
    match = next((re.fullmatch(r"version_(\d+)", part) for part in path.parts if part.startswith("version_")), None)
    return int(match.group(1)) if match else None


def trainer_defaults() -> dict[str, Any]:
    return {
        "max_epochs": -1,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 10,
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": "runs", "name": None},  # None: <algorithm>_<env> (RLCLI._name_run)
        },
    }


def run_cli(args: list[str] | None, callbacks: list[Callback] | None = None) -> RLCLI:
    """The CLI run on ``args``; ``callbacks`` are added to the Trainer (``rl-lightning tune``'s reporting)."""
    return RLCLI(
        RLModule,
        parser_class=RLArgumentParser,
        subclass_mode_model=True,
        trainer_defaults={**trainer_defaults(), **({"callbacks": callbacks} if callbacks else {})},
        save_config_callback=AtomicSaveConfigCallback,
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )


def fit_trial(args: list[str], callback: Callback) -> Trainer:
    """One trial of ``rl-lightning tune``: ``rl-lightning fit`` with ``args`` and ``callback``."""
    return run_cli(["fit", *args], [callback]).trainer


def main(args: list[str] | None = None) -> None:
    argv = sys.argv[1:] if args is None else args
    # `module:EnvId` ids and `--trainer.callbacks+=mymodule.Callback` import from the current directory, as
    # `python -m` does (a console script's path starts at its own bin/ directory instead).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    # Lightning 2.6 on torch 2.13 warns on every fit about its own pytree helper: nothing a user can act on.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    try:
        check_config_files(argv)
        if argv[:1] == ["tune"]:
            tune(argv[1:], fit_trial)
        else:
            run_cli(args)
    except Exception as e:
        # Bad input is the user's to fix, not ours to debug: the message alone, no traceback. jsonargparse
        # wraps errors raised while instantiating the model, so look for ours along the cause chain. A run
        # that failed (RunFailed) is reported in one line too, unless RL_LIGHTNING_DEBUG is set.
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, ConfigError | RunFailed):
            cause = cause.__cause__ or cause.__context__
        if cause is None or (isinstance(cause, RunFailed) and debugging()):
            raise
        print(f"rl-lightning: error: {cause}", file=sys.stderr)
        raise SystemExit(2 if isinstance(cause, ConfigError) else 1) from None
    finally:
        # Under DDP, a process group left open can abort the process at interpreter exit (SIGABRT).
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def check_config_files(argv: list[str]) -> None:
    """Each ``--config FILE`` parses as YAML, or one line naming the file, line and column (jsonargparse
    reports the first of YAML's messages without its position)."""
    files = [b for a, b in zip(argv, argv[1:], strict=False) if a == "--config"]
    files += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for name in files:
        path = Path(name).expanduser()
        if not path.is_file():
            continue  # jsonargparse reports it (or it is a YAML string given inline)
        try:
            yaml.safe_load(path.read_text())
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            context = f" ({e.context})" if e.context else ""
            raise ConfigError(f"{name}{where}: {e.problem or e}{context}.") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{name}: {e}") from None


if __name__ == "__main__":
    main()
