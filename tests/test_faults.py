"""Faults real runs meet, injected without root: a full disk, an unreadable checkpoint, a dead env
worker. None may leave a checkpoint that does not load; each is reported in one line with the way
on; a resume afterwards finishes the budget. (Kills, SIGTERM and NaN: tests/test_reliability.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from rl_lightning import PPO, SAC, EnvConfig, ReplayConfig, RunConfig
from rl_lightning.checkpointing import atomic_write, is_loadable, newest_loadable
from rl_lightning.cli import main
from rl_lightning.errors import CollectionError
from tests.helpers import ROOT, quick_trainer

DQN_CONFIG = str(ROOT / "configs/dqn/cartpole.yaml")


# ------------------------------------------------------------------------------------ atomic writes
def test_a_failed_write_leaves_the_previous_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "last.ckpt"
    atomic_write(target, lambda f: f.write(b"good"))

    def failing(f):
        f.write(b"half of a new checkpoint")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"No space left on device while writing.*last\.ckpt"):
        atomic_write(target, failing)
    assert target.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_the_temporary_file_lives_beside_the_target_so_the_last_step_is_a_rename(tmp_path, monkeypatch):
    """Not in the system temp dir: across filesystems a move is a copy, and a copy onto a full disk
    truncates the destination."""
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((Path(src).parent, Path(dst).parent))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write(tmp_path / "sub" / "a.ckpt", lambda f: f.write(b"x"))
    assert seen == [(tmp_path / "sub", tmp_path / "sub")]
    assert oct((tmp_path / "sub" / "a.ckpt").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------- full disk
FULL_DISK_FIT = """
import resource, sys
from rl_lightning.cli import main
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))  # files larger fail: EFBIG
main(sys.argv[2:])
"""


def cli_args(*extra: str) -> list[str]:
    # DQN with its replay buffer in the checkpoints: each checkpoint is larger than the one before.
    return [
        "fit",
        "--config",
        DQN_CONFIG,
        "--model.run.total_env_steps",
        "3000",
        "--model.run.env_steps_per_epoch",
        "1000",
        "--model.run.eval_episodes",
        "2",
        "--model.replay.learning_starts",
        "200",
        "--model.replay.save_replay_buffer",
        "true",
        "--model.hidden_sizes",
        "[16]",
        "--seed_everything",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]


def test_a_full_disk_never_costs_the_last_good_checkpoint_and_the_run_resumes(tmp_path, cli_here):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    limit = 95_000  # the first epoch's checkpoints (~80 kB) fit, the second epoch's (~108 kB) do not
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK_FIT, str(limit), *cli_args()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 1, out.stderr[-3000:]
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("rl-lightning: error: fit failed at env step"), out.stderr[-3000:]
    assert "File too large while writing" in error and "Newest checkpoint that loads" in error
    assert "Traceback" not in out.stderr
    checkpoints = tmp_path / "runs/dqn_cartpole/version_0/checkpoints"
    assert all(is_loadable(p) for p in checkpoints.iterdir()), sorted(p.name for p in checkpoints.iterdir())
    saved = torch.load(checkpoints / "last.ckpt", weights_only=True)["rl_lightning"]["env_steps"]
    assert 1000 <= saved < 3000  # the first epoch's state, intact

    # Space again: continue the same run to the end of its budget (in this process: no file size limit).
    resumed = cli_here(*cli_args("--ckpt_path", "last"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["rl_lightning"]["env_steps"] >= 3000


# --------------------------------------------------------------------------- unreadable checkpoints
def fit_ppo_run(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/ppo/cartpole.yaml"),
            "--model.run.total_env_steps",
            "1024",
            "--model.run.env_steps_per_epoch",
            "512",
            "--model.run.eval_episodes",
            "1",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    return tmp_path / "runs/ppo_cartpole/version_0/checkpoints"


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def test_resume_from_last_skips_an_unreadable_newest_checkpoint(tmp_path, monkeypatch, capsys):
    checkpoints = fit_ppo_run(tmp_path, monkeypatch)
    truncate(checkpoints / "last.ckpt")
    os.utime(checkpoints / "last.ckpt")  # the newest file
    good, skipped = newest_loadable(list(checkpoints.glob("*.ckpt")))
    assert good is not None and good.name.startswith("best") and [p for p, _ in skipped] == [checkpoints / "last.ckpt"]
    assert skipped[0][1].startswith("it does not load (truncated or corrupt: ")
    main(
        [
            "validate",
            "--config",
            str(ROOT / "configs/ppo/cartpole.yaml"),
            "--ckpt_path",
            "last",
            "--model.run.eval_episodes",
            "1",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    err = capsys.readouterr().err
    relative = checkpoints.relative_to(tmp_path)  # as the config's logger names the run
    assert f"Skipped {relative / 'last.ckpt'}: it does not load (truncated or corrupt: " in err
    assert f"Using {relative / good.name}." in err


def test_an_explicit_unreadable_checkpoint_is_one_line_naming_one_that_loads(tmp_path, monkeypatch, capsys):
    checkpoints = fit_ppo_run(tmp_path, monkeypatch)
    truncate(checkpoints / "last.ckpt")
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--ckpt_path", str(checkpoints / "last.ckpt")]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"rl-lightning: error: --ckpt_path {checkpoints / 'last.ckpt'}: it does not load (")
    assert "The newest checkpoint beside it that loads:" in err[-1] and "best-" in err[-1]


def test_resume_from_last_with_nothing_loadable_lists_what_it_tried(tmp_path, monkeypatch, capsys):
    checkpoints = fit_ppo_run(tmp_path, monkeypatch)
    for path in checkpoints.glob("*.ckpt"):
        truncate(path)
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--ckpt_path", "last"])
    err = capsys.readouterr().err
    assert "--ckpt_path last: no checkpoint that loads under" in err and "last.ckpt" in err


# --------------------------------------------------------------------------------- dead env workers
class KillWorker(L.Callback):
    """SIGKILLs one sub-env process of an async vector env after a few training steps (the OOM killer)."""

    def __init__(self, after_steps: int = 2) -> None:
        self.after_steps = after_steps
        self.killed = False

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if not self.killed and batch_idx + 1 == self.after_steps:
            os.kill(module.envs.processes[0].pid, signal.SIGKILL)
            module.envs.processes[0].join()
            self.killed = True


def async_ppo(restart: bool) -> PPO:
    return PPO(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=0, vectorization="async", restart_on_failure=restart),
        run=RunConfig(total_env_steps=1024, env_steps_per_epoch=512, eval_episodes=1),
        num_steps=64,
        num_minibatches=2,
        update_epochs=1,
    )


def test_a_killed_worker_stops_the_run_naming_env_and_step_by_default():
    model = async_ppo(restart=False)
    with pytest.raises(CollectionError, match=r"on 'CartPole-v1' failed at env step 256: BrokenPipeError"):
        quick_trainer(callbacks=[KillWorker()]).fit(model)


def test_restart_on_failure_rebuilds_the_envs_and_finishes_the_budget():
    model = async_ppo(restart=True)
    trainer = quick_trainer(callbacks=[KillWorker()], log_every_n_steps=1)
    trainer.fit(model)
    assert model.env_steps == 1024 and model.env_restarts == 1
    assert float(trainer.callback_metrics["rollout/env_restarts"]) == 1.0


def test_restart_keeps_the_replay_buffer_and_cuts_its_running_episodes():
    model = SAC(
        env=EnvConfig("Pendulum-v1", num_envs=2, seed=0, vectorization="async", restart_on_failure=True),
        run=RunConfig(total_env_steps=400, env_steps_per_epoch=400, eval_episodes=1),
        replay=ReplayConfig(buffer_size=1000, batch_size=16, learning_starts=100, phases_per_step=5),
        hidden_sizes=(8,),
    )
    quick_trainer(callbacks=[KillWorker(after_steps=3)]).fit(model)
    assert model.env_steps == 400 and model.env_restarts == 1
    assert model.replay.buffer.num_adds == 200  # every vector step, kept across the restart (no second warm-up)


def test_the_cli_writes_its_config_atomically_too(tmp_path, monkeypatch):
    import rl_lightning.cli as cli

    written = []
    real = cli.atomic_write
    monkeypatch.setattr(cli, "atomic_write", lambda path, write: (written.append(Path(path).name), real(path, write)))
    fit_ppo_run(tmp_path, monkeypatch)
    assert written == ["config.yaml"]
    assert (tmp_path / "runs/ppo_cartpole/version_0/config.yaml").read_text().startswith("# lightning.pytorch==")
