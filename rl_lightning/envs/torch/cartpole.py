"""CartPole-v1 in torch: gymnasium's ``CartPoleEnv`` (Barto, Sutton & Anderson 1983), batched.

Same constants, explicit Euler integrator, termination bounds, reward (optionally Sutton & Barto's)
and reset distribution U(-0.05, 0.05)^4 as gymnasium/envs/classic_control/cartpole.py.
State layout as gymnasium's ``env.unwrapped.state``: ``[x, x_dot, theta, theta_dot]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from rl_lightning.envs.torch.base import TorchVectorEnv


class CartPole(TorchVectorEnv):
    """Batched CartPole-v1 (arguments of ``TorchVectorEnv``, time limit 500 by default).

    Args:
        sutton_barto_reward: Reward 0 per step and -1 on termination instead of +1 per step.
    """

    env_id = "CartPole-v1"
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, *args: Any, sutton_barto_reward: bool = False, **kwargs: Any) -> None:
        self.sutton_barto_reward = sutton_barto_reward
        super().__init__(*args, **kwargs)

    def make_observation_space(self) -> spaces.Box:
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32)
        return spaces.Box(-high, high, dtype=np.float32)

    def make_action_space(self) -> spaces.Space:
        return spaces.Discrete(2)

    def initial_state(self) -> Tensor:
        return self.uniform(-0.05, 0.05, 4)

    def dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # Explicit Euler (gymnasium's default kinematics_integrator)
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        if self.sutton_barto_reward:
            reward = -terminated.to(state.dtype)
        else:
            reward = torch.ones_like(x)
        return torch.stack([x, x_dot, theta, theta_dot], -1), reward, terminated

    def observe(self, state: Tensor) -> Tensor:
        return state
