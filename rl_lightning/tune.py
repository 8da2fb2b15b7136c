"""``rl-lightning tune``: an Optuna study over a config's hyperparameters (the ``tune`` extra).

    rl-lightning tune --config configs/ppo/cartpole.yaml --space configs/ppo/cartpole.tune.yaml --n_trials 20
    rl-lightning tune --config ... --space ... --storage postgresql://user:pw@host/db   # one study, many machines
    rl-lightning tune --config configs/ppo/cartpole.yaml --seeds 0-4 --jobs 2           # no search: 5 seeds

Every trial is an ordinary ``rl-lightning fit`` of the config with the trial's values on top (any other
``--model.*`` / ``--trainer.*`` argument applies to all trials), in its own run directory
``runs/tune/<study>/trial_<n>`` with its config, TensorBoard logs and checkpoints. The objective is the
evaluation return (``val/episode_return``): its best or its last value (``--objective``). Each
evaluation is reported to Optuna, whose pruner (``--pruner median|halving|none``) stops a bad trial
there. Any number of ``rl-lightning tune`` processes given the same ``--storage`` and ``--study_name``
work on one study: that is Optuna's distributed mode, through its database. A worker killed mid-trial
leaves that trial to the others, who mark it failed once its heartbeat is ``--heartbeat`` x 2 seconds
old. At the end: ``runs/tune/<study>/best.yaml`` (the best trial's config, ready for ``rl-lightning fit
--config``), a table of the trials, and, with matplotlib (the ``plot`` extra), the optimization
history and the hyperparameter importances as PNG beside it.

``--seeds 0,1,2`` (or ``0-4``) runs the config once per seed instead, and reports the final and best
returns per seed and their mean and interquartile mean with bootstrap confidence intervals, with the
curves in ``curves.png``. An algorithm that trains populations (PPO, A2C, DQN, C51, QR-DQN, SAC, TQC,
TD3, DDPG; docs/population.md) trains the seeds as one population, one fit whose member ``k`` is the run
of seed ``k`` (``run.population_seeds``); ``--jobs N`` then splits the seeds into N populations, one per
worker process. Other algorithms, a config that sets its own ``run.population`` or an option no
population takes (``population_excludes``: ``normalize_obs``, ...), and ``--no_population`` run one fit
per seed, each a queued trial of the study, ``--jobs N`` of them at a time. ``--jobs N`` runs N worker
processes on this machine, on either kind of study. ``--trial_seeds`` fits each trial of a search on its
seeds the same way: one population, or (``--no_population``) one fit per seed.

The search space is a YAML file of model arguments (dotted for ``env``, ``run`` and ``replay``
fields), each a range or a list of choices::

    learning_rate: {low: 1.0e-5, high: 1.0e-2, log: true}   # float, log-uniform
    update_epochs: {low: 2, high: 10}                       # int (both bounds ints)
    num_steps: {choices: [64, 128, 256]}                    # categorical
    replay.batch_size: {choices: [64, 256]}
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import math
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.callbacks import Callback

from rl_lightning.config import ReplayConfig, RunConfig, constructor_defaults
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import ConfigError, RunFailed, check
from rl_lightning.plotting import plot_learning_curves, score_summary

NESTED = {"env": EnvConfig, "run": RunConfig, "replay": ReplayConfig}
MISSING_EXTRA = 'rl-lightning tune needs Optuna: pip install "rl-lightning[tune]" (or pip install optuna).'


@dataclasses.dataclass(frozen=True)
class Param:
    """One dimension of the search space: a float or int range (``log``: log-uniform) or choices."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None

    def suggest(self, trial: Any) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.name, self.low, self.high, log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)


def load_space(path: str | Path, algorithm: type | None) -> list[Param]:
    """The search space in ``path``, checked against ``algorithm``'s arguments before any trial runs:
    unknown names, bad ranges and empty choices are one-line ``ConfigError``s."""
    path = Path(path)
    check(path.is_file(), f"--space {path}: no such file.")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--space {path}: not valid YAML ({e}).") from None
    check(isinstance(raw, dict) and raw, f"--space {path}: expected a mapping of argument -> range or choices.")
    params = []
    for name, spec in raw.items():
        where = f"--space {path}: {name}"
        _check_name(str(name), algorithm, where)
        check(isinstance(spec, dict), f"{where}: expected {{low: .., high: ..}} or {{choices: [..]}}, got {spec!r}.")
        unknown = set(spec) - {"low", "high", "log", "choices"}
        check(not unknown, f"{where}: unknown field(s) {sorted(unknown)}; use low, high, log or choices.")
        if "choices" in spec:
            choices = spec["choices"]
            check(isinstance(choices, list) and choices, f"{where}: choices must be a non-empty list.")
            check(set(spec) == {"choices"}, f"{where}: give either choices or low/high, not both.")
            params.append(Param(str(name), choices=tuple(choices)))
            continue
        low, high, log = spec.get("low"), spec.get("high"), bool(spec.get("log", False))
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high))
        check(numbers, f"{where}: low and high must both be finite numbers, got {low!r} and {high!r}.")
        check(low < high, f"{where}: low ({low}) must be below high ({high}).")
        check(not log or low > 0, f"{where}: a log range needs low > 0, got {low}.")
        params.append(Param(str(name), low, high, log))
    return params


def _check_name(name: str, algorithm: type | None, where: str) -> None:
    if algorithm is None:
        return
    arguments = set(constructor_defaults(algorithm))  # a variant's too: its parent's through **kwargs
    head, _, field = name.partition(".")
    check(head in arguments, f"{where}: {algorithm.__name__} has no argument {head!r}.")
    if field:
        check(head in NESTED, f"{where}: only env, run and replay take dotted fields.")
        fields = {f.name for f in dataclasses.fields(NESTED[head])}
        check(field in fields, f"{where}: {head} has no field {field!r} (it has {', '.join(sorted(fields))}).")


def algorithm_of(config_paths: list[str]) -> type | None:
    """The algorithm class the configs name (``model.class_path``), for checking the search space."""
    class_path = None
    for path in config_paths:
        check(Path(path).is_file(), f"--config {path}: no such file.")
        model = (yaml.safe_load(Path(path).read_text()) or {}).get("model")
        if isinstance(model, dict) and model.get("class_path"):
            class_path = model["class_path"]
    if class_path is None:
        return None
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module or "rl_lightning"), name, None)


def as_arguments(values: dict[str, Any]) -> list[str]:
    """``{"learning_rate": 1e-3, "replay.batch_size": 64}`` -> ``--model.learning_rate 0.001 ...``."""
    args = []
    for name, value in values.items():
        args += [f"--model.{name}", yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")]
    return args


class ReportToTrial(Callback):
    """Report each evaluation return to the Optuna trial against env steps; on the pruner's word stop
    the fit (after this evaluation) and remember it, so the objective marks the trial pruned. A
    population's (``val/episode_return`` is its members' mean) are also kept member by member."""

    def __init__(self, trial: Any | None) -> None:
        self.trial, self.returns, self.member_returns, self.pruned = trial, [], [], False

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or "val/episode_return" not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics["val/episode_return"])
        self.returns.append(value)
        members = range(getattr(pl_module, "population", 1))
        metrics = trainer.callback_metrics
        self.member_returns.append([float(metrics.get(f"member_{k}/val/episode_return", value)) for k in members])
        if self.trial is None:  # a trial's second seed and on: only recorded
            return
        self.trial.report(value, step=int(pl_module.env_steps))
        if self.trial.should_prune():
            self.pruned = trainer.should_stop = True

    def member_scores(self) -> list[tuple[float, float]]:
        """Each member's (final, best) evaluation return: a plain run's own, a population's member by member."""
        return [(returns[-1], max(returns)) for returns in zip(*self.member_returns, strict=True)]


Fit = Callable[[list[str], Callback], Any]  # (fit arguments, callback) -> the fitted Trainer


def config_init_args(config_paths: list[str]) -> list[dict[str, Any]]:
    """Each config's model arguments (``model.init_args``), in order (the later ones win)."""
    out = []
    for path in config_paths:
        model = (yaml.safe_load(Path(path).read_text()) or {}).get("model") or {}
        init_args = (model.get("init_args") or {}) if isinstance(model, dict) else {}
        out.append(init_args if isinstance(init_args, dict) else {})
    return out


def sets_population(config_paths: list[str], fit_args: list[str]) -> bool:
    """Whether the configs or the arguments set ``run.population`` or ``run.population_seeds`` themselves."""
    for init_args in config_init_args(config_paths):
        run = init_args.get("run")
        if isinstance(run, dict) and {"population", "population_seeds"} & set(run):
            return True
    return any(a.startswith("--model.run") and "population" in a for a in fit_args)


def sets_population_excludes(algorithm: type, config_paths: list[str], fit_args: list[str]) -> bool:
    """Whether the configs or the arguments turn on one of the algorithm's ``population_excludes``
    (``normalize_obs: true``, ...): its seeds then cannot be one population."""
    values: dict[str, Any] = {}
    for init_args in config_init_args(config_paths):
        values.update(init_args)
    for name in algorithm.population_excludes:  # --model.name value, --model.name=value (the last one counts)
        for i, arg in enumerate(fit_args):
            flag, eq, value = arg.partition("=")
            if flag in (f"--model.{name}", f"--model.init_args.{name}") and (eq or i + 1 < len(fit_args)):
                values[name] = value if eq else fit_args[i + 1]
    return any(_is_true(values.get(name)) for name in algorithm.population_excludes)


def _is_true(value: Any) -> bool:
    """A config's ``true``, or a command line's (``true``, ``True``, ``yes``... as YAML reads them)."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:  # not YAML: not true (the fit reports it)
            return False
    return value is True


def seed_arguments(seeds: list[int]) -> list[str]:
    """The fit arguments of a run of ``seeds``: none, one seed, or a population of them (reproducible: the
    population's own RNG stream, which acting and minibatches draw from, seeded with its first seed)."""
    if len(seeds) < 2:
        return [arg for seed in seeds for arg in ("--seed_everything", str(seed))]
    return ["--model.run.population_seeds", f"[{','.join(map(str, seeds))}]", "--seed_everything", str(seeds[0])]


def split_seeds(seeds: list[int], parts: int) -> list[list[int]]:
    """``seeds`` in ``parts`` runs of consecutive seeds (or fewer: one seed each), sizes differing by one at most."""
    parts = min(parts, len(seeds))
    size, extra = divmod(len(seeds), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [seeds[a:b] for a, b in itertools.pairwise(bounds)]


def redact(url: str) -> str:
    """A storage URL as it may be printed: without its password (all before the host, where the URL
    does not parse)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        scheme, sep, rest = url.rpartition("://") if "://" in url else ("", "", url)
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


# The package to pip install for a DBAPI module SQLAlchemy's dialects import, where the names differ.
DRIVER_PACKAGES = {
    "psycopg": '"psycopg[binary]"',
    "psycopg2": "psycopg2-binary",
    "MySQLdb": "mysqlclient",
    "mysql": "mysql-connector-python",
}


def check_storage(url: str) -> None:
    """A ``ConfigError`` in one line, before any work and without connecting, where ``url`` is no
    SQLAlchemy URL, names no dialect it has, or its driver (the DBAPI module) does not import; the
    password is never in it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    where = f"--storage {redact(url)}"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"{where}: not a database URL; expected dialect[+driver]://user:password@host[:port]/database "
            "or sqlite:///path/to/study.db."
        ) from None
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise ConfigError(
            f"{where}: SQLAlchemy has no dialect {parsed.drivername!r}; use e.g. sqlite:///study.db, "
            "postgresql://user:password@host/db or mysql+pymysql://user:password@host/db."
        ) from None
    try:
        import_dbapi = getattr(dialect, "import_dbapi", None) or dialect.dbapi  # SQLAlchemy 2 or 1.4
        import_dbapi()
    except ModuleNotFoundError as e:
        module = e.name or "its driver"
        package = DRIVER_PACKAGES.get(module.split(".")[0], module.split(".")[0])
        raise ConfigError(
            f"{where}: the Python module {module}, SQLAlchemy's driver for {parsed.drivername}, is not installed "
            f"(pip install {package})."
        ) from None
    except ImportError as e:
        raise ConfigError(
            f"{where}: SQLAlchemy's driver for {parsed.drivername} does not import: {_one_line(e, parsed.password)}"
        ) from None


def _one_line(error: BaseException, password: Any = None) -> str:
    """``error``'s message on one line, without SQLAlchemy's SQL and link, and without ``password``."""
    error = getattr(error, "orig", None) or error  # the DBAPI's own error, under SQLAlchemy's wrapper
    text = " ".join(str(error).split("[SQL:")[0].split("(Background on this error")[0].split())
    if password:
        text = text.replace(str(password), "***")
    return text or type(error).__name__


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="rl-lightning tune", description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--space", help="YAML search space (see the module docstring)")
    what.add_argument("--seeds", help="no search: the config on these seeds, e.g. 0,1,2 (or 0-4)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes on this machine, sharing the study")
    p.add_argument(
        "--trial_seeds",
        help="fit each trial on these seeds (e.g. 0,1,2) and optimize the mean: a value on one seed overfits",
    )
    p.add_argument(
        "--no_population",
        action="store_true",
        help="--seeds, --trial_seeds: one fit per seed, even for an algorithm that trains them as one population",
    )
    p.add_argument("--n_trials", type=int, default=20, help="trials this study runs in all (all workers)")
    p.add_argument("--study_name", help="default: from the config's file name, e.g. ppo_cartpole")
    p.add_argument("--storage", help="an Optuna storage URL; default: sqlite:///runs/tune/<study>/study.db")
    p.add_argument("--objective", choices=["best", "last"], default="best", help="of val/episode_return")
    p.add_argument("--pruner", choices=["median", "halving", "none"], default="median")
    p.add_argument("--heartbeat", type=int, default=60, help="seconds; a trial silent 2x this long is failed")
    p.add_argument("--sampler_seed", type=int, help="seed of the TPE sampler")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one of --jobs: no report
    p.add_argument("--worker_trials", type=int, help=argparse.SUPPRESS)  # --seeds: queued trials it runs
    p.add_argument("--worker_index", type=int, default=0, help=argparse.SUPPRESS)  # of --jobs: its sampler seed
    known, fit_args = p.parse_known_args(argv)
    check(known.n_trials >= 1, f"--n_trials must be >= 1, got {known.n_trials}.")
    check(known.heartbeat >= 1, f"--heartbeat must be >= 1, got {known.heartbeat}.")
    check(known.jobs >= 1, f"--jobs must be >= 1, got {known.jobs}.")
    known.trial_seeds = parse_seeds(known.trial_seeds, "--trial_seeds") if known.trial_seeds else None
    if known.seeds is not None:
        known.seeds = parse_seeds(known.seeds)
        known.n_trials = len(known.seeds)
    return known, fit_args


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """``0,1,2`` or ``0-4`` (or a mix) -> the seeds, each once."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            seeds += range(int(low), int(high or low) + 1)
    except ValueError:
        raise ConfigError(f"{option} {text}: expected integers like 0,1,2 or 0-4.") from None
    check(bool(seeds), f"{option} {text}: no seed.")
    return sorted(set(seeds))


def config_paths(fit_args: list[str]) -> list[str]:
    paths = [fit_args[i + 1] for i, a in enumerate(fit_args[:-1]) if a == "--config"]
    return paths + [a.split("=", 1)[1] for a in fit_args if a.startswith("--config=")]


def open_storage(url: str, heartbeat: int) -> Any:
    """Optuna's RDB storage with heartbeats (a trial silent for ``2 x heartbeat`` s is failed by the next
    worker that starts one). Workers started together race to create the schema of a new database:
    the losers retry and find it made."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    def stale(study: Any, trial: Any) -> None:
        print(f"rl-lightning tune: trial {trial.number} stopped reporting (its worker died); marked failed.")

    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat, grace_period=2 * heartbeat, heartbeat_stale_trial_callback=stale
                )
        except ImportError as e:  # check_storage catches this first; Optuna's wrapper names no module
            cause = _one_line(e.__cause__ or e)
            raise ConfigError(f"--storage {redact(url)}: its driver does not import: {cause}") from None
        except SQLAlchemyError as e:
            if attempt == 4:  # unreachable, refused, or no such database: one line, no password
                from sqlalchemy.engine import make_url

                raise ConfigError(
                    f"--storage {redact(url)}: cannot open the database: {_one_line(e, make_url(url).password)}"
                ) from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def tune(argv: list[str], fit: Fit, pruner: Any = None) -> Any:
    """Run (or join) the study ``argv`` describes, fitting each trial with ``fit``; returns the study.
    ``pruner`` replaces ``--pruner`` (tests)."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(MISSING_EXTRA) from None
    args, fit_args = parse_args(argv)
    if args.storage is not None:
        check_storage(args.storage)
    configs = config_paths(fit_args)
    algorithm = algorithm_of(configs)
    space = load_space(args.space, algorithm) if args.space else []
    # Seeds as one population where the algorithm trains them so and the user asked for none of their own.
    population = bool(algorithm and algorithm.trains_populations) and not args.no_population
    population = population and not sets_population(configs, fit_args)
    population = population and not sets_population_excludes(algorithm, configs, fit_args)
    check(args.study_name or configs, "give --study_name (no --config to name the study after).")
    study_name = args.study_name or "_".join(Path(configs[0]).with_suffix("").parts[-2:])
    if args.seeds and not args.study_name:
        study_name += "_seeds"
    root = Path("runs") / "tune" / study_name
    storage_url = args.storage or f"sqlite:///{root / 'study.db'}"
    if args.storage is None:
        root.mkdir(parents=True, exist_ok=True)
    storage = open_storage(storage_url, args.heartbeat)
    if args.seeds:
        sampler, pruner = optuna.samplers.RandomSampler(), optuna.pruners.NopPruner()  # every trial is queued
    else:
        # Each --jobs worker its own seed: with one seed they would all suggest the same trials.
        seed = None if args.sampler_seed is None else args.sampler_seed + args.worker_index
        sampler = optuna.samplers.TPESampler(seed=seed)
    if pruner is None:
        pruner = {
            "median": optuna.pruners.MedianPruner(n_startup_trials=3),
            "halving": optuna.pruners.SuccessiveHalvingPruner(),
            "none": optuna.pruners.NopPruner(),
        }[args.pruner]
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        direction="maximize",
        load_if_exists=True,
        pruner=pruner,
        sampler=sampler,
    )
    print(f"rl-lightning tune: study {study_name!r} in {redact(storage_url)}", flush=True)

    def objective(trial: Any) -> float:
        if args.seeds:
            # Queued with its seeds (a parameter could not change between runs): one, or a population of them.
            seeds = trial.user_attrs.get("seeds") or [trial.user_attrs["seed"]]
            name = f"seed_{seeds[0]}" if len(seeds) == 1 else f"seeds_{'_'.join(map(str, seeds))}"
            runs, values = [(f"tune/{study_name}/{name}", seeds)], {}
        else:
            values = {p.name: p.suggest(trial) for p in space}
            name = f"tune/{study_name}/trial_{trial.number}"
            if args.trial_seeds and population:
                runs = [(name, args.trial_seeds)]
            else:
                runs = [(f"{name}/seed_{s}", [s]) for s in args.trial_seeds] if args.trial_seeds else [(name, [])]
        scores = []
        for i, (run_name, seeds) in enumerate(runs):
            report = ReportToTrial(trial if i == 0 else None)  # the first run's evaluations decide pruning
            seed_args = seed_arguments(seeds)
            run_args = [*fit_args, *seed_args, *as_arguments(values), "--trainer.logger.init_args.name", run_name]
            trainer = fit(run_args, report)
            if i == 0:
                trial.set_user_attr("run_dir", str(trainer.log_dir))
            check(bool(report.returns), "the trial ended without an evaluation: nothing to optimize.")
            if report.pruned:
                raise optuna.TrialPruned(f"pruned at {report.returns[-1]:g}")
            # Per seed; a run of its own config (no seeds, or its own population) scores as a whole.
            scores += report.member_scores() if len(seeds) > 1 else [(report.returns[-1], max(report.returns))]
        if args.seeds and len(scores) > 1:
            trial.set_user_attr("members", [[s, f, b] for s, (f, b) in zip(seeds, scores, strict=True)])
        trial.set_user_attr("final", sum(f for f, _ in scores) / len(scores))
        trial.set_user_attr("best", sum(b for _, b in scores) / len(scores))
        return trial.user_attrs["best"] if args.objective == "best" else trial.user_attrs["final"]

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.seeds and not args.worker:
        # Each seed one queued trial, popped by one worker; or each worker's share of the seeds one population.
        queued = queue_seeds(study, args.seeds, args.jobs if population else None)
        if queued and args.jobs > 1:
            run_workers(argv, args.jobs, [len(range(i, queued, args.jobs)) for i in range(args.jobs)])
        elif queued:
            study.optimize(objective, n_trials=queued, catch=(RuntimeError,))
    elif args.seeds:
        study.optimize(objective, n_trials=args.worker_trials, catch=(RuntimeError,))
    elif sum(t.state in finished for t in study.trials) < args.n_trials:
        if args.jobs > 1 and not args.worker:
            run_workers(argv, args.jobs)
        else:
            stop_at = optuna.study.MaxTrialsCallback(args.n_trials, states=finished)
            study.optimize(objective, callbacks=[stop_at], catch=(RuntimeError,))
    if args.worker:
        return study
    if args.seeds:
        report_seeds(study, root, args.seeds)
    else:
        report_study(study, root)
    return study


def queue_seeds(study: Any, seeds: list[int], populations: int | None = None) -> int:
    """Queue a trial for each seed that has none complete, queued or running, or (``populations``) split those
    seeds into that many populations, a trial each; returns how many wait."""
    import optuna

    state = optuna.trial.TrialState
    have = set()
    for t in study.trials:
        if t.state in (state.COMPLETE, state.WAITING, state.RUNNING):
            have.update(t.user_attrs.get("seeds") or [t.user_attrs.get("seed")])
    todo = [seed for seed in seeds if seed not in have]
    for group in split_seeds(todo, populations) if populations and todo else [[seed] for seed in todo]:
        study.enqueue_trial({}, user_attrs={"seeds": group} if len(group) > 1 else {"seed": group[0]})
    return len(study.get_trials(deepcopy=False, states=(state.WAITING,)))


def run_workers(argv: list[str], jobs: int, trials: list[int] | None = None) -> None:
    """``jobs`` processes of this same command on the study (``trials[i]`` queued trials for worker
    ``i`` with ``--seeds``); wait for all of them."""
    one_job = [a for i, a in enumerate(argv) if not (a == "--jobs" or (i > 0 and argv[i - 1] == "--jobs"))]
    command = [sys.executable, "-m", "rl_lightning.cli", "tune", *[a for a in one_job if not a.startswith("--jobs=")]]
    counts = trials or [None] * jobs
    workers = [
        subprocess.Popen(
            [*command, "--worker", "--worker_index", str(i), *(["--worker_trials", str(n)] if n is not None else [])]
        )
        for i, n in enumerate(counts)
        if n != 0
    ]
    codes = [w.wait() for w in workers]
    if any(codes):
        raise RunFailed(f"tune: a worker failed (exit codes {codes}); its error is printed above.")


def report_seeds(study: Any, root: Path, seeds: list[int]) -> None:
    """Per seed: final and best evaluation return and the run; over seeds: mean and IQM with bootstrap
    confidence intervals (``score_summary``); the curves as ``curves.png`` with the ``plot`` extra."""
    import optuna

    done = {}  # seed -> {final, best, run_dir}: a run of its own, or a population's member
    for t in study.trials:
        if t.state != optuna.trial.TrialState.COMPLETE:
            continue
        attrs = t.user_attrs
        members = attrs["members"] if "members" in attrs else [[attrs["seed"], attrs["final"], attrs["best"]]]
        done.update({seed: {"final": f, "best": b, "run_dir": attrs["run_dir"]} for seed, f, b in members})
    done = {seed: result for seed, result in done.items() if seed in seeds}
    lines = ["| seed | final | best | run |", "|---:|---:|---:|---|"]
    for seed in seeds:
        r = done.get(seed)
        cells = f"{r['final']:g} | {r['best']:g} | {r['run_dir']}" if r else "- | - | -"
        lines.append(f"| {seed} | {cells} |")
    if len(done) >= 1:
        lines += ["", "| over seeds | runs | mean [95 % CI] | IQM [95 % CI] |", "|---|---:|---|---|"]
        for key in ("final", "best"):
            s = score_summary([r[key] for r in done.values()])
            lines.append(
                f"| {key} | {s['runs']} | {s['mean']:.4g} [{s['mean_ci'][0]:.4g}, {s['mean_ci'][1]:.4g}] | "
                f"{s['iqm']:.4g} [{s['iqm_ci'][0]:.4g}, {s['iqm_ci'][1]:.4g}] |"
            )
    print("\n".join(lines), flush=True)
    try:
        run_dirs = list(dict.fromkeys(r["run_dir"] for r in done.values()))  # a population's once: its members' mean
        plot_learning_curves({study.study_name: run_dirs}, root / "curves.png")
        print(f"Curves: {root / 'curves.png'}", flush=True)
    except ImportError:
        pass


def report_study(study: Any, root: Path) -> None:
    """The best trial's config as ``best.yaml``, a table of the trials, and plots where matplotlib is."""
    import optuna

    state = optuna.trial.TrialState
    lines = ["| trial | state | value | run | " + " | ".join(study.trials[0].params) + " |" if study.trials else ""]
    for t in study.trials:
        value = "" if t.value is None else f"{t.value:g}"
        if t.value is None and t.intermediate_values:
            value = f"({list(t.intermediate_values.values())[-1]:g})"
        params = " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in t.params.values())
        run_dir = t.user_attrs.get("run_dir", "")
        lines.append(f"| {t.number} | {t.state.name.lower()} | {value} | {run_dir} | {params} |")
    print("\n".join(lines), flush=True)
    complete = [t for t in study.trials if t.state == state.COMPLETE]
    if not complete:
        print("rl-lightning tune: no trial completed; no best config.", flush=True)
        return
    best = study.best_trial
    root.mkdir(parents=True, exist_ok=True)
    source = Path(best.user_attrs["run_dir"]) / "config.yaml"
    if source.is_file():
        config = yaml.safe_load(source.read_text())
        logger = (config.get("trainer") or {}).get("logger")
        if isinstance(logger, dict) and isinstance(logger.get("init_args"), dict):
            logger["init_args"]["name"] = None  # a fit of it writes to runs/<algorithm>_<env>
        config["ckpt_path"] = None
        text = f"# Best trial of study {study.study_name!r}: trial {best.number}, value {best.value:g}\n"
        (root / "best.yaml").write_text(text + yaml.safe_dump(config, sort_keys=False))
        print(f"Best: trial {best.number}, {best.value:g}, {best.params}. Config: {root / 'best.yaml'}", flush=True)
    if len(complete) >= 2:
        try:
            import matplotlib

            matplotlib.use("Agg")
            from optuna.visualization import matplotlib as optuna_plots
        except ImportError:
            return
        plots = {"history": optuna_plots.plot_optimization_history, "importance": optuna_plots.plot_param_importances}
        for name, plot in plots.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                ax = plot(study)
            ax.figure.savefig(root / f"{name}.png", dpi=100, bbox_inches="tight")
            matplotlib.pyplot.close(ax.figure)
