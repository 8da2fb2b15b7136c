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
    """``n`` independent critics ``Q_i(s, a)`` (MLPs on ``[s, a]``) evaluated as one batched network:
    each layer is one ``baddbmm`` over stacked ``[n, in, out]`` weights instead of ``n`` separate
    matmuls, and the optimizer sees ``2 * layers`` tensors instead of ``2 * n * layers``. Measured
    faster than ``n`` separate MLPs for SAC's twin critics (benchmarks/fused_critics.py). Each
    critic is initialized exactly as an ``nn.Linear`` stack would be. Returns ``[n, B]``.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], n: int = 2, activation: str = "relu"
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.n, self.activation = n, ACTIVATIONS[activation]()
        dims = [obs_dim + act_dim, *hidden_sizes, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
            bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            self.weights.append(nn.Parameter(torch.empty(n, d_in, d_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(n, 1, d_out).uniform_(-bound, bound)))

    def forward(self, obs: Tensor, actions: Tensor, first: int | None = None) -> Tensor:
        """``[n, B]`` values, or ``[first, B]`` of the first critics only (TD3's actor loss uses Q_1)."""
        k = self.n if first is None else first
        x = torch.cat([obs.flatten(1).float(), actions.float()], dim=-1)
        h = x.unsqueeze(0).expand(k, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if i == last and torch.is_autocast_enabled(h.device.type):  # Q-values in float32 (Float32Linear)
                with torch.autocast(h.device.type, enabled=False):
                    return torch.baddbmm(b[:k], h.float(), w[:k]).squeeze(-1)
            h = torch.baddbmm(b[:k], h, w[:k])
            if i < last:
                h = self.activation(h)
        return h.squeeze(-1)
