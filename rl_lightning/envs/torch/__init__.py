"""Torch-native, batched classic-control environments.

Each env is a ``gymnasium.vector.VectorEnv`` whose whole batch of states lives in one tensor on a
chosen device, stepped by tensor operations: no Python loop per sub-env, no host round trip. The
dynamics reproduce gymnasium's classic-control envs (tests/test_torch_envs.py checks them step by
step against gymnasium from thousands of random states). Select them from any config with
``env.backend: torch``.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_lightning.envs.torch.acrobot import Acrobot
from rl_lightning.envs.torch.base import TorchVectorEnv
from rl_lightning.envs.torch.cartpole import CartPole
from rl_lightning.envs.torch.mountain_car import MountainCar, MountainCarContinuous
from rl_lightning.envs.torch.pendulum import Pendulum
from rl_lightning.errors import ConfigError

TORCH_ENVS: dict[str, type[TorchVectorEnv]] = {
    cls.env_id: cls for cls in (CartPole, Pendulum, Acrobot, MountainCar, MountainCarContinuous)
}


def make_torch_env(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    **env_kwargs: Any,
) -> TorchVectorEnv:
    """The torch implementation of ``env_id`` with ``num_envs`` sub-envs on ``device``.

    ``env_kwargs`` are the gymnasium env's own keyword arguments (e.g. ``sutton_barto_reward``,
    ``g``, ``goal_velocity``) and ``max_episode_steps``, as ``gymnasium.make`` takes them.
    """
    if env_id not in TORCH_ENVS:
        raise ConfigError(
            f"There is no torch implementation of {env_id!r} (env.backend=torch); "
            f"supported: {', '.join(TORCH_ENVS)}. Use env.backend=gymnasium for other envs."
        )
    return TORCH_ENVS[env_id](num_envs, device=device, dtype=dtype, **env_kwargs)


__all__ = [
    "TORCH_ENVS",
    "Acrobot",
    "CartPole",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "TorchVectorEnv",
    "make_torch_env",
]
