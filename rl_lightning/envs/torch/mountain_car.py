"""MountainCar-v0 and MountainCarContinuous-v0 in torch: gymnasium's ``MountainCarEnv`` and
``Continuous_MountainCarEnv`` (Moore 1990), batched.

Same constants, velocity and position clipping, inelastic left wall, goal test, rewards (the
continuous one penalizes the unclipped action, as gymnasium does) and reset distribution
position ~ U(-0.6, -0.4), velocity 0, as gymnasium/envs/classic_control/{mountain_car,
continuous_mountain_car}.py. State layout as gymnasium's: ``[position, velocity]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from rl_lightning.envs.torch.base import TorchVectorEnv


class MountainCar(TorchVectorEnv):
    """Batched MountainCar-v0, three actions: push left, none, push right (arguments of
    ``TorchVectorEnv``, time limit 200 by default).

    Args:
        goal_velocity: Minimum velocity at the goal position for the episode to end.
    """

    env_id = "MountainCar-v0"
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    force = 0.001
    gravity = 0.0025

    def __init__(self, *args: Any, goal_velocity: float = 0.0, **kwargs: Any) -> None:
        self.goal_velocity = goal_velocity
        super().__init__(*args, **kwargs)

    def make_observation_space(self) -> spaces.Box:
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        return spaces.Box(low, high, dtype=np.float32)

    def make_action_space(self) -> spaces.Space:
        return spaces.Discrete(3)

    def initial_state(self) -> Tensor:
        position = self.uniform(-0.6, -0.4)
        return torch.stack([position, torch.zeros_like(position)], -1)

    def acceleration(self, position: Tensor, actions: Tensor) -> Tensor:
        return (actions.to(position.dtype) - 1) * self.force + torch.cos(3 * position) * -self.gravity

    def reward(self, terminated: Tensor, actions: Tensor) -> Tensor:
        return torch.full(terminated.shape, -1.0, dtype=self.dtype, device=terminated.device)

    def dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        position, velocity = state.unbind(-1)
        velocity = (velocity + self.acceleration(position, actions)).clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        # The left wall is inelastic: gymnasium tests `position == min_position` after clipping.
        velocity = torch.where((position <= self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return torch.stack([position, velocity], -1), self.reward(terminated, actions), terminated

    def observe(self, state: Tensor) -> Tensor:
        return state


class MountainCarContinuous(MountainCar):
    """Batched MountainCarContinuous-v0, one force in [-1, 1] (arguments of ``MountainCar``, time
    limit 999 by default)."""

    env_id = "MountainCarContinuous-v0"
    goal_position = 0.45
    power = 0.0015

    def make_action_space(self) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def acceleration(self, position: Tensor, actions: Tensor) -> Tensor:
        force = actions[:, 0].clamp(-1.0, 1.0)
        return force * self.power - 0.0025 * torch.cos(3 * position)

    def reward(self, terminated: Tensor, actions: Tensor) -> Tensor:
        # 100 at the goal, minus 0.1 * action^2 of the action as given (gymnasium does not clip it here)
        return 100.0 * terminated.to(self.dtype) - actions[:, 0].to(self.dtype) ** 2 * 0.1
