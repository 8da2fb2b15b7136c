"""Networks for continuous control with off-policy actor-critics (SAC, TD3, DDPG).

Actions are normalized: actors output, and critics take, actions in ``[-1, 1]^d``; the algorithm
rescales them to the env's bounds (``to_env_units``), as Stable-Baselines3 does. Initialization is
PyTorch's default, as in SB3's and CleanRL's SAC/TD3 (not the orthogonal one of the PPO networks).
Under mixed precision the output layers (actor heads, the critics' last layer) run in float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.networks.mlp import ACTIVATIONS, Float32Linear

# Bounds of the actor's log standard deviation (SB3's; CleanRL squashes to [-5, 2] instead).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def to_env_units(actions: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """Map normalized actions in ``[-1, 1]`` affinely onto ``[low, high]``."""
    return low + (actions + 1.0) * 0.5 * (high - low)


def tanh_gaussian_sample(mean: Tensor, log_std: Tensor, eps: Tensor) -> tuple[Tensor, Tensor]:
    """Reparameterized sample ``a = tanh(u)``, ``u = mean + std * eps``, and its log-density.

    Change of variables (Haarnoja et al. 2018, "Soft Actor-Critic", appendix C):

        log pi(a|s) = sum_i [ log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) ]

    with ``log N(u; mean, std) = -eps^2 / 2 - log std - log(2 pi) / 2`` and the numerically stable
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (no ``+ 1e-6`` fudge: exact even where
    ``tanh(u)`` rounds to +-1). ``eps`` is the standard normal draw; ``[..., d] -> ([..., d], [...])``.
    """
    u = mean + log_std.exp() * eps
    log_normal = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return torch.tanh(u), (log_normal - log_det).sum(-1)


def _torso(in_dim: int, hidden_sizes: tuple[int, ...], activation: str) -> tuple[nn.Sequential, int]:
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [nn.Linear(in_dim, size), ACTIVATIONS[activation]()]
        in_dim = size
    return nn.Sequential(*layers), in_dim


class TanhGaussianActor(nn.Module):
    """SAC's policy: an MLP giving the mean and (clamped) log-std of a Gaussian, squashed by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.trunk, dim = _torso(obs_dim, tuple(hidden_sizes), activation)
        self.mean = Float32Linear(dim, act_dim)
        self.log_std = Float32Linear(dim, act_dim)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        h = self.trunk(obs.flatten(1).float())
        return self.mean(h).float(), self.log_std(h).float().clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(actions, log_probs)``: a reparameterized sample (gradients flow through both)."""
        mean, log_std = self(obs)
        return tanh_gaussian_sample(mean, log_std, torch.randn_like(mean))

    def mode(self, obs: Tensor) -> Tensor:
        return torch.tanh(self(obs)[0])


class DeterministicActor(nn.Module):
    """TD3's and DDPG's policy: an MLP with a tanh output, ``mu(s) in [-1, 1]^d``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.trunk, dim = _torso(obs_dim, tuple(hidden_sizes), activation)
        self.out = Float32Linear(dim, act_dim)

    def forward(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.out(self.trunk(obs.flatten(1).float())).float())


class QEnsemble(nn.Module):
    """``n`` independent critics ``Q_i(s, a)``: MLPs on ``[s, a]`` with float32 output layers. Returns
    ``[n, B]``, or ``[first, B]`` for the first critics only (TD3's actor loss uses ``Q_1``).

    Separate MLPs, not one batched network (stacked ``[n, in, out]`` weights, one ``baddbmm`` per
    layer): ``benchmarks/fused_critics.py`` found the batched form no faster at the default sizes,
    where the update is compute-bound (within +-5 % either way at 256x256 and 400x300, depending on
    load), and clearly faster only for small networks (16 % at 64x64).
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], n: int = 2, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.n = n
        self.qs = nn.ModuleList()
        for _ in range(n):
            trunk, dim = _torso(obs_dim + act_dim, tuple(hidden_sizes), activation)
            self.qs.append(nn.Sequential(*trunk, Float32Linear(dim, 1)))

    def forward(self, obs: Tensor, actions: Tensor, first: int | None = None) -> Tensor:
        x = torch.cat([obs.flatten(1).float(), actions.float()], dim=-1)
        return torch.stack([q(x).squeeze(-1) for q in self.qs[:first]])
