"""Kill a training run with SIGKILL at random moments, resume it each time with `--ckpt_path last`,
and check that every checkpoint on disk stays readable and the run finishes its budget.

    python benchmarks/kill_resume.py --kills 10
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def fit(cwd: Path, budget: int, resume: bool) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "rl_lightning.cli",
        "fit",
        "--config",
        str(ROOT / "configs/ppo/cartpole.yaml"),
        "--model.total_env_steps",
        str(budget),
        "--model.env_steps_per_epoch",
        "2048",
        "--trainer.enable_progress_bar",
        "false",
        "--seed_everything",
        "0",
    ]
    if resume:
        args += ["--ckpt_path", "last"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def readable(ckpt_dir: Path) -> tuple[int, int]:
    """(number of .ckpt files, how many load with weights_only=True)."""
    files = list(ckpt_dir.glob("*.ckpt"))
    ok = 0
    for f in files:
        try:
            torch.load(f, weights_only=True)
            ok += 1
        except Exception as e:  # noqa: BLE001 - any failure counts as unreadable
            print(f"  UNREADABLE {f.name}: {e}")
    return len(files), ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--budget", type=int, default=60_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_resume_"))
    ckpt_dir = work / "runs/ppo_cartpole/version_0/checkpoints"
    last = ckpt_dir / "last.ckpt"
    proc = fit(work, args.budget, resume=False)
    while not last.exists():  # the run exists once it has a first checkpoint
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    unreadable, regressions = 0, 0
    for k in range(args.kills):
        before = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
        if k > 0:
            proc = fit(work, args.budget, resume=True)
        time.sleep(rng.uniform(0.5, 15.0))  # anywhere: start-up, collection, training, evaluation, saving
        if proc.poll() is not None:
            print(f"kill {k}: run already finished (rc {proc.returncode})")
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        n, ok = readable(ckpt_dir)
        unreadable += n - ok
        after = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
        regressions += int(after < before)
        print(f"kill {k}: env steps in last.ckpt {before} -> {after}; checkpoints readable {ok}/{n}", flush=True)
    proc = fit(work, args.budget, resume=True)
    _, err = proc.communicate()
    final = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
    print(f"final resume: rc {proc.returncode}, env steps {final} of {args.budget}")
    if proc.returncode != 0:
        print(err[-2000:])
    runs = sorted(p.name for p in (work / "runs/ppo_cartpole").iterdir())
    print(
        f"\n{args.kills} kills: {unreadable} unreadable checkpoints, {regressions} regressions of last.ckpt, "
        f"run directories {runs} (one means every restart resumed the same run), "
        f"budget {'finished' if final >= args.budget else 'NOT finished'}"
    )


if __name__ == "__main__":
    main()
