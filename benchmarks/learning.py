"""Learning results: every shipped classic-control config, trained to its own budget for several seeds.

    python benchmarks/learning.py                              # classic control, seeds 0 1 2, 2 runs at a time
    python benchmarks/learning.py --configs users              # FrozenLake, GridReach, LunarLander
    python benchmarks/learning.py --configs mujoco             # PPO on MuJoCo at 1M env steps
    python benchmarks/learning.py --configs sac/pendulum --seeds 0 --jobs 1

Each run is a fresh subprocess with one torch thread, trained exactly as `rl-lightning fit --config
configs/<name>.yaml --seed_everything SEED` would (the config's model arguments; Lightning Trainer),
except that every evaluation plays 20 deterministic episodes. Reported per run: the final and best
evaluation return, the env steps and training time (evaluation excluded) to the first evaluation at
or above the threshold (gymnasium's CartPole threshold,
SB3-zoo levels for Pendulum), and the whole fit's wall time. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # compare.fit_config: the same training path as compare.py

# config -> the return a solved run reaches at least (deterministic evaluation, 20 episodes)
CLASSIC: dict[str, float] = {
    "ppo/cartpole": 475,
    "a2c/cartpole": 475,
    "reinforce/cartpole": 400,
    "dqn/cartpole": 475,
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
}
# MuJoCo at the budget the field publishes (1M env steps); thresholds: the SB3 zoo's PPO results (v3 envs,
# one run each, benchmark.md). `mujoco` extra.
MUJOCO: dict[str, float] = {
    "ppo/hopper": 2410,
    "ppo/halfcheetah": 5819,
    "ppo/walker2d": 3479,
    "ppo/ant": 1327,
}
THRESHOLDS = {**CLASSIC, **USERS, **MUJOCO}
GROUPS = {"classic": CLASSIC, "users": USERS, "mujoco": MUJOCO}


def _round(value: float) -> float:
    """One decimal for returns in the hundreds, three for returns of order 1 (FrozenLake, GridReach)."""
    return round(value, 1 if abs(value) >= 10 else 3)


def run(config: str, seed: int) -> dict[str, Any]:
    import lightning  # noqa: F401  (imports stay outside the wall clock)
    from compare import fit_config

    t0 = time.perf_counter()
    env_steps, curve, _ = fit_config(f"configs/{config}.yaml", seed)
    solved = next(((t, s) for t, s, r in curve if r >= THRESHOLDS[config]), (None, None))
    return {
        "config": config,
        "seed": seed,
        "env_steps": env_steps,
        "final": _round(curve[-1][2]),
        "best": _round(max(r for _, _, r in curve)),
        "solve_steps": solved[1],
        "solve_s": None if solved[0] is None else round(solved[0], 1),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def launch(config: str, seed: int) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    out = subprocess.run(
        [sys.executable, __file__, "--child", config, str(seed)], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{config} seed {seed} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
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
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        print(json.dumps(run(args.child[0], int(args.child[1]))))
        return

    configs = [c for name in args.configs.split(",") for c in (GROUPS[name] if name in GROUPS else [name])]
    jobs = [(c, s) for c in configs for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: launch(*job), jobs))
    print(
        "\n| config | threshold | seed | env steps | final eval | best eval | first >= threshold at "
        "| train s to it | fit wall s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        steps = "-" if r["solve_steps"] is None else f"{r['solve_steps']:,}"
        print(
            f"| `configs/{r['config']}.yaml` | {THRESHOLDS[r['config']]:g} | {r['seed']} | {r['env_steps']:,} | "
            f"{r['final']} | {r['best']} | {steps} | "
            f"{'-' if r['solve_s'] is None else r['solve_s']} | {r['wall_s']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
