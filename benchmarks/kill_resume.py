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


def fit(cwd: Path, budget: int, resume: bool, log: Path) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "rl_lightning.cli",
        "fit",
        "--config",
        str(ROOT / "configs/ppo/cartpole.yaml"),
        "--model.run.total_env_steps",
        str(budget),
        "--model.run.env_steps_per_epoch",
        "2048",
        "--trainer.enable_progress_bar",
        "false",
        "--seed_everything",
        "0",
    ]
    if resume:
        args += ["--ckpt_path", "last"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log.open("w") as err:  # a file, not a pipe: a killed child's pipe would need draining
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)


def restored(log: Path) -> bool:
    """Lightning logs this line once it has loaded every state from the checkpoint."""
    return "Restored all states from the checkpoint" in log.read_text()


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
    p.add_argument("--budget", type=int, default=400_000)  # long enough to outlast 10 kills on an idle machine
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_resume_"))
    ckpt_dir = work / "runs/ppo_cartpole/version_0/checkpoints"
    last = ckpt_dir / "last.ckpt"
    proc = fit(work, args.budget, resume=False, log=work / "fit_0.log")
    while not last.exists():  # the run exists once it has a first checkpoint
        assert proc.poll() is None, (work / "fit_0.log").read_text()[-2000:]
        time.sleep(0.2)
    unreadable = regressions = resumed = progressed = kills = 0
    for k in range(args.kills):
        before = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
        log = work / f"fit_{k}.log"
        if k > 0:
            proc = fit(work, args.budget, resume=True, log=log)
        time.sleep(rng.uniform(0.5, 15.0))  # anywhere: start-up, collection, training, evaluation, saving
        if proc.poll() is not None:
            print(f"kill {k}: run already finished (rc {proc.returncode})")
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        n, ok = readable(ckpt_dir)
        unreadable += n - ok
        after = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
        regressions += int(after < before)
        progressed += int(after > before)
        if k > 0:
            resumed += int(restored(log))
        state = "resumed" if k > 0 and restored(log) else ("first run" if k == 0 else "killed before restoring")
        print(f"kill {k}: {state}; env steps in last.ckpt {before} -> {after}; checkpoints readable {ok}/{n}")
    final_log = work / "fit_final.log"
    proc = fit(work, args.budget, resume=True, log=final_log)
    proc.wait()
    final = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
    print(f"final resume: rc {proc.returncode}, env steps {final} of {args.budget}")
    if proc.returncode != 0:
        print(final_log.read_text()[-2000:])
    runs = sorted(p.name for p in (work / "runs/ppo_cartpole").iterdir())
    restarts = kills  # the kills - 1 killed restarts after the first run, plus the final one
    print(
        f"\n{kills} kills: {resumed + restored(final_log)}/{restarts} restarts restored the checkpoint, "
        f"{progressed}/{kills} kills came after new progress was saved, {unreadable} unreadable checkpoints, "
        f"{regressions} regressions of last.ckpt, run directories {runs} (one: every restart continued the "
        f"same run), budget {'finished' if final >= args.budget else 'NOT finished'}"
    )


if __name__ == "__main__":
    main()
