"""Acrobot-v1 in torch: gymnasium's ``AcrobotEnv`` (Sutton 1996, the "book" dynamics), batched.

Same constants, one fourth-order Runge-Kutta step of dt = 0.2 s, angle wrapping to [-pi, pi],
velocity bounds, termination (tip above the bar by one link length), reward and reset
distribution U(-0.1, 0.1)^4 as gymnasium/envs/classic_control/acrobot.py (no torque noise, as
there). State layout as gymnasium's ``env.unwrapped.state``: ``[theta1, theta2, dtheta1, dtheta2]``.
"""

from __future__ import annotations

from math import pi

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from rl_lightning.envs.torch.base import TorchVectorEnv


def wrap(x: Tensor, m: float, M: float) -> Tensor:
    """Into [m, M]: gymnasium subtracts (adds) ``M - m`` while ``x > M`` (``x < m``); one multiple
    of it does the same in one step."""
    diff = M - m
    x = x - diff * torch.ceil((x - M) / diff).clamp(min=0)
    return x + diff * torch.ceil((m - x) / diff).clamp(min=0)


class Acrobot(TorchVectorEnv):
    """Batched Acrobot-v1 (arguments of ``TorchVectorEnv``, time limit 500 by default)."""

    env_id = "Acrobot-v1"
    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * pi
    MAX_VEL_2 = 9 * pi
    AVAIL_TORQUE = (-1.0, 0.0, 1.0)

    def make_observation_space(self) -> spaces.Box:
        high = np.array([1.0, 1.0, 1.0, 1.0, self.MAX_VEL_1, self.MAX_VEL_2], dtype=np.float32)
        return spaces.Box(-high, high, dtype=np.float32)

    def make_action_space(self) -> spaces.Space:
        return spaces.Discrete(3)

    def initial_state(self) -> Tensor:
        # gymnasium casts the initial state to float32, whatever it computes in later.
        return self.uniform(-0.1, 0.1, 4).float().to(self.dtype)

    def dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        torque = actions.to(state.dtype) - 1.0  # AVAIL_TORQUE[a] for a in {0, 1, 2}
        # rk4(self._dsdt, s_augmented, [0, dt]): one classical Runge-Kutta step
        dt, dt2 = self.dt, self.dt / 2.0
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt2 * k1, torque)
        k3 = self._dsdt(state + dt2 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1, theta2, dtheta1, dtheta2 = ns.unbind(-1)
        ns = torch.stack(
            [
                wrap(theta1, -pi, pi),
                wrap(theta2, -pi, pi),
                dtheta1.clamp(-self.MAX_VEL_1, self.MAX_VEL_1),
                dtheta2.clamp(-self.MAX_VEL_2, self.MAX_VEL_2),
            ],
            -1,
        )
        terminated = -torch.cos(ns[:, 0]) - torch.cos(ns[:, 1] + ns[:, 0]) > 1.0
        reward = terminated.to(state.dtype) - 1.0  # -1 per step, 0 on the terminating one
        return ns, reward, terminated

    def _dsdt(self, s: Tensor, a: Tensor) -> Tensor:
        m1, m2 = self.LINK_MASS_1, self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1, lc2 = self.LINK_COM_POS_1, self.LINK_COM_POS_2
        I1 = I2 = self.LINK_MOI
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - pi / 2)
            + phi2
        )
        # the "book" version (gymnasium's default), not the NIPS paper's
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], -1)

    def observe(self, state: Tensor) -> Tensor:
        s = state
        return torch.stack(
            [torch.cos(s[:, 0]), torch.sin(s[:, 0]), torch.cos(s[:, 1]), torch.sin(s[:, 1]), s[:, 2], s[:, 3]], -1
        )
