"""The torch backend (``env.backend: torch``): ``rl_lightning.envs.torch``'s batched, pure-torch ports of
the classic-control envs on the module's device. Its steps take and return tensors there, so
collectors keep whole rollouts and collection phases on the device; evaluation plays gymnasium's
reference env."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch

from rl_lightning.envs.backend import Build, EnvBackend
from rl_lightning.envs.torch import TORCH_ENVS, make_torch_env
from rl_lightning.errors import ConfigError

if TYPE_CHECKING:
    from rl_lightning.envs.make import EnvConfig


class TorchBackend(EnvBackend):
    """The torch envs; see the module docstring."""

    name = "torch"
    steps_on_device = True
    seeds_each_sub_env = False  # one generator for the batch

    def check_env_id(self, env_id: str) -> None:
        if env_id not in TORCH_ENVS:
            make_torch_env(env_id, 1)  # its ConfigError names the ids there are

    def make(self, config: EnvConfig, build: Build) -> gym.vector.VectorEnv:
        if build.render_mode is not None:
            raise ConfigError("The torch backend does not render; use env.backend=gymnasium to record videos.")
        envs = make_torch_env(config.env_id, build.num_envs, device=build.device, **config.env_kwargs)
        envs.structured_observation_space = envs.single_observation_space
        envs.frame_stack = 1
        return envs

    def evaluation_backend(self, render_mode: str | None) -> str:
        """gymnasium's env: evaluation plays the reference implementation (and can render)."""
        return "gymnasium"

    def device(self, envs: gym.vector.VectorEnv) -> torch.device:
        return envs.device
