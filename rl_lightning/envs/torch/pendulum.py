"""Pendulum-v1 in torch: gymnasium's ``PendulumEnv``, batched.

Same constants, semi-implicit Euler step, speed and torque clipping, cost on the angle normalized
to [-pi, pi), and reset distribution theta ~ U(-pi, pi), theta_dot ~ U(-1, 1) as
gymnasium/envs/classic_control/pendulum.py. Never terminates; truncated at 200 steps.
State layout as gymnasium's ``env.unwrapped.state``: ``[theta, theta_dot]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from rl_lightning.envs.torch.base import TorchVectorEnv


def angle_normalize(x: Tensor) -> Tensor:
    # torch.remainder, like Python's and numpy's %, takes the sign of the divisor.
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(TorchVectorEnv):
    """Batched Pendulum-v1 (arguments of ``TorchVectorEnv``, time limit 200 by default).

    Args:
        g: Gravitational acceleration.
    """

    env_id = "Pendulum-v1"
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741 (gymnasium's name)

    def __init__(self, *args: Any, g: float = 10.0, **kwargs: Any) -> None:
        self.g = g
        super().__init__(*args, **kwargs)

    def make_observation_space(self) -> spaces.Box:
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        return spaces.Box(-high, high, dtype=np.float32)

    def make_action_space(self) -> spaces.Space:
        return spaces.Box(-self.max_torque, self.max_torque, (1,), dtype=np.float32)

    def initial_state(self) -> Tensor:
        return torch.stack([self.uniform(-math.pi, math.pi), self.uniform(-1.0, 1.0)], -1)

    def dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        th, thdot = state.unbind(-1)
        g, m, l, dt = self.g, self.m, self.l, self.dt  # noqa: E741 (gymnasium's names)
        u = actions[:, 0].clamp(-self.max_torque, self.max_torque)
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        terminated = torch.zeros_like(th, dtype=torch.bool)
        return torch.stack([newth, newthdot], -1), -costs, terminated

    def observe(self, state: Tensor) -> Tensor:
        theta, thetadot = state.unbind(-1)
        return torch.stack([torch.cos(theta), torch.sin(theta), thetadot], -1)
