"""Learning results: every shipped classic-control config, trained to its own budget for several seeds.

    python benchmarks/learning.py                              # classic control, seeds 0 1 2, 2 runs at a time
    python benchmarks/learning.py --configs users              # FrozenLake, GridReach, LunarLander
    python benchmarks/learning.py --configs mujoco             # PPO, SAC, TD3 on MuJoCo at 1M env steps
    python benchmarks/learning.py --configs ppo/hopper,ppo/halfcheetah,ppo/walker2d --plot curves.png
    python benchmarks/learning.py --configs sac/halfcheetah --seeds 0 --set total_env_steps=300000
    python benchmarks/learning.py --configs exploration        # PPO, SAC (gSDE), TD3 (OU) on MountainCarContinuous
    python benchmarks/learning.py --configs memory --jobs 1    # RecurrentPPO and PPO without velocities, RepeatFirst
    python benchmarks/learning.py --configs minatar --seeds 0 --jobs 1  # the DQN family on MinAtar (DQN: Breakout)
    python benchmarks/learning.py --configs tqc/pendulum,crossq/pendulum --jobs 1   # group: tqc_crossq
    python benchmarks/learning.py --configs sac/pendulum --seeds 0 --jobs 1
    python benchmarks/learning.py --configs dqn/cartpole --set double_q=true --set total_env_steps=50000

Each run is a fresh subprocess with one torch thread, trained exactly as `rl-lightning fit --config
configs/<name>.yaml --seed_everything SEED` would (the config's model arguments; Lightning Trainer),
except that every evaluation plays 20 deterministic episodes. Reported per run: the final and best
evaluation return, the env steps and training time (evaluation excluded) to the first evaluation at
or above the threshold (gymnasium's thresholds, SB3-zoo levels for Pendulum and MuJoCo), and the
whole fit's wall time. Prints a markdown table per run and the mean and IQM over seeds with bootstrap
confidence intervals.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import ROOT, child_env, child_result, fit_config  # benchmarks/ is on sys.path: the script's own directory

# config -> the return a solved run reaches at least (deterministic evaluation, 20 episodes)
CLASSIC: dict[str, float] = {
    "ppo/cartpole": 475,
    "a2c/cartpole": 475,
    "reinforce/cartpole": 400,
    "dqn/cartpole": 475,
    "qrdqn/cartpole": 475,
    "qrdqn/acrobot": -100,  # gymnasium's reward threshold for Acrobot-v1
    "qrdqn/mountaincar": -110,  # gymnasium's for MountainCar-v0
    "c51/cartpole": 475,
    "pqn/cartpole": 475,
    "sac/pendulum": -200,
    "td3/pendulum": -200,
    "ddpg/pendulum": -200,
    "ppo/pendulum": -250,
}
# What users try next: spaces and envs beyond classic control (`box2d` extra for LunarLander).
USERS: dict[str, float] = {
    "ppo/frozenlake": 1.0,
    "dqn/frozenlake": 1.0,
    "ppo/gridreach": 0.8,
    "ppo/gridreach_multidiscrete": 0.8,
    "dqn/lunarlander": 200,
    "ppo/lunarlander": 200,
    "qrdqn/lunarlander": 200,
}
# MuJoCo at the budget the field publishes (1M env steps); thresholds: the SB3 zoo's results at 1M (v3 envs,
# one run each, benchmark.md). `mujoco` extra. The off-policy runs take hours each on a CPU core.
MUJOCO: dict[str, float] = {
    "ppo/hopper": 2410,
    "ppo/halfcheetah": 5819,
    "ppo/walker2d": 3479,
    "ppo/ant": 1327,
    "sac/hopper": 2326,
    "sac/halfcheetah": 9535,
    "sac/walker2d": 3863,
    "sac/ant": 4616,
    "td3/hopper": 3606,
    "td3/halfcheetah": 9656,
    "td3/walker2d": 4718,
    "td3/ant": 5813,
}
# Sparse reward: exploration that drifts (gSDE, Ornstein-Uhlenbeck); thresholds: gymnasium's (90).
EXPLORATION: dict[str, float] = {
    "ppo/mountaincarcontinuous": 90,
    "sac/mountaincarcontinuous": 90,
    "td3/mountaincarcontinuous": 90,
}
# Partial observability: classic control without velocities (the zoo's "NoVel" envs); a memory needs to
# infer them, stateless PPO beside it on the same settings stays far below (on Pendulum a 4-frame stack is
# the stateless baseline). Thresholds: gymnasium's (475), PPO's on Pendulum with velocities (-250).
MEMORY: dict[str, float] = {
    "recurrent_ppo/cartpole_novel": 475,
    "ppo/cartpole_novel": 475,
    "recurrent_ppo/pendulum_novel": -250,  # PPO's Pendulum threshold (with velocities)
    "ppo/pendulum_novel_stack4": -250,
    # POPGym's RepeatFirstEasy (`memory` extra): the first card's suit asked for at each of 51 steps; episode
    # return 1.0 at most, -0.5 without a memory. Threshold: 0.9 (the suit right at 49 of the 51 steps).
    "recurrent_ppo/repeat_first": 0.9,
    "ppo/repeat_first": 0.9,
}
# Memory on Atari (`envpool` extra): CleanRL's ppo_atari_lstm (single frames, an LSTM) beside the stateless
# PPO with 4 stacked frames on Pong; threshold 0 (half the points won; stateless PPO crosses it at ~700k).
ATARI_MEMORY: dict[str, float] = {
    "recurrent_ppo/atari_envpool": 0,
    "ppo/atari_envpool": 0,
}
# MinAtar (Young & Tian 2019; the `minatar` package): thresholds where the paper's DQN curves end, at 5M frames
# (its README's learning curves, reference_curves.json: training returns, 30 seeds; Breakout levels off at ~10).
MINATAR_GAMES = {"breakout": 10, "asterix": 17, "freeway": 50, "seaquest": 20, "space_invaders": 43}
MINATAR: dict[str, float] = {
    "dqn/minatar_breakout": MINATAR_GAMES["breakout"],
    **{f"{algo}/minatar_{game}": t for algo in ("pqn", "c51", "qrdqn", "rainbow") for game, t in MINATAR_GAMES.items()},
}
# TQC and CrossQ (sb3-contrib's) at the SB3 zoo's budgets; thresholds: SAC's on Pendulum, gymnasium's for
# MountainCarContinuous (90) and LunarLanderContinuous (200). `box2d` extra for LunarLander.
TQC_CROSSQ: dict[str, float] = {
    "tqc/pendulum": -200,
    "crossq/pendulum": -200,
    "tqc/mountaincarcontinuous": 90,
    "crossq/mountaincarcontinuous": 90,
    "tqc/lunarlandercontinuous": 200,
    "crossq/lunarlandercontinuous": 200,
}
THRESHOLDS = {**CLASSIC, **USERS, **MUJOCO, **EXPLORATION, **MEMORY, **ATARI_MEMORY, **MINATAR, **TQC_CROSSQ}
GROUPS = {
    "classic": CLASSIC,
    "users": USERS,
    "mujoco": MUJOCO,
    "exploration": EXPLORATION,
    "memory": MEMORY,
    "atari_memory": ATARI_MEMORY,
    "minatar": MINATAR,
    "tqc_crossq": TQC_CROSSQ,
}
# Published learning curves (returns along the way, not only at 1M) for the MuJoCo configs: the zoo's own
# evaluation logs and the TD3 paper's 10 seeds; where each comes from is in the file's "sources".
REFERENCE_CURVES: dict[str, list[dict[str, Any]]] = json.loads(
    (ROOT / "benchmarks" / "reference_curves.json").read_text()
)["curves"]


def published_at(config: str, env_steps: float) -> str:
    """What the published curves of ``config`` show at ``env_steps`` (interpolated between their
    evaluations): the run's value, or the mean [min, max] over several seeds; "-" when there are none."""
    import numpy as np

    parts = []
    for ref in REFERENCE_CURVES.get(config, []):
        at = [float(np.interp(env_steps, ref["steps"], run)) for run in ref["runs"]]
        spread = f" [{min(at):,.0f}, {max(at):,.0f}]" if len(at) > 1 else ""
        parts.append(f"{ref['label']}: {sum(at) / len(at):,.0f}{spread}")
    return "; ".join(parts) or "-"


def _round(value: float) -> float:
    """One decimal for returns in the hundreds, three for returns of order 1 (FrozenLake, GridReach)."""
    return round(value, 1 if abs(value) >= 10 else 3)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["double_q=true", "learning_rate=1e-3"]`` -> model arguments (values read as YAML)."""
    import yaml

    def value(text: str) -> Any:
        loaded = yaml.safe_load(text)
        try:  # YAML reads 3e-4 (no dot) as a string
            return float(loaded) if isinstance(loaded, str) else loaded
        except ValueError:
            return loaded

    pairs = [item.split("=", 1) for item in items]
    return {key: value(text) for key, text in pairs}


def run(config: str, seed: int, overrides: list[str]) -> dict[str, Any]:
    import lightning  # noqa: F401  (imports stay outside the wall clock)

    t0 = time.perf_counter()
    env_steps, curve, train_s = fit_config(f"configs/{config}.yaml", seed, **parse_overrides(overrides))
    solved = next(((t, s) for t, s, r in curve if r >= THRESHOLDS[config]), (None, None))
    return {
        "config": config,
        "set": overrides,
        "seed": seed,
        "env_steps": env_steps,
        "final": _round(curve[-1][2]),
        "best": _round(max(r for _, _, r in curve)),
        "solve_steps": solved[1],
        "solve_s": None if solved[0] is None else round(solved[0], 1),
        "wall_s": round(time.perf_counter() - t0, 1),
        "train_s": round(train_s, 1),  # evaluation excluded: env steps / train_s is the training throughput
        "curve": [(steps, round(ret, 3)) for _, steps, ret in curve],  # (env steps, eval return)
    }


def launch(config: str, seed: int, overrides: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", config, str(seed), *(f"--set={o}" for o in overrides)]
    result = child_result(cmd, child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"), f"{config} seed {seed}")
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--configs",
        default="classic",
        help=f"comma-separated configs from {list(THRESHOLDS)}, or a group: {list(GROUPS)}",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--json", type=Path, help="also write all results here")
    p.add_argument("--plot", type=Path, help="also plot the curves (mean, min-max band, reference) to this PNG")
    p.add_argument("--from-json", type=Path, help="report (and plot) the results a --json run wrote; run nothing")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ARG=VALUE",
        help="override a model argument of every config (YAML value; run and replay fields by name), repeatable",
    )
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        print(json.dumps(run(args.child[0], int(args.child[1]), args.set)))
        return

    configs = [c for name in args.configs.split(",") for c in (GROUPS[name] if name in GROUPS else [name])]
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        jobs = [(c, s) for c in configs for s in args.seeds]
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda job: launch(*job, args.set), jobs))
    print(per_run_table(results))
    print()
    print(summary_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot_curves(results, args.plot)


def label(result: dict[str, Any]) -> str:
    """The config and the overrides it ran with."""
    extra = " ".join(result.get("set") or [])
    return f"`configs/{result['config']}.yaml`" + (f" {extra}" if extra else "")


def per_run_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| config | threshold | seed | env steps | final eval | best eval | first >= threshold at | train s to it "
        "| fit wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        steps = "-" if r["solve_steps"] is None else f"{r['solve_steps']:,}"
        lines.append(
            f"| {label(r)} | {THRESHOLDS[r['config']]:g} | {r['seed']} | {r['env_steps']:,} | "
            f"{r['final']} | {r['best']} | {steps} | "
            f"{'-' if r['solve_s'] is None else r['solve_s']} | {r['wall_s']} |"
        )
    return "\n".join(lines)


def summary_table(results: list[dict[str, Any]]) -> str:
    """Per config: final return over seeds as mean and IQM with 95 % bootstrap confidence intervals."""
    from rl_lightning.plotting import score_summary

    lines = [
        "| config | seeds | final: mean [95 % CI] | final: IQM [95 % CI] | best: mean | reference "
        "| published curves at these env steps |",
        "|---|---:|---|---|---:|---:|---|",
    ]
    for name in dict.fromkeys(label(r) for r in results):
        runs = [r for r in results if label(r) == name]
        config = runs[0]["config"]
        final = score_summary([r["final"] for r in runs])
        best = sum(r["best"] for r in runs) / len(runs)
        lines.append(
            f"| {name} | {len(runs)} | {final['mean']:.1f} [{final['mean_ci'][0]:.1f}, "
            f"{final['mean_ci'][1]:.1f}] | {final['iqm']:.1f} [{final['iqm_ci'][0]:.1f}, {final['iqm_ci'][1]:.1f}] | "
            f"{best:.1f} | {THRESHOLDS[config]:g} | {published_at(config, runs[0]['env_steps'])} |"
        )
    return "\n".join(lines)


def plot_curves(results: list[dict[str, Any]], out_png: Path) -> None:
    """One panel per config: the mean evaluation return over seeds against env steps, the min-max band,
    the published curves over the same env steps (dotted, their min-max band when several seeds) and
    the threshold (for MuJoCo: the zoo's table at 1M) as a dashed line."""
    import numpy as np
    from matplotlib.figure import Figure

    from rl_lightning.plotting import aggregate

    configs = list(dict.fromkeys(r["config"] for r in results if r.get("curve")))
    fig = Figure(figsize=(4.4 * len(configs), 3.8))
    for ax, config in zip(np.atleast_1d(fig.subplots(1, len(configs))), configs, strict=True):
        runs = [r for r in results if r["config"] == config and r.get("curve")]
        for variant in dict.fromkeys(" ".join(r.get("set") or []) for r in runs):  # one line per --set
            curves = [
                (np.array([s for s, _ in r["curve"]]), np.array([v for _, v in r["curve"]]))
                for r in runs
                if " ".join(r.get("set") or []) == variant
            ]
            steps, mean, low, high = aggregate(curves, "minmax")
            seeds = f"{len(curves)} seed" + ("s" if len(curves) > 1 else "")
            (line,) = ax.plot(steps, mean, label=f"rl_lightning {variant} ({seeds})".replace("  ", " "))
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
        last = max(r["env_steps"] for r in runs)
        for ref in REFERENCE_CURVES.get(config, []):
            steps = np.array(ref["steps"])
            keep = steps <= last
            runs_of = np.array(ref["runs"])[:, keep]
            (line,) = ax.plot(steps[keep], runs_of.mean(0), linestyle=":", label=ref["label"])
            if len(runs_of) > 1:
                ax.fill_between(steps[keep], runs_of.min(0), runs_of.max(0), color=line.get_color(), alpha=0.12)
        bar = (
            f"SB3 zoo's table, 1M: {THRESHOLDS[config]:g}" if config in MUJOCO else f"threshold {THRESHOLDS[config]:g}"
        )
        ax.axhline(THRESHOLDS[config], color="gray", linestyle="--", label=bar)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.set_title(config)
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    print(out_png)


if __name__ == "__main__":
    main()
