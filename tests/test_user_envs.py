"""Your own env and wrappers from a config alone: gymnasium's ``module:EnvId`` form, an Env class by
path, ``env.wrappers`` applied in training and evaluation, and one-line errors when they are wrong."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
import torch

from rl_lightning import PPO, EnvConfig, RunConfig, evaluation
from rl_lightning.cli import main
from rl_lightning.envs.make import make_vector_env
from rl_lightning.errors import ConfigError
from tests.helpers import ROOT, quick_trainer

TINY = RunConfig(total_env_steps=128, env_steps_per_epoch=128, eval_episodes=1)
CARTPOLE = ["--config", str(ROOT / "configs/ppo/cartpole.yaml")]


def test_module_colon_env_id_imports_the_module_that_registers_it():
    envs = make_vector_env(EnvConfig("rl_lightning.envs.examples:GridReach-v0", num_envs=1))
    assert isinstance(envs.structured_observation_space, gym.spaces.Dict)
    envs.close()


def test_module_colon_class_makes_an_unregistered_env_class():
    model = PPO(env=EnvConfig("tests.helpers:MultiBinaryActionEnv", num_envs=2), run=TINY, num_steps=16)
    quick_trainer().fit(model)
    assert model.env_steps == 128


def test_wrappers_apply_to_training_and_evaluation_envs():
    time_aware = {"class_path": "gymnasium.wrappers.TimeAwareObservation"}  # adds the step count: 4 -> 5
    env = EnvConfig("CartPole-v1", num_envs=2, wrappers=[time_aware])
    model = PPO(env=env, run=TINY, num_steps=16)
    quick_trainer().fit(model)  # evaluation would fail on 4-wide observations
    assert model.agent.actor_body[0].in_features == 5


@pytest.mark.timeout(60)  # without the step limit, evaluation never returns
def test_evaluation_cuts_the_episodes_of_an_env_with_no_time_limit(monkeypatch):
    monkeypatch.setattr(evaluation, "EVAL_STEP_LIMIT", 50)
    right = lambda obs: torch.ones(len(obs), dtype=torch.long)  # noqa: E731
    endless = EnvConfig("tests.helpers:Endless", num_envs=1)
    with pytest.warns(UserWarning, match=r"cut 2 episode\(s\) of tests.helpers:Endless at 50 steps.*max_episode_steps"):
        returns, lengths = evaluation.play_episodes(right, endless, seeds=[0, 1])
    assert lengths.tolist() == [50, 50] and returns.tolist() == [50.0, 50.0]
    # A time limit of the env's own, longer than the cut, is the env's to keep: from gymnasium.make or a wrapper.
    limited = EnvConfig("tests.helpers:Endless", num_envs=1, env_kwargs={"max_episode_steps": 80})
    wrapped = EnvConfig("tests.helpers:Endless", num_envs=1, wrappers=[_time_limit(70)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert evaluation.play_episodes(right, limited, seeds=[0])[1].tolist() == [80]
        assert evaluation.play_episodes(right, wrapped, seeds=[0])[1].tolist() == [70]


def _time_limit(steps: int) -> dict:
    return {"class_path": "gymnasium.wrappers.TimeLimit", "init_args": {"max_episode_steps": steps}}


def test_a_wrapper_from_the_command_line_trains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            *CARTPOLE,
            "--model.env.env_id",
            "FrozenLake-v1",
            "--model.env.wrappers",
            "[{class_path: gymnasium.wrappers.TimeLimit, init_args: {max_episode_steps: 20}}]",
            "--model.run.total_env_steps",
            "512",
            "--model.run.eval_episodes",
            "1",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert list(tmp_path.glob("runs/ppo_frozenlake/version_0/checkpoints/last.ckpt"))  # named after the env


def test_config_errors_are_raised_from_python_too():
    with pytest.raises(ConfigError, match=r"env.wrappers\[1\]"):
        make_vector_env(EnvConfig("CartPole-v1", wrappers=["gymnasium.wrappers.TimeAwareObservation", "nope.Nope"]))
