"""Action noise for the deterministic actors (TD3, DDPG), one process per sub-env, with its state in
the module's buffers (so in checkpoints) and reset where an episode ends.

- ``normal``: i.i.d. Gaussian noise each step (TD3's and SB3's default; drawn in ``TD3._noisy``).
- ``ornstein_uhlenbeck``: temporally correlated noise, ``x += theta (0 - x) dt + sigma sqrt(dt) N(0,
  1)`` with SB3's ``theta=0.15, dt=1e-2`` (Uhlenbeck & Ornstein 1930; DDPG's original exploration,
  Lillicrap et al. 2016), reset to 0 at episode ends. It drifts for many steps in one direction: what
  a task like MountainCarContinuous needs to find its goal. From its reset at 0 it spreads like a
  random walk, ``sigma sqrt(t dt)`` after ``t`` steps (0.5 sigma after 25 steps, sigma after 100),
  towards its stationary std ``sigma / sqrt(2 theta)`` (1.8 sigma) over a few hundred steps.
- ``pink``: colored noise with a 1/f power spectrum over each episode (Eberhard et al. 2023, "Pink
  Noise Is All You Need: Colored Noise Exploration in Deep Reinforcement Learning", ICLR), unit
  variance times ``sigma``: a sequence of ``seq_len`` steps is drawn per sub-env at each episode start.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

NoiseType = Literal["normal", "ornstein_uhlenbeck", "pink"]


class OrnsteinUhlenbeckNoise(nn.Module):
    """``[num_envs, action_dim]`` Ornstein-Uhlenbeck processes (see the module docstring)."""

    def __init__(self, num_envs: int, action_dim: int, sigma: float, theta: float = 0.15, dt: float = 1e-2) -> None:
        super().__init__()
        self.sigma, self.theta, self.dt = sigma, theta, dt
        self.register_buffer("state", torch.zeros(num_envs, action_dim))

    def forward(self) -> Tensor:
        """The next noise sample of every sub-env."""
        self.state += -self.theta * self.state * self.dt + self.sigma * math.sqrt(self.dt) * torch.randn_like(
            self.state
        )
        return self.state.clone()

    def reset(self, ended: np.ndarray | Tensor) -> None:
        """Restart the processes of the sub-envs whose episode ended (a mask, numpy or a tensor on the
        env's device: no sync with it)."""
        self.state.masked_fill_(torch.as_tensor(ended, device=self.state.device).unsqueeze(-1), 0.0)


def pink_sequences(shape: tuple[int, ...], seq_len: int, generator: torch.Generator | None = None) -> Tensor:
    """Gaussian sequences with a 1/f power spectrum along the last axis (``[*shape, seq_len]``), scaled
    to unit variance: random Fourier coefficients with amplitude ``f^(-1/2)`` (the lowest frequency's
    amplitude is kept for the constant term), then an inverse real FFT."""
    freqs = torch.fft.rfftfreq(seq_len)
    freqs[0] = freqs[1]
    amplitude = freqs.pow(-0.5)
    real = torch.randn(*shape, len(freqs), generator=generator) * amplitude
    imag = torch.randn(*shape, len(freqs), generator=generator) * amplitude
    imag[..., 0] = 0.0  # the constant term and (for even lengths) the Nyquist term are real
    if seq_len % 2 == 0:
        imag[..., -1] = 0.0
    x = torch.fft.irfft(torch.complex(real, imag), n=seq_len)
    # The variance of irfft of these coefficients, in closed form (Parseval): normalize to one.
    weights = torch.full_like(amplitude, 4.0)  # a conjugate pair: 2 Re(c e^{iwt}), variance 4 |amp|^2
    weights[0] = 1.0
    if seq_len % 2 == 0:
        weights[-1] = 1.0
    return x / (torch.sqrt((weights * amplitude.pow(2)).sum()) / seq_len)


class PinkNoise(nn.Module):
    """``[num_envs, action_dim]`` pink-noise sequences, one per sub-env and episode (see the module
    docstring); a sequence that runs out before its episode ends is followed by a fresh one."""

    def __init__(self, num_envs: int, action_dim: int, sigma: float, seq_len: int = 1000) -> None:
        super().__init__()
        self.sigma, self.seq_len = sigma, seq_len
        self.register_buffer("sequences", pink_sequences((num_envs, action_dim), seq_len))
        self.register_buffer("step", torch.zeros(num_envs, dtype=torch.long))

    def forward(self) -> Tensor:
        exhausted = self.step >= self.seq_len
        if exhausted.any():
            self._redraw(exhausted)
        rows = torch.arange(len(self.step), device=self.step.device)
        noise = self.sequences[rows, :, self.step] * self.sigma
        self.step += 1
        return noise

    def reset(self, ended: np.ndarray) -> None:
        mask = torch.as_tensor(ended, device=self.step.device)
        if mask.any():
            self._redraw(mask)

    def _redraw(self, mask: Tensor) -> None:
        n, action_dim = int(mask.sum()), self.sequences.shape[1]
        self.sequences[mask] = pink_sequences((n, action_dim), self.seq_len).to(self.sequences.device)
        self.step[mask] = 0


def action_noise(noise_type: NoiseType, num_envs: int, action_dim: int, sigma: float) -> nn.Module | None:
    """The stateful noise process for ``noise_type``, or ``None`` for i.i.d. Gaussian noise."""
    if noise_type == "ornstein_uhlenbeck":
        return OrnsteinUhlenbeckNoise(num_envs, action_dim, sigma)
    if noise_type == "pink":
        return PinkNoise(num_envs, action_dim, sigma)
    return None
