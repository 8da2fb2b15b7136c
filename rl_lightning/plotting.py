"""Learning curves from TensorBoard runs: mean and spread across seeds, against env steps.

    python -m rl_lightning.plotting runs/ppo_cartpole -o curves.png       # every run below, one curve
    python -m rl_lightning.plotting PPO=runs/ppo_cartpole SB3=runs/sb3 -o curves.png --spread std

A run is a directory holding TensorBoard event files (``runs/<name>/version_<n>``); a directory given
is searched for runs below it. Only fits count: a directory that ``validate`` or ``test`` wrote, or a
fit that stopped before it logged anything, is skipped and named on stderr. Runs are grouped into
curves by what was trained: ``LABEL=DIR`` names a group, merged as given (a warning on stderr names
what its runs differ in besides the seed); otherwise runs of one experiment (``<name>`` above) share a
curve only where their full configuration is the same but for the seed (``run_config``: the algorithm,
its hyperparameters, the budget and evaluation rhythm of ``run``, and the trainer settings, from the
run's ``config.yaml`` and ``hparams.yaml``), so that no curve mixes budgets or precisions, nor is cut to
its shortest run. A curve is labelled by the experiment name and, where one experiment holds several
configurations, by what differs between them; each curve's label, runs and seeds are listed on stderr.
rl_lightning logs every scalar against env steps, so runs of different seeds share their x-axis; where
their evaluation points differ, each run is interpolated linearly onto the union of points, within the
range all runs cover.

Needs matplotlib (the ``plot`` extra: ``pip install 'rl-lightning[plot]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

PathLike = str | Path


def find_runs(path: PathLike) -> list[Path]:
    """The run directories at or below ``path``: those holding TensorBoard event files, sorted."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such run directory: {path}")
    return sorted({event.parent for event in path.rglob("events.out.tfevents.*")})


def scalar_tags(run_dir: PathLike) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 1})
    acc.Reload()
    return sorted(acc.Tags()["scalars"])


def is_fit(run_dir: PathLike) -> bool:
    """A run that trained: it logged ``time/env_steps`` (every fit does, at every evaluation)."""
    return "time/env_steps" in scalar_tags(run_dir)


# What only records, shows or resumes a run, or seeds it: left out of ``run_config``, so runs that
# differ only in these share a curve. Top-level keys of the CLI's config.yaml (``model`` is read apart):
_NOT_TRAINING = frozenset({"model", "seed_everything", "ckpt_path", "weights_only", "checkpoint", "last_checkpoint"})
# ... keys of its ``trainer`` section, and the endings of callback class names (RLProgressBar,
# ModelCheckpoint, LastCheckpoint, RichModelSummary):
_TRAINER_NOT_TRAINING = frozenset(
    {"logger", "enable_progress_bar", "enable_model_summary", "enable_checkpointing", "default_root_dir"}
)
_CALLBACKS_NOT_TRAINING = ("ProgressBar", "Checkpoint", "ModelSummary")


def run_config(run_dir: PathLike) -> dict[str, Any]:
    """What a run trained, as far as its files say; runs of one experiment with equal configs share a curve.

    From the CLI's ``config.yaml``: ``algorithm`` (the model's class), the ``trainer`` section (precision,
    devices, strategy, callbacks ...) and the other top-level settings (``compile``, ``cuda_graphs``); from
    ``hparams.yaml`` (a run started from Python has only this one; else the model's ``init_args``): the
    hyperparameters, with the budget and evaluation rhythm (``run``). Left out, as what seeds of one
    experiment vary or what does not change training: the seeds (``seed_everything``, ``env.seed``), the
    logger, checkpointing (``checkpoint``, ``last_checkpoint``, checkpoint callbacks), the progress bar and
    model summary, ``default_root_dir``, ``ckpt_path`` and ``weights_only``."""
    run_dir = Path(run_dir)
    cli = _load_yaml(run_dir / "config.yaml") if (run_dir / "config.yaml").is_file() else None
    cli = cli if isinstance(cli, dict) else {}
    model = cli.get("model") if isinstance(cli.get("model"), dict) else {}
    config: dict[str, Any] = {}
    if cli:
        config["algorithm"] = str(model.get("class_path", "?")).rsplit(".", 1)[-1]
    hparams = _load_yaml(run_dir / "hparams.yaml") if (run_dir / "hparams.yaml").is_file() else model.get("init_args")
    hparams = dict(hparams) if isinstance(hparams, dict) else {}
    hparams.pop("_instantiator", None)
    if isinstance(hparams.get("env"), dict):
        hparams["env"] = {k: v for k, v in hparams["env"].items() if k != "seed"}
    config.update(hparams)
    for key, value in cli.items():
        if key == "trainer" and isinstance(value, dict):
            trainer = {k: v for k, v in value.items() if k not in _TRAINER_NOT_TRAINING and k != "callbacks"}
            if callbacks := _training_callbacks(value.get("callbacks")):
                trainer["callbacks"] = callbacks
            config["trainer"] = trainer
        elif key not in _NOT_TRAINING:
            config[key] = value
    return config


def _training_callbacks(callbacks: Any) -> dict[str, Any]:
    """``{class name: init_args}`` of a config's callbacks, without those that only save or show the run:
    adding a progress bar or a checkpoint to one seed does not make it another experiment."""
    out: dict[str, Any] = {}
    for callback in [callbacks] if isinstance(callbacks, (dict, str)) else callbacks or []:
        spec = callback if isinstance(callback, dict) else {"class_path": callback}
        name = str(spec.get("class_path", "?")).rsplit(".", 1)[-1]
        if name.endswith(_CALLBACKS_NOT_TRAINING):
            continue
        key, n = name, 2
        while key in out:  # two callbacks of one class
            key, n = f"{name}#{n}", n + 1
        out[key] = spec.get("init_args") or {}
    return out


def run_seed(run_dir: PathLike) -> int | None:
    """The run's seed: ``seed_everything`` of its ``config.yaml``, else ``env.seed`` of its ``hparams.yaml``."""
    run_dir = Path(run_dir)
    for name, keys in (("config.yaml", ("seed_everything",)), ("hparams.yaml", ("env", "seed"))):
        if (run_dir / name).is_file():
            value: Any = _load_yaml(run_dir / name)
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _load_yaml(path: Path) -> Any:
    """YAML as plain data: a Python tag (Lightning's ``hparams.yaml`` of a run started from Python holds
    the config dataclasses and tuples so) is read as the mapping, sequence or scalar it tags."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def plain(loader: yaml.SafeLoader, _: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", plain)
    return yaml.load(path.read_text(), Loader=Loader)  # noqa: S506  (a SafeLoader)


def load_scalars(run_dir: PathLike, tag: str = "val/episode_return") -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of one scalar tag in one run, sorted by step. A step written twice (a run
    resumed from an earlier checkpoint) keeps its latest value."""
    return _curve(_scalars_of(run_dir), tag)


def run_curves(run_dir: PathLike, tag: str = "val/episode_return") -> list[tuple[np.ndarray, np.ndarray]]:
    """A run's curves of ``tag``: its own, or a population's (``run.population``), one per member
    (``member_<k>/<tag>``), each member drawn as the run of its seed. The event files are read once."""
    acc = _scalars_of(run_dir)
    names = acc.Tags()["scalars"]
    members = sorted(
        int(name.split("/", 1)[0].removeprefix("member_"))
        for name in names
        if name.startswith("member_") and name.split("/", 1)[1] == tag
    )
    return [_curve(acc, f"member_{k}/{tag}") for k in members] or [_curve(acc, tag)]


def _scalars_of(run_dir: PathLike) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return acc


def _curve(acc: Any, tag: str) -> tuple[np.ndarray, np.ndarray]:
    if tag not in acc.Tags()["scalars"]:
        raise KeyError(f"{acc.path} has no scalar {tag!r}; it has {sorted(acc.Tags()['scalars'])}")
    latest = {event.step: event.value for event in sorted(acc.Scalars(tag), key=lambda e: e.wall_time)}
    steps = np.array(sorted(latest), dtype=np.int64)
    return steps, np.array([latest[s] for s in steps], dtype=np.float64)


def aggregate(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], spread: Literal["minmax", "std"] = "minmax"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, mean, low, high)`` across runs. The band is min-max or mean +- one standard deviation."""
    if spread not in ("minmax", "std"):
        raise ValueError(f"spread must be 'minmax' or 'std', got {spread!r}")
    start = max(steps[0] for steps, _ in curves)
    end = min(steps[-1] for steps, _ in curves)
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= start) & (grid <= end)]
    if len(grid) == 0:
        raise ValueError("The runs cover no common range of env steps.")
    values = np.stack([np.interp(grid, steps, vals) for steps, vals in curves])
    mean = values.mean(0)
    if spread == "std":
        std = values.std(0)
        return grid, mean, mean - std, mean + std
    return grid, mean, values.min(0), values.max(0)


def score_summary(scores: Sequence[float], confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Mean and interquartile mean (IQM: the mean of the middle 50 %, Agarwal et al. 2021, "Deep RL at
    the Edge of the Statistical Precipice") of per-run scores, each with a percentile bootstrap
    confidence interval over runs: rliable's estimators for a single task, computed with scipy.stats
    (rliable 1.2.0 installs but fails to import with pandas 3: its ``arch`` dependency breaks). With
    fewer than 4 runs the IQM trims nothing and equals the mean."""
    from scipy import stats

    x = np.asarray(scores, dtype=np.float64)
    out: dict[str, Any] = {"runs": len(x), "mean": float(x.mean()), "iqm": float(stats.trim_mean(x, 0.25))}
    for name, statistic in (("mean", np.mean), ("iqm", lambda v, axis: stats.trim_mean(v, 0.25, axis=axis))):
        if len(x) < 2 or np.all(x == x[0]):
            out[f"{name}_ci"] = (out[name], out[name])
            continue
        ci = stats.bootstrap(
            (x,), statistic, confidence_level=confidence, n_resamples=10_000, method="percentile", random_state=seed
        ).confidence_interval
        out[f"{name}_ci"] = (float(ci.low), float(ci.high))
    return out


def plot_learning_curves(
    run_dirs: Sequence[PathLike] | Mapping[str, Sequence[PathLike]],
    out_png: PathLike | None = None,
    tag: str = "val/episode_return",
    spread: Literal["minmax", "std"] = "minmax",
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Plot ``tag`` against env steps: one line per group (the mean over its runs) with a shaded band.

    Args:
        run_dirs: Run directories, or directories to search for runs (``find_runs``). A list is grouped
            by experiment name (the parent of ``version_<n>``); a mapping ``{label: dirs}`` names the groups.
            A population's run counts as its members' runs (``run_curves``).
        out_png: Write the figure here (PNG, 150 dpi). ``None`` only returns it (Jupyter shows a returned
            figure).
        tag: The scalar to plot; ``rollout/episode_return`` gives the training episodes.
        spread: The band: ``minmax`` (min to max over runs) or ``std`` (mean +- one standard deviation).
        title: Figure title; defaults to the tag.
        ax: A matplotlib ``Axes`` to draw into, instead of a new figure.

    Returns:
        The matplotlib ``Figure``.
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing left open

    groups = _group(run_dirs)
    if ax is None:
        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.subplots()
    else:
        fig = ax.figure
    for label, runs in groups.items():
        curves = [curve for run in runs for curve in run_curves(run, tag)]  # a population's members as runs
        steps, mean, low, high = aggregate(curves, spread)
        n = f" ({len(curves)} runs)" if len(curves) > 1 else ""
        (line,) = ax.plot(steps, mean, label=f"{label}{n}")
        if len(curves) > 1:
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel(tag)
    ax.set_title(title or tag)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if out_png is not None:
        Path(out_png).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, dpi=150)
    return fig


def _group(run_dirs: Sequence[PathLike] | Mapping[str, Sequence[PathLike]]) -> dict[str, list[Path]]:
    """Runs by curve label. Each curve is reported on stderr (its label, how many runs it merges, their
    seeds and directories) so that the user sees what was averaged; an explicit group whose runs differ
    in more than the seed is merged as asked, with a warning naming the differences."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    labelled = isinstance(run_dirs, Mapping)
    sources = run_dirs.items() if labelled else [(None, d) for d in run_dirs]
    groups: dict[str, list[Path]] = {}
    by_config: dict[tuple[str, str], list[Path]] = {}
    for label, dirs in sources:
        for d in [dirs] if isinstance(dirs, (str, Path)) else dirs:
            for run in find_runs(d):
                if not is_fit(run):
                    print(f"skipped {run}: not a fit that trained (no training data logged)", file=sys.stderr)
                    continue
                if labelled:
                    groups.setdefault(label, []).append(run)
                else:
                    name = run.parent.name if run.name.startswith("version_") else run.name
                    key = json.dumps(run_config(run), sort_keys=True, default=str)
                    by_config.setdefault((name, key), []).append(run)
    for label, runs in _labelled(by_config).items():
        groups[label] = runs
    if not groups:
        raise FileNotFoundError(f"No fits with TensorBoard event files in {list(run_dirs)}.")
    for label, runs in groups.items():
        if not runs:
            raise FileNotFoundError(f"No fits with TensorBoard event files for {label!r}.")
    for label, runs in groups.items():
        print(f"curve {label!r}: {_merged(runs)}", file=sys.stderr)
        if labelled and (differences := _differences([_flat(run_config(run)) for run in runs])):
            print(f"warning: curve {label!r} merges runs that differ in {differences}", file=sys.stderr)
    return groups


def _merged(runs: Sequence[Path]) -> str:
    """``2 runs, seeds 0, 1: runs/a/version_0, runs/a/version_1`` (``?`` for a seed no file records)."""
    plural = "s" if len(runs) > 1 else ""
    seeds = [run_seed(run) for run in runs]
    listed = ", ".join("?" if seed is None else str(seed) for seed in seeds)
    seeds_text = f", seed{plural} {listed}" if any(seed is not None for seed in seeds) else ""
    members = sum(
        name.startswith("member_") and name.endswith("/val/episode_return") for run in runs for name in scalar_tags(run)
    )
    members_text = f" (holding {members} population members, each drawn as a run)" if members else ""
    return f"{len(runs)} run{plural}{seeds_text}{members_text}: {', '.join(map(str, runs))}"


def _differences(configs: Sequence[dict[str, Any]], shown: int = 6) -> str:
    """``run.total_env_steps (512, 1024), trainer.precision (None, bf16-mixed)``: the keys whose values
    differ between flat configs, each with its distinct values as the runs come (``unset``: a run lacks the key)."""
    missing = object()
    keys = sorted({k for config in configs for k in config})
    parts = []
    for k in keys:
        values = [config.get(k, missing) for config in configs]
        if any(v != values[0] for v in values[1:]):
            distinct = list(dict.fromkeys("unset" if v is missing else str(v) for v in values))
            parts.append(f"{k} ({', '.join(distinct)})")
    more = f" and {len(parts) - shown} more" if len(parts) > shown else ""
    return ", ".join(parts[:shown]) + more


def _labelled(by_config: dict[tuple[str, str], list[Path]]) -> dict[str, list[Path]]:
    """Label each (experiment, configuration) group by the experiment's name, and by what differs where
    one experiment holds several configurations."""
    out: dict[str, list[Path]] = {}
    names = [name for name, _ in by_config]
    for (name, key), runs in by_config.items():
        if names.count(name) == 1:
            out[name] = runs
            continue
        mine = _flat(json.loads(key))
        others = [_flat(json.loads(k)) for n, k in by_config if n == name and k != key]
        differing = sorted(k for k in mine if any(o.get(k) != mine[k] for o in others))
        differing += sorted(k for o in others for k in o if k not in mine and k not in differing)
        out[f"{name} [{', '.join(f'{k}={mine.get(k)}' for k in differing)}]"] = runs
    return out


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict) and v:  # an empty mapping stays a value: a callback without arguments
            flat.update(_flat(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rl_lightning.plotting",
        description="Learning curves (mean and spread across seeds, against env steps) from TensorBoard runs.",
    )
    parser.add_argument("runs", nargs="+", metavar="[LABEL=]DIR", help="run directories, or directories of runs")
    parser.add_argument("-o", "--out", default="curves.png", help="output PNG (default: curves.png)")
    parser.add_argument("--tag", default="val/episode_return", help="scalar to plot (default: val/episode_return)")
    parser.add_argument("--spread", choices=["minmax", "std"], default="minmax", help="band across runs")
    parser.add_argument("--title", default=None, help="figure title (default: the tag)")
    args = parser.parse_args(argv)
    if any("=" in r for r in args.runs):
        groups: dict[str, list[str]] = {}
        for r in args.runs:
            label, _, d = r.rpartition("=")
            groups.setdefault(label or Path(d).name, []).append(d)
        plot_learning_curves(groups, args.out, args.tag, args.spread, args.title)
    else:
        plot_learning_curves(args.runs, args.out, args.tag, args.spread, args.title)
    print(args.out)


if __name__ == "__main__":
    main()
