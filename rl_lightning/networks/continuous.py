"""Networks for continuous control with off-policy actor-critics (SAC, TD3, DDPG).

Actions are normalized: actors output, and critics take, actions in ``[-1, 1]^d``; the algorithm
rescales them to the env's bounds (``to_env_units``), as Stable-Baselines3 does. Initialization is
PyTorch's default, as in SB3's and CleanRL's SAC/TD3 (not the orthogonal one of the PPO networks).
Under mixed precision the output layers (actor heads, the critics' last layer) run in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import ACTIVATIONS, Float32Linear, mlp
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


def actor_trunk(
    obs_dim: int, hidden_sizes: tuple[int, ...], activation: str, norm: Callable[[int], nn.Module] | None = None
) -> tuple[nn.Sequential, int]:
    """An actor's hidden layers (PyTorch's default initialization) and their output width. With
    ``norm(dim)``, a normalization before each linear layer and one before the heads (CrossQ's batch
    renormalization, as sb3-contrib places it)."""
    trunk = mlp(obs_dim, hidden_sizes, activation=activation, orthogonal=False)
    dim = hidden_sizes[-1] if hidden_sizes else obs_dim
    if norm is not None:
        layers: list[nn.Module] = []
        for layer in trunk:
            layers += [norm(layer.in_features), layer] if isinstance(layer, nn.Linear) else [layer]
        trunk = nn.Sequential(*layers, norm(dim))
    return trunk, dim


class TanhGaussianActor(nn.Module):
    """SAC's policy: an MLP giving the mean and (clamped) log-std of a Gaussian, squashed by tanh."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: tuple[int, ...],
        activation: str = "relu",
        norm: Callable[[int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.trunk, dim = actor_trunk(obs_dim, hidden_sizes, activation, norm)
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
    jittering each step: what sparse-reward tasks like MountainCarContinuous need. As in SB3's SAC the
    mean is clipped to [-2, 2] before the tanh, and the features are learned through the std and the
    noise too (``learn_features``), not only through the mean.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: tuple[int, ...],
        activation: str = "relu",
        log_std_init: float = -3.0,
        norm: Callable[[int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.trunk, dim = actor_trunk(obs_dim, hidden_sizes, activation, norm)
        self.head = GSDEHead(dim, act_dim, log_std_init, orthogonal=False, learn_features=True)

    def reset_noise(self, n: int = 1) -> None:
        """Draw ``n`` exploration matrices: one per sub-env for collection, one for a gradient step."""
        self.head.reset_noise(n)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(clipped mean, per-state log-std, features)``."""
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
        self.trunk, dim = actor_trunk(obs_dim, hidden_sizes, activation)
        self.out = Float32Linear(dim, act_dim)

    def forward(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.out(self.trunk(obs.flatten(1).float())).float())


class EnsembleLinear(nn.Module):
    """``n`` independent linear layers run as one: ``weight`` ``[n, in, out]``, ``bias`` ``[n, 1, out]``,
    ``y_i = x_i W_i + b_i`` in one ``baddbmm`` (one output unit: a dot product). Built from ``n``
    ``nn.Linear`` layers (their weights stacked, so each member keeps PyTorch's default initialization).
    The input is ``[n, B, in]``, or ``[B, in]`` shared by every member. With ``float32`` it computes in
    float32 under mixed precision (an output layer, like ``Float32Linear``)."""

    def __init__(self, layers: list[nn.Linear], float32: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.stack([layer.weight.detach().T for layer in layers]))
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]).unsqueeze(1))
        self.float32 = float32

    def forward(self, x: Tensor, first: int | None = None) -> Tensor:
        """``[n, B, out]`` (or ``[first, B, out]``: the first members only)."""
        weight, bias = self.weight, self.bias
        if first is not None:  # a slice even of [:None] costs its backward a zero-filled copy of the gradient
            weight, bias = weight[:first], bias[:first]
        if x.dim() == 2:
            x = x.expand(len(weight), *x.shape)  # a view: the members read the same rows
        if self.float32 and torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return self._product(bias, x.float(), weight)
        return self._product(bias, x, weight)

    @staticmethod
    def _product(bias: Tensor, x: Tensor, weight: Tensor) -> Tensor:
        if weight.shape[-1] == 1:
            # One output unit (a critic's Q-value): a dot product per row. As a batched matrix product of
            # width 1 it takes the BLAS's slow path: 3x the time forward and backward on an x86 CPU.
            return (x * weight.mT).sum(-1, keepdim=True) + bias
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        n, in_dim, out_dim = self.weight.shape[-3:]  # a population's: a member dimension before them
        return f"n={n}, in_features={in_dim}, out_features={out_dim}"


class QEnsemble(nn.Module):
    """``n`` independent critics ``Q_i(s, a)``, MLPs on ``[s, a]``, run as one batched network: each
    layer is an ``EnsembleLinear`` (one ``baddbmm`` for all critics instead of one small matmul per
    critic), the output layer in float32. Returns ``[n, B]`` (``out_dim`` 1) or ``[n, B, out_dim]``
    (TQC's quantiles); ``first`` runs only the first critics (TD3's actor loss uses ``Q_1``).

    The critics are initialized as ``n`` separate ``mlp``s would be (PyTorch's default, drawn in the
    same order), so a seed gives the same initial weights as separate critics; results then differ
    only by floating-point reassociation. ``norm(n, dim)``, if given, builds a layer applied before
    every linear layer (CrossQ's batch renormalization, per critic).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: tuple[int, ...],
        n: int = 2,
        activation: str = "relu",
        out_dim: int = 1,
        norm: Callable[[int, int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.n, self.out_dim = n, out_dim
        separate = [mlp(obs_dim + act_dim, hidden_sizes, out_dim, activation, orthogonal=False) for _ in range(n)]
        per_layer = zip(*[[m for m in q if isinstance(m, nn.Linear)] for q in separate], strict=True)
        self.layers = nn.ModuleList(
            EnsembleLinear(list(layers), float32=isinstance(layers[0], Float32Linear)) for layers in per_layer
        )
        self.activation = ACTIVATIONS[activation]()
        dims = (obs_dim + act_dim, *hidden_sizes)
        self.norms = nn.ModuleList(norm(n, dim) for dim in dims) if norm is not None else None

    def forward(self, obs: Tensor, actions: Tensor, first: int | None = None) -> Tensor:
        x = torch.cat([obs.flatten(1).float(), actions.float()], dim=-1)
        for i, layer in enumerate(self.layers):
            if i > 0:
                x = self.activation(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = layer(x, first)
        return x.squeeze(-1) if self.out_dim == 1 else x

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        if any(key.startswith(prefix + "qs.") for key in state_dict):
            raise ConfigError(
                f"This checkpoint holds its critics as separate networks ({prefix}qs.*), a layout older than "
                "this version's batched critics; it cannot be loaded: train anew, or load it with an older version."
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
