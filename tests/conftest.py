import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

torch.set_num_threads(1)


class MultiBinaryActionEnv(gym.Env):
    """A tiny env whose action space no algorithm here supports."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiBinary(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}


if "test/MultiBinary-v0" not in gym.envs.registry:
    gym.register("test/MultiBinary-v0", entry_point=MultiBinaryActionEnv)


def quick_trainer(**kwargs) -> L.Trainer:
    defaults = dict(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


@pytest.fixture
def trainer_factory():
    return quick_trainer
