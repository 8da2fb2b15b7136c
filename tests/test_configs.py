"""The run and replay configs: one dataclass each, shared by the algorithms, with per-algorithm
defaults for the fields a user leaves out, resolved values in checkpoints."""

import dataclasses
import inspect

import pytest
import torch

from rl_lightning import DQN, PPO, REINFORCE, SAC, TD3, EnvConfig, ReplayConfig, RunConfig
from rl_lightning.errors import ConfigError
from tests.helpers import quick_trainer


def test_fields_left_out_take_the_algorithms_own_defaults():
    dqn = DQN(replay=ReplayConfig(buffer_size=50_000))
    assert dqn.replay_config == ReplayConfig(50_000, 32, 100, 4, 1, 1, False, False)  # DQN's, not SAC's
    sac = SAC(replay=ReplayConfig(buffer_size=50_000))
    assert (sac.replay_config.batch_size, sac.replay_config.train_freq, sac.replay_config.phases_per_step) == (
        256,
        1,
        10,
    )
    assert REINFORCE(run=RunConfig(eval_episodes=3)).total_env_steps == 500_000
    assert PPO(run=RunConfig(eval_episodes=3)).total_env_steps == 1_000_000
    assert PPO(run={"total_env_steps": 5}).run_config == RunConfig(5, 10_000, 20)  # a checkpoint's plain dict


def test_the_signature_defaults_are_complete():
    for cls in (DQN, SAC, TD3, PPO, REINFORCE):
        for name, param in inspect.signature(cls).parameters.items():
            if dataclasses.is_dataclass(param.default) and name != "env":
                assert None not in dataclasses.astuple(param.default), (cls.__name__, name)


def test_checkpoints_hold_the_resolved_configs(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    model = DQN(
        env=EnvConfig("CartPole-v1", num_envs=2),
        run=RunConfig(total_env_steps=64, env_steps_per_epoch=64, eval_episodes=1),
        replay=ReplayConfig(buffer_size=500, learning_starts=32),
    )
    quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True).fit(model)
    hparams = torch.load(tmp_path / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["replay"] == dataclasses.asdict(ReplayConfig(500, 32, 32, 4, 1, 1, False, False))
    assert hparams["run"] == dict(
        total_env_steps=64,
        env_steps_per_epoch=64,
        eval_episodes=1,
        population=1,
        population_seeds=[],
        population_variants={},
        population_ddp="split",
    )
    assert hparams["env"]["seed"] is not None  # the seed drawn in setup
    assert DQN.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=True).replay_config == model.replay_config


@pytest.mark.parametrize("cls", [SAC, TD3])
def test_off_policy_targets_discount_with_the_configured_gamma(cls):
    """The replay buffer computes each target's discount: it must be the algorithm's gamma."""
    model = cls(
        env=EnvConfig("Pendulum-v1", num_envs=1, seed=0),
        run=RunConfig(total_env_steps=40, env_steps_per_epoch=40, eval_episodes=1),
        replay=ReplayConfig(buffer_size=100, batch_size=8, learning_starts=20),
        gamma=0.5,
        hidden_sizes=(8,),
    )
    quick_trainer().fit(model)
    assert torch.all(model.replay.sample().discounts == 0.5)


def test_bad_replay_fields_name_the_config():
    with pytest.raises(ConfigError, match=r"replay.train_freq must be >= 1, got 0"):
        SAC(replay=ReplayConfig(train_freq=0))
