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

from rl_lightning.networks.mlp import Float32Linear, mlp
from rl_lightning.networks.policies import GSDEHead

# Bounds of the actor's log standard deviation (SB3's; CleanRL squashes to [-5, 2] instead).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def q_loss(q: Tensor, target: Tensor) -> Tensor:
    """Critic loss summed over the ``n`` critics: ``sum_i mean_b (Q_i(s, a) - y)^2`` for ``[n, B]``
    Q-values and a ``[B]`` target (SB3's and CleanRL's TD3 loss; SB3's SAC halves it, which Adam's
    scale invariance makes immaterial)."""
    return (q - target).pow(2).mean(-1).sum()


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


class TanhGaussianActor(nn.Module):
    """SAC's policy: an MLP giving the mean and (clamped) log-std of a Gaussian, squashed by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden_sizes, activation=activation, orthogonal=False)
        dim = hidden_sizes[-1] if hidden_sizes else obs_dim
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


class GSDEActor(nn.Module):
    """SAC's policy with generalized state-dependent exploration (gSDE; Raffin et al. 2022, "Smooth
    Exploration for Robotic Reinforcement Learning", CoRL): the exploration noise is a linear function
    of the actor's last hidden features, ``noise = h(s) W`` (``GSDEHead``), with ``W`` drawn anew only
    now and then (``reset_noise``), so actions stay consistent across nearby states instead of
    jittering each step: what sparse-reward tasks like MountainCarContinuous need. As in SB3 the mean
    is clipped to [-2, 2] before the tanh.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: tuple[int, ...],
        activation: str = "relu",
        log_std_init: float = -3.0,
    ) -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden_sizes, activation=activation, orthogonal=False)
        self.head = GSDEHead(hidden_sizes[-1] if hidden_sizes else obs_dim, act_dim, log_std_init, orthogonal=False)

    def reset_noise(self, n: int = 1) -> None:
        """Draw ``n`` exploration matrices: one per sub-env for collection, one for a gradient step."""
        self.head.reset_noise(n)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(clipped mean, per-state log-std, detached features)``."""
        mean, log_std, h = self.head(self.trunk(obs.flatten(1).float()).float())
        return mean.float().clamp(-2.0, 2.0), log_std, h

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(actions, log_probs)`` with the current exploration matrices: the one matrix for every row,
        or one per row (``reset_noise(len(obs))``, collection)."""
        mean, log_std, h = self(obs)
        return tanh_gaussian_sample(mean, log_std, self.head.noise(h) * (-log_std).exp())

    def mode(self, obs: Tensor) -> Tensor:
        return torch.tanh(self(obs)[0])


class DeterministicActor(nn.Module):
    """TD3's and DDPG's policy: an MLP with a tanh output, ``mu(s) in [-1, 1]^d``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.trunk = mlp(obs_dim, hidden_sizes, activation=activation, orthogonal=False)
        dim = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.out = Float32Linear(dim, act_dim)

    def forward(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.out(self.trunk(obs.flatten(1).float())).float())


class QEnsemble(nn.Module):
    """``n`` independent critics ``Q_i(s, a)``: MLPs on ``[s, a]`` with float32 output layers. Returns
    ``[n, B]``, or ``[first, B]`` for the first critics only (TD3's actor loss uses ``Q_1``).

    Separate MLPs, not one batched network (stacked ``[n, in, out]`` weights, one ``baddbmm`` per
    layer): the batched form was measured no faster in whole fits at the default sizes, where the
    update is compute-bound (docs/benchmarks.md, "Twin critics").
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], n: int = 2, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.n = n
        self.qs = nn.ModuleList()
        for _ in range(n):
            self.qs.append(mlp(obs_dim + act_dim, hidden_sizes, 1, activation, orthogonal=False))

    def forward(self, obs: Tensor, actions: Tensor, first: int | None = None) -> Tensor:
        x = torch.cat([obs.flatten(1).float(), actions.float()], dim=-1)
        return torch.stack([q(x).squeeze(-1) for q in self.qs[:first]])
