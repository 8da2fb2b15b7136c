"""Runs that survive: SIGTERM, SIGKILL, divergence, environment faults; safe checkpoints."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import A2C, DDPG, DQN, PPO, REINFORCE, SAC, TD3, EnvConfig
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.checkpointing import ReplaySideFileIO
from rl_lightning.errors import CollectionError, ConfigError, DivergenceError
from tests.helpers import build, quick_trainer

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs/ppo/cartpole.yaml")


def start_fit(tmp_path: Path, *extra: str) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "rl_lightning.cli",
        "fit",
        "--config",
        CONFIG,
        "--model.run.env_steps_per_epoch",
        "1024",
        "--trainer.enable_progress_bar",
        "false",
        "--seed_everything",
        "0",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "timed out waiting for the first checkpoint"
        time.sleep(0.2)


def test_sigterm_saves_a_final_checkpoint_and_exits_143(tmp_path):
    # Epochs far longer than the run: the only checkpoint can come from the SIGTERM handling.
    run = tmp_path / "runs/ppo_cartpole/version_0"
    proc = start_fit(
        tmp_path,
        "--model.run.total_env_steps",
        "10000000",
        "--model.run.env_steps_per_epoch",
        "1000000",
        "--trainer.log_every_n_steps",
        "1",
    )
    deadline = time.time() + 120
    while not list(run.glob("events.out.tfevents.*")) or time.time() < deadline - 115:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    time.sleep(2.0)  # a few rollouts in
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    # Preempted is not finished: `fit ... && next_step` must not go on (a shell's code for SIGTERM).
    assert proc.returncode == 143, err[-3000:]
    final = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert final["rl_lightning"]["env_steps"] > 0 and final["global_step"] > 0
    (line,) = [x for x in err.splitlines() if x.startswith("rl-lightning: fit stopped by SIGTERM")]
    steps = final["rl_lightning"]["env_steps"]
    assert f"at env step {steps} (preempted); exit status 143" in line and "--ckpt_path runs/" in line


def test_sigkill_at_any_moment_leaves_a_resumable_checkpoint(tmp_path):
    last = tmp_path / "runs/ppo_cartpole/version_0/checkpoints/last.ckpt"
    proc = start_fit(tmp_path, "--model.run.total_env_steps", "10000000")
    wait_for(last, proc)
    time.sleep(np.random.default_rng().uniform(0.0, 2.0))
    proc.kill()
    proc.communicate()
    saved = torch.load(last, weights_only=True)["rl_lightning"]["env_steps"]
    budget = saved + 2048
    proc = start_fit(tmp_path, "--model.run.total_env_steps", str(budget), "--ckpt_path", "last")
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert torch.load(last, weights_only=True)["rl_lightning"]["env_steps"] >= budget


class NaNAfter(PPO):
    """PPO whose loss turns NaN from a given env step on (a planted divergence)."""

    def __init__(self, nan_at: int, **kwargs):
        super().__init__(**kwargs)
        self.nan_at = nan_at

    def collect_rollout(self, policy):
        rollout = super().collect_rollout(policy)
        if self.env_steps >= self.nan_at:  # from the rollout that reaches nan_at on
            rollout = rollout._replace(rewards=rollout.rewards * float("nan"))
        return rollout


def nan_at_768() -> NaNAfter:
    """PPO on CartPole whose rewards turn NaN from env step 768 on (evaluations every 512)."""
    return build(
        NaNAfter,
        nan_at=768,
        env=EnvConfig("CartPole-v1", num_envs=4, seed=0),
        total_env_steps=4096,
        num_steps=64,
        num_minibatches=2,
        update_epochs=1,
        env_steps_per_epoch=512,
        eval_episodes=1,
    )


def test_planted_nan_stops_the_run_naming_step_loss_and_last_good_checkpoint(tmp_path):
    model = nan_at_768()
    last = LastCheckpoint(dirpath=tmp_path)
    trainer = quick_trainer(callbacks=[last], enable_checkpointing=True)
    with pytest.raises(DivergenceError, match=r"diverged at env step 768 .*loss = nan.*last\.ckpt"):
        trainer.fit(model)
    good = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert good["rl_lightning"]["env_steps"] == 512
    assert all(torch.isfinite(t).all() for t in good["state_dict"].values())


def test_a_checkpoint_saved_every_step_never_holds_the_diverged_weights(tmp_path):
    # The check runs as a callback before the checkpoint callbacks of the same training step.
    model = nan_at_768()
    every_step = ModelCheckpoint(dirpath=tmp_path, filename="step", every_n_train_steps=1, save_on_exception=False)
    trainer = quick_trainer(callbacks=[every_step], enable_checkpointing=True)
    with pytest.raises(DivergenceError, match=r"step\.ckpt"):
        trainer.fit(model)
    good = torch.load(tmp_path / "step.ckpt", weights_only=True)
    assert good["rl_lightning"]["env_steps"] == 512  # the step before the NaN rollout
    assert all(torch.isfinite(t).all() for t in good["state_dict"].values())


class FaultyEnv(gym.Env):
    """20-step episodes; the simulator fails on the 30th reset of an instance (its env step 580)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.resets == 30:
            raise RuntimeError("simulator exploded")
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 20, False, {}


gym.register("test/Faulty-v0", entry_point=FaultyEnv)


def test_environment_fault_names_env_and_step_after_saving_a_checkpoint(tmp_path):
    model = build(
        PPO,
        env=EnvConfig("test/Faulty-v0", num_envs=2, seed=0),
        total_env_steps=4096,
        num_steps=32,
        num_minibatches=1,
        update_epochs=1,
        env_steps_per_epoch=128,
        eval_episodes=1,
    )
    trainer = quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True)
    expected = r"Experience collection on 'test/Faulty-v0' failed at env step 1152: RuntimeError: simulator"
    with pytest.raises(CollectionError, match=expected):
        trainer.fit(model)
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["rl_lightning"]["env_steps"] == 1152


class FaultyBoxEnv(FaultyEnv):
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


gym.register("test/FaultyBox-v0", entry_point=FaultyBoxEnv)


@pytest.mark.parametrize(
    "make",
    [
        lambda: build(A2C, env=EnvConfig("test/Faulty-v0", num_envs=2, seed=0), total_env_steps=4096, eval_episodes=1),
        lambda: build(
            SAC,
            env=EnvConfig("test/FaultyBox-v0", num_envs=2, seed=0),
            total_env_steps=4096,
            learning_starts=1000,
            batch_size=8,
            hidden_sizes=(8,),
            eval_episodes=1,
        ),
    ],
    ids=["A2C", "SAC"],
)
def test_faults_in_collection_inside_the_training_step_are_named_too(make):
    """A2C's rollouts and SAC's phases are collected inside training_step (lazily, several per step);
    an env fault there is named like one in the data loader."""
    with pytest.raises(CollectionError, match=r"Experience collection on 'test/Faulty(Box)?-v0' failed at env step"):
        quick_trainer().fit(make())


TINY = dict(total_env_steps=512, env_steps_per_epoch=256, eval_episodes=1)
ALGORITHMS = {
    "PPO": lambda: build(PPO, env=EnvConfig("CartPole-v1", num_envs=2), num_steps=64, num_minibatches=1, **TINY),
    "A2C": lambda: build(
        A2C, env=EnvConfig("Pendulum-v1", num_envs=2), normalize_obs=True, normalize_reward=True, **TINY
    ),
    "REINFORCE": lambda: build(REINFORCE, env=EnvConfig("CartPole-v1", num_envs=2), num_steps=128, **TINY),
    "DQN": lambda: build(
        DQN,
        env=EnvConfig("CartPole-v1", num_envs=2),
        learning_starts=128,
        train_freq=16,
        gradient_steps=2,
        batch_size=32,
        buffer_size=1000,
        save_replay_buffer=True,
        prioritized_replay=True,
        **TINY,
    ),
    "SAC": lambda: build(
        SAC,
        env=EnvConfig("Pendulum-v1", num_envs=1),
        learning_starts=128,
        batch_size=32,
        buffer_size=1000,
        hidden_sizes=(32, 32),
        save_replay_buffer=True,
        **TINY,
    ),
    "TD3": lambda: build(
        TD3,
        env=EnvConfig("Pendulum-v1", num_envs=1),
        learning_starts=128,
        batch_size=32,
        buffer_size=1000,
        hidden_sizes=(32, 32),
        **TINY,
    ),
    "DDPG": lambda: build(
        DDPG,
        env=EnvConfig("Pendulum-v1", num_envs=1),
        learning_starts=128,
        batch_size=32,
        buffer_size=1000,
        hidden_sizes=(32, 32),
        **TINY,
    ),
}


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_every_checkpoint_loads_with_weights_only(algo, tmp_path):
    model = ALGORITHMS[algo]()
    cbs = [
        ModelCheckpoint(dirpath=tmp_path, monitor="val/episode_return", mode="max", save_top_k=2),
        LastCheckpoint(dirpath=tmp_path),
    ]
    quick_trainer(callbacks=cbs, enable_checkpointing=True).fit(model)
    files = list(tmp_path.glob("*.ckpt"))
    assert len(files) >= 2
    for f in files:
        ckpt = torch.load(f, weights_only=True)  # only tensors and plain containers: no code runs
        assert isinstance(ckpt["hyper_parameters"]["env"], dict)
        assert set(ckpt["rl_lightning"]) >= {"env_steps", "env_seed", "rng"}
        assert ckpt["rl_lightning"]["env_steps"] > 0
    restored = type(model).load_from_checkpoint(tmp_path / "last.ckpt")
    assert restored.env_steps == model.env_steps


class FailingIO(TorchCheckpointIO):
    """A kill between writing the replay side file and writing the checkpoint."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        raise KeyboardInterrupt


def replay_checkpoint(env_steps: int) -> dict:
    return {"rl_lightning": {"env_steps": env_steps, "replay_buffer": {"obs": torch.full((4,), float(env_steps))}}}


def test_replay_side_file_survives_a_kill_and_follows_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 1)
    io, last = ReplaySideFileIO(TorchCheckpointIO()), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(replay_checkpoint(100), last)  # into a directory that does not exist yet
    tmp_path = last.parent
    io.save_checkpoint(replay_checkpoint(200), last)
    assert [p.name for p in tmp_path.glob("*.replay-*")] == ["last.ckpt.replay-000000000200.pt"]
    assert "replay_buffer" not in torch.load(last, weights_only=True)["rl_lightning"]  # small checkpoint

    # Killed after the side file of step 300, before the checkpoint: last.ckpt still loads step 200's.
    with pytest.raises(KeyboardInterrupt):
        ReplaySideFileIO(FailingIO()).save_checkpoint(replay_checkpoint(300), last)
    state = io.load_checkpoint(last)["rl_lightning"]
    assert state["env_steps"] == 200 and torch.equal(state["replay_buffer"]["obs"], torch.full((4,), 200.0))
    io.save_checkpoint(replay_checkpoint(400), last)  # the next save prunes the orphan
    assert [p.name for p in tmp_path.glob("*.replay-*")] == ["last.ckpt.replay-000000000400.pt"]

    # Small buffers stay inline (and leave no side file behind).
    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 10**9)
    io.save_checkpoint(replay_checkpoint(500), last)
    assert "replay_buffer" in torch.load(last, weights_only=True)["rl_lightning"]
    assert not list(tmp_path.glob("*.replay-*"))

    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 1)
    io.save_checkpoint(replay_checkpoint(600), tmp_path / "epoch=1.ckpt")
    io.remove_checkpoint(tmp_path / "epoch=1.ckpt")  # as ModelCheckpoint drops one out of its top k
    assert not list(tmp_path.glob("epoch=1*"))


def test_missing_replay_side_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 1)
    io = ReplaySideFileIO(TorchCheckpointIO())
    io.save_checkpoint(replay_checkpoint(100), tmp_path / "last.ckpt")
    (tmp_path / "last.ckpt.replay-000000000100.pt").unlink()
    with pytest.raises(ConfigError, match=r"replay buffer in .*last\.ckpt\.replay-000000000100\.pt, which is missing"):
        io.load_checkpoint(tmp_path / "last.ckpt")
