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


class BoundedActionEnv(gym.Env):
    """Observations far from zero mean / unit scale; fails on any action outside [-0.5, 0.5]^2."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-0.5, 0.5, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return (np.array([100.0, -50.0, 3.0]) + self.np_random.normal(size=3) * [10.0, 1.0, 0.1]).astype(np.float32)

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=np.float32)), f"out of bounds: {action}"
        self.t += 1
        return self._obs(), float(-np.sum(np.square(action))) * 100, False, self.t >= 20, {}


if "test/BoundedAction-v0" not in gym.envs.registry:
    gym.register("test/BoundedAction-v0", entry_point=BoundedActionEnv)


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
