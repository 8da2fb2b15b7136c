"""Learning curves from TensorBoard runs: mean and spread across seeds, against env steps.

    python -m rl_lightning.plotting runs/ppo_cartpole -o curves.png       # every run below, one curve
    python -m rl_lightning.plotting PPO=runs/ppo_cartpole SB3=runs/sb3 -o curves.png --spread std

A run is a directory holding TensorBoard event files (``runs/<name>/version_<n>``); a directory given
is searched for runs below it. Only fits count: a directory that ``validate`` or ``test`` wrote, or a
fit that stopped before it logged anything, is skipped and named on stderr. Runs are grouped into
curves by what was trained: ``LABEL=DIR`` names a group; otherwise runs with the same algorithm, env
and hyperparameters (seeds, budget and evaluation rhythm aside, read from the run's ``config.yaml``
and ``hparams.yaml``) form one curve, labelled by the experiment name (``<name>`` above) and, where
one experiment holds several configurations, by what differs between them. rl_lightning logs every
scalar against env steps, so runs of different seeds share their x-axis; where their evaluation
points differ, each run is interpolated linearly onto the union of points, within the range all
runs cover.

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


def run_config(run_dir: PathLike) -> dict[str, Any]:
    """What a run trained, as far as its files say: ``algorithm`` (from the CLI's ``config.yaml``) and
    its hyperparameters (``hparams.yaml``) without the seed, the budget and the evaluation rhythm, which
    seeds of one experiment may vary."""
    run_dir = Path(run_dir)
    config: dict[str, Any] = {}
    if (run_dir / "config.yaml").is_file():
        model = (_load_yaml(run_dir / "config.yaml") or {}).get("model") or {}
        config["algorithm"] = str(model.get("class_path", "?")).rsplit(".", 1)[-1]
    if (run_dir / "hparams.yaml").is_file():
        hparams = _load_yaml(run_dir / "hparams.yaml") or {}
        hparams.pop("_instantiator", None)
        hparams.pop("run", None)
        if isinstance(hparams.get("env"), dict):
            hparams["env"] = {k: v for k, v in hparams["env"].items() if k != "seed"}
        config.update(hparams)
    return config


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
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        raise KeyError(f"{run_dir} has no scalar {tag!r}; it has {sorted(acc.Tags()['scalars'])}")
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
        steps, mean, low, high = aggregate([load_scalars(run, tag) for run in runs], spread)
        n = f" ({len(runs)} runs)" if len(runs) > 1 else ""
        (line,) = ax.plot(steps, mean, label=f"{label}{n}")
        if len(runs) > 1:
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
    return groups


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
        if isinstance(v, dict):
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
