"""The README's Python API snippet against the CLI, on the same budget, side by side.

    python benchmarks/api_vs_cli.py --env-steps 10000 --pairs 3

The snippet imports torch before rl_lightning, as a notebook or script often does; torch then sizes its
thread pool before rl_lightning could set ``OMP_NUM_THREADS``. rl_lightning chooses the threads at fit
start (``RLModule.setup``), so both must run at the same speed. Each pair runs the snippet and the CLI
one after the other, neither with ``OMP_NUM_THREADS`` set, and reports the wall times and their ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_snippet(env_steps: int) -> str:
    (snippet,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    budget = "total_env_steps=100_000"
    assert budget in snippet, "the README's budget moved: update this benchmark"
    return snippet.replace(budget, f"total_env_steps={env_steps}")


def timed(args: list[str], cwd: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-steps", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    api = [sys.executable, "-c", readme_snippet(args.env_steps)]
    cli = [
        *(sys.executable, "-m", "rl_lightning.cli", "fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml")),
        *("--model.run.total_env_steps", str(args.env_steps), "--trainer.enable_progress_bar", "false"),
    ]
    print(f"env steps {args.env_steps}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
    ratios = []
    for pair in range(args.pairs):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            api_s, cli_s = timed(api, a), timed(cli, b)
        ratios.append(api_s / cli_s)
        print(f"pair {pair}: API snippet {api_s:.1f} s, CLI {cli_s:.1f} s, ratio {ratios[-1]:.2f}", flush=True)
    ratios.sort()
    print(f"median ratio API/CLI: {ratios[len(ratios) // 2]:.2f} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
