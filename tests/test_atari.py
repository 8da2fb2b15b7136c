"""Atari preprocessing and a DQN smoke run (skipped without ale-py, the `atari` extra)."""

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from rl_lightning.data.buffers import ReplayBuffer  # noqa: E402
from rl_lightning.data.replay import ReplayCollector  # noqa: E402
from rl_lightning.envs.atari import EpisodicLifeEnv, FireResetEnv, make_atari_env  # noqa: E402
from rl_lightning.envs.make import EnvConfig, make_vector_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def wrappers(env: gym.Env) -> list[type]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(type(env))
        env = env.env
    return found


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_observations_are_stacked_uint8_frames(env_id):
    envs = make_vector_env(EnvConfig(env_id, num_envs=2))
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert envs.single_observation_space.shape == (4, 84, 84)
    obs, *_ = envs.step(envs.action_space.sample())
    assert obs.dtype == np.uint8
    envs.close()


def test_training_only_wrappers_are_left_out_of_evaluation():
    train = wrappers(make_atari_env("ALE/Breakout-v5", {}, None, training=True))
    evaluation = wrappers(make_atari_env("ALE/Breakout-v5", {}, None, training=False))
    assert EpisodicLifeEnv in train and gym.wrappers.TransformReward in train
    assert EpisodicLifeEnv not in evaluation and gym.wrappers.TransformReward not in evaluation
    assert FireResetEnv in train and FireResetEnv in evaluation
    # Episode statistics sit inside all preprocessing (the list runs outside in), on the raw game.
    for chain in (train, evaluation):
        assert chain.index(gym.wrappers.RecordEpisodeStatistics) > chain.index(gym.wrappers.AtariPreprocessing)
    pong = wrappers(make_atari_env("ALE/Pong-v5", {}, None, training=True))
    assert FireResetEnv in pong and gym.wrappers.AtariPreprocessing in pong  # Pong has FIRE too (as in SB3)


def test_a_lost_life_ends_the_training_episode_but_not_the_game():
    env = make_atari_env("ALE/Breakout-v5", {}, None, training=True)
    env.reset(seed=0)
    ale = env.unwrapped.ale
    start_lives = ale.lives()
    for _ in range(5000):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert reward in (0.0, 1.0)  # clipped
        if terminated:
            break
    assert terminated and ale.lives() == start_lives - 1
    assert "episode" not in info  # statistics only at real game over
    env.reset()
    assert ale.lives() == start_lives - 1  # the game went on
    env.close()


def test_rewards_are_clipped_for_training_and_game_scores_are_reported_unclipped():
    # Space Invaders pays 5-30 points per alien: the clipping is visible.
    def play(training):
        env = make_atari_env("ALE/SpaceInvaders-v5", {}, None, training=training)
        env.reset(seed=0)
        env.action_space.seed(0)
        rewards = []
        while True:
            _, r, terminated, truncated, info = env.step(env.action_space.sample())
            rewards.append(r)
            if (terminated or truncated) and env.unwrapped.ale.game_over():
                env.close()
                return np.array(rewards), info["episode"]["r"]

    eval_rewards, eval_score = play(training=False)
    assert eval_rewards.max() > 1 and eval_score == pytest.approx(eval_rewards.sum())
    train_rewards, train_score = play(training=True)
    assert set(np.unique(train_rewards)) <= {0.0, 1.0}
    assert train_score > train_rewards.sum()  # statistics hold the real score, not the clipped sum


def test_frame_stacks_rebuilt_from_the_buffer_equal_the_real_observations():
    envs = make_vector_env(EnvConfig("ALE/Breakout-v5", num_envs=1))
    buf = ReplayBuffer(120, 1, envs.single_observation_space, envs.single_action_space, frame_stack=4, seed=0)
    real = {}
    add = buf.add

    def recording_add(obs, actions, rewards, next_obs, terminated, truncated):
        real[int(buf.pos[0])] = (obs[0].clone(), next_obs[0].clone())
        add(obs, actions, rewards, next_obs, terminated, truncated)

    buf.add = recording_add
    collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
    collector.collect(collector.random_actions, 300)  # several lost lives and two wraparounds
    b = buf.sample(256)
    for i, row in enumerate(b.indices.tolist()):
        obs, next_obs = real[row]
        assert torch.equal(b.obs[i], obs) and torch.equal(b.next_obs[i], next_obs)
    envs.close()


# Slow (the default suite is at its time budget): Pong is configs/dqn/atari.yaml's own env, which
# tests/test_cli.py runs in the default suite.
@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_dqn_atari_config_smoke(env_id, tmp_path):
    args = ["fit", "--config", str(ROOT / "configs/dqn/atari.yaml"), "--model.env.env_id", env_id]
    args += [
        "--model.run.total_env_steps",
        "400",
        "--model.replay.learning_starts",
        "200",
        "--model.run.env_steps_per_epoch",
        "400",
    ]
    # Episodes capped at 2000 frames (500 agent steps, a truncation) keep the evaluation short.
    args += ["--model.run.eval_episodes", "1", "--model.env.env_kwargs", "{max_num_frames_per_episode: 2000}"]
    out = subprocess.run(
        [sys.executable, "-m", "rl_lightning.cli", *args, "--trainer.enable_progress_bar", "false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # The configured 1M-transition buffer: one uint8 frame each, reported at start.
    assert "Replay buffer: 7.07 GB on cpu per rank (7072 bytes per transition)" in out.stderr
    game = env_id.removeprefix("ALE/").removesuffix("-v5").lower()  # runs/<algorithm>_<env>
    ckpt = torch.load(tmp_path / f"runs/dqn_{game}/version_0/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] >= 400 and ckpt["hyper_parameters"]["env"]["env_id"] == env_id


@pytest.mark.slow  # ~16 s; tests/test_cli.py runs configs/ppo/atari.yaml on a tiny budget in the default suite
def test_ppo_atari_config_smoke(tmp_path):
    # configs/ppo/atari.yaml end to end on a tiny budget: 2 envs x 32 steps, 4 rollouts, one evaluation.
    args = ["fit", "--config", str(ROOT / "configs/ppo/atari.yaml"), "--model.env.num_envs", "2"]
    args += ["--model.num_steps", "32", "--model.run.total_env_steps", "256", "--model.run.env_steps_per_epoch", "256"]
    args += ["--model.run.eval_episodes", "1", "--model.env.env_kwargs", "{max_num_frames_per_episode: 2000}"]
    out = subprocess.run(
        [sys.executable, "-m", "rl_lightning.cli", *args, "--trainer.enable_progress_bar", "false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    ckpt = torch.load(tmp_path / "runs/ppo_breakoutnoframeskip/version_0/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] == 256
    hp = ckpt["hyper_parameters"]
    assert hp["env"]["env_id"] == "BreakoutNoFrameskip-v4" and hp["clip_coef"] == 0.1 and hp["ent_coef"] == 0.01
    assert ckpt["global_step"] == 4 * 4 * 4  # 4 rollouts x 4 epochs x 4 minibatches
    assert ckpt["state_dict"]["agent.encoder.cnn.0.weight"].shape == (32, 4, 8, 8)  # the shared Nature CNN
    # The best-by-evaluation checkpoint exists: the evaluation episode ran and logged val/episode_return.
    assert list((tmp_path / "runs/ppo_breakoutnoframeskip/version_0/checkpoints").glob("best-*.ckpt"))
