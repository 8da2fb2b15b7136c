"""Policy heads and the actor-critic used by the on-policy algorithms.

The heads do their own sampling and log-probabilities instead of building ``torch.distributions``
objects: on the tiny networks of classic control, constructing a distribution costs as much as the
network forward (docs/benchmarks.md, "Where the time goes"), and collection calls it once per vector
step.

Under mixed precision the heads' linear layers, log-probabilities and entropies are computed in
float32 (CPU autocast would even leave ``log_softmax`` in bfloat16): PPO's ratio
``exp(logp_new - logp_old)`` is sensitive to differences bfloat16's ~3 significant digits cannot hold.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.encoders import flat_dim, image_encoder
from rl_lightning.networks.mlp import Float32Linear, layer_init, mlp


def head_linear(in_dim: int, out_dim: int, orthogonal: bool = True) -> Float32Linear:
    """A head's output layer: orthogonal with gain 0.01 (near-uniform initial policies: the PPO
    convention of baselines, SB3 and CleanRL), or PyTorch's default (SB3's ``ortho_init=False``)."""
    layer = Float32Linear(in_dim, out_dim)
    return layer_init(layer, std=0.01) if orthogonal else layer


class LogitsHead(nn.Module):
    """A linear layer to ``n`` logits; the subclasses say how logits become actions."""

    def __init__(self, in_dim: int, n: int, orthogonal: bool = True) -> None:
        super().__init__()
        self.linear = head_linear(in_dim, n, orthogonal)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features)


class CategoricalHead(LogitsHead):
    """Logits over ``n`` discrete actions."""

    @staticmethod
    def sample(logits: Tensor) -> Tensor:
        # Gumbel-max: argmax(logits + Gumbel noise) is an exact sample from softmax(logits).
        gumbel = -torch.empty_like(logits).exponential_().log()
        return (logits + gumbel).argmax(-1)

    @staticmethod
    def mode(logits: Tensor) -> Tensor:
        return logits.argmax(-1)

    @staticmethod
    def log_prob(logits: Tensor, actions: Tensor) -> Tensor:
        return logits.float().log_softmax(-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def entropy(logits: Tensor) -> Tensor:
        logp = logits.float().log_softmax(-1)
        return -(logp.exp() * logp).sum(-1)

    @staticmethod
    def log_prob_entropy(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Both from one ``log_softmax`` (the loss needs both on every minibatch)."""
        logp = logits.float().log_softmax(-1)
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


class MultiCategoricalHead(nn.Module):
    """Independent categoricals over the sub-actions of a ``MultiDiscrete`` space (a factored policy:
    log-probabilities and entropies are sums over the sub-actions). Actions are ``[B, k]`` indices."""

    def __init__(self, in_dim: int, nvec: list[int], orthogonal: bool = True) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.linear = head_linear(in_dim, sum(self.nvec), orthogonal)

    def forward(self, features: Tensor) -> list[Tensor]:
        return list(self.linear(features).split(self.nvec, dim=-1))

    @staticmethod
    def sample(logits: list[Tensor]) -> Tensor:
        return torch.stack([CategoricalHead.sample(lg) for lg in logits], dim=-1)

    @staticmethod
    def mode(logits: list[Tensor]) -> Tensor:
        return torch.stack([lg.argmax(-1) for lg in logits], dim=-1)

    @staticmethod
    def log_prob(logits: list[Tensor], actions: Tensor) -> Tensor:
        return sum(CategoricalHead.log_prob(lg, a) for lg, a in zip(logits, actions.unbind(-1), strict=True))

    @staticmethod
    def log_prob_entropy(logits: list[Tensor], actions: Tensor) -> tuple[Tensor, Tensor]:
        pairs = [CategoricalHead.log_prob_entropy(lg, a) for lg, a in zip(logits, actions.unbind(-1), strict=True)]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


class BernoulliHead(LogitsHead):
    """Independent Bernoullis over the bits of a ``MultiBinary`` space (flattened). Actions are
    ``[B, n]`` floats, 0 or 1."""

    @staticmethod
    def sample(logits: Tensor) -> Tensor:
        return (torch.rand_like(logits) < torch.sigmoid(logits)).float()

    @staticmethod
    def mode(logits: Tensor) -> Tensor:
        return (logits > 0).float()

    @staticmethod
    def log_prob(logits: Tensor, actions: Tensor) -> Tensor:
        # log sigma(l) for a = 1, log(1 - sigma(l)) = log sigma(-l) for a = 0
        return -nn.functional.binary_cross_entropy_with_logits(logits.float(), actions.float(), reduction="none").sum(
            -1
        )

    @staticmethod
    def entropy(logits: Tensor) -> Tensor:
        p = torch.sigmoid(logits.float())
        return F.binary_cross_entropy_with_logits(logits.float(), p, reduction="none").sum(-1)

    @classmethod
    def log_prob_entropy(cls, logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        return cls.log_prob(logits, actions), cls.entropy(logits)


class DiagGaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent, learned log standard deviation (PPO's default
    for continuous control: Schulman et al. 2017). Returns ``(mean, log_std)``."""

    def __init__(self, in_dim: int, action_dim: int, log_std_init: float = 0.0, orthogonal: bool = True) -> None:
        super().__init__()
        self.linear = head_linear(in_dim, action_dim, orthogonal)
        self.log_std = nn.Parameter(torch.full((action_dim,), log_std_init))

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        mean = self.linear(features)
        return mean, self.log_std.expand_as(mean)

    @staticmethod
    def sample(params: tuple[Tensor, Tensor]) -> Tensor:
        mean, log_std = params
        return mean + log_std.exp() * torch.randn_like(mean)

    @staticmethod
    def mode(params: tuple[Tensor, Tensor]) -> Tensor:
        return params[0]

    @staticmethod
    def log_prob(params: tuple[Tensor, Tensor], actions: Tensor) -> Tensor:
        mean, log_std = params[0].float(), params[1].float()
        z = (actions - mean) * (-log_std).exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    @staticmethod
    def entropy(params: tuple[Tensor, Tensor]) -> Tensor:
        log_std = params[1]
        return (log_std.float() + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    @classmethod
    def log_prob_entropy(cls, params: tuple[Tensor, Tensor], actions: Tensor) -> tuple[Tensor, Tensor]:
        return cls.log_prob(params, actions), cls.entropy(params)


class GSDEHead(DiagGaussianHead):
    """Diagonal Gaussian with generalized state-dependent exploration (gSDE; Raffin et al. 2022,
    "Smooth Exploration for Robotic Reinforcement Learning", CoRL), SB3's ``use_sde`` for PPO.

    The exploration noise is a linear function of the policy's features, ``noise = h(s) W``, with one
    matrix ``W ~ N(0, exp(log_std)^2)`` per sub-env drawn at the start of each rollout (and every
    ``sample_freq`` samples): nearby states get consistent pushes instead of independent jitter. The
    Gaussian the loss sees has the per-state std ``sqrt(h^2 @ exp(log_std)^2)`` (``log_std`` a
    ``[features, actions]`` parameter). Returns ``(mean, log_std(s), features)``.

    ``learn_features``: whether the std and the noise pass gradients into the features ``h`` (SB3's
    name). SB3's PPO detaches them (False, the default); its SAC, and sb3-contrib's TQC and CrossQ,
    learn them (True, ``GSDEActor``): the entropy term then also shapes the features the noise scales.
    """

    def __init__(
        self,
        in_dim: int,
        action_dim: int,
        log_std_init: float = 0.0,
        orthogonal: bool = True,
        sample_freq: int = -1,
        learn_features: bool = False,
    ) -> None:
        super().__init__(in_dim, action_dim, log_std_init, orthogonal)
        self.log_std = nn.Parameter(torch.full((in_dim, action_dim), log_std_init))
        self.sample_freq = sample_freq
        self.learn_features = learn_features
        self.register_buffer("eps", torch.zeros(1, in_dim, action_dim), persistent=False)
        self.reset_noise()

    def reset_noise(self, n: int = 1) -> None:
        """Draw ``n`` exploration matrices (one per sub-env), in standard-normal units."""
        self.eps = torch.randn(n, *self.log_std.shape, device=self.log_std.device)
        self.samples = 0

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mean = self.linear(features)
        h = (features if self.learn_features else features.detach()).float()
        variance = h.pow(2) @ self.log_std.exp().pow(2)
        return mean, 0.5 * torch.log(variance + 1e-6), h

    def noise(self, h: Tensor) -> Tensor:
        """``h W``: one matrix for every row, or one per row. Differentiable in ``log_std``."""
        w = self.log_std.exp() * self.eps
        return h @ w[0] if len(w) == 1 else torch.bmm(h.unsqueeze(1), w).squeeze(1)

    def sample(self, params: tuple[Tensor, Tensor, Tensor]) -> Tensor:  # type: ignore[override]
        mean, _, h = params
        if len(self.eps) not in (1, len(h)) or (self.sample_freq > 0 and self.samples >= self.sample_freq):
            self.reset_noise(len(h))
        self.samples += 1
        return mean + self.noise(h)


def action_head(
    in_dim: int,
    action_space: gym.Space,
    orthogonal: bool = True,
    log_std_init: float = 0.0,
    sde_sample_freq: int | None = None,
) -> nn.Module:
    """The policy head for an action space: categorical (``Discrete``), factored categorical
    (``MultiDiscrete``), Bernoulli (``MultiBinary``) or diagonal Gaussian (``Box``; with gSDE where
    ``sde_sample_freq`` is given)."""
    if sde_sample_freq is not None and not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(
            f"use_sde (state-dependent exploration) is for continuous (Box) actions; this env's are {action_space}. "
            "Set use_sde: false."
        )
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHead(in_dim, int(action_space.n), orthogonal)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return MultiCategoricalHead(in_dim, list(np.asarray(action_space.nvec).ravel()), orthogonal)
    if isinstance(action_space, gym.spaces.MultiBinary):
        return BernoulliHead(in_dim, int(np.prod(action_space.shape)), orthogonal)
    if isinstance(action_space, gym.spaces.Box) and sde_sample_freq is not None:
        return GSDEHead(in_dim, int(np.prod(action_space.shape)), log_std_init, orthogonal, sde_sample_freq)
    if isinstance(action_space, gym.spaces.Box):
        return DiagGaussianHead(in_dim, int(np.prod(action_space.shape)), log_std_init, orthogonal)
    raise ConfigError(f"Action space {action_space} is not supported by ActorCritic.")


class ActorCritic(nn.Module):
    """A policy head (``action_head``) and a value head on top of:

    - flat observations (vectors, and one-hot / concatenated structured spaces: ``networks.encoders``):
      separate actor and critic MLPs (no shared trunk: the SB3/CleanRL default);
    - observations with images: one shared, orthogonally initialized image encoder (the Nature CNN, or
      ``MultiInputEncoder`` for ``Dict``/``Tuple`` spaces with image parts) with a linear policy head
      and a linear value head on its features (Mnih et al. 2016; the PPO-Atari network of baselines,
      SB3 and CleanRL). ``hidden_sizes`` and ``activation`` are then unused.

    Observations reach the networks through ``_encode`` only, the one step where the two differ.

    Args:
        observation_space: The env's observation space (structured spaces arrive flattened).
        action_space: ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box``.
        hidden_sizes: Hidden layer widths of both the actor and the critic MLP.
        activation: Hidden activation, one of ``tanh``, ``relu``, ``elu``, ``silu``.
        critic: Build the value network; without one (REINFORCE without a baseline) ``value`` is 0.
        orthogonal_init: Orthogonal initialization (hidden layers gain sqrt(2), policy head 0.01, value
            head 1); ``False`` keeps PyTorch's default (SB3's ``ortho_init=False``).
        log_std_init: Initial log standard deviation of a Gaussian policy.
        sde_sample_freq: ``None``: independent Gaussian noise; otherwise gSDE (``GSDEHead``) with new
            exploration matrices every ``sde_sample_freq`` samples (-1: only by ``head.reset_noise``).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: list[int] | tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        critic: bool = True,
        orthogonal_init: bool = True,
        log_std_init: float = 0.0,
        sde_sample_freq: int | None = None,
    ) -> None:
        super().__init__()
        ortho = orthogonal_init
        self.encoder = image_encoder(observation_space, orthogonal_init=ortho)
        if self.encoder is not None:
            feat_dim = self.encoder.features_dim
            self.actor_body: nn.Module = nn.Identity()
            self.critic = mlp(feat_dim, (), 1, orthogonal=ortho, out_std=1.0) if critic else None
        else:
            obs_dim = flat_dim(observation_space)
            self.actor_body = mlp(obs_dim, hidden_sizes, activation=activation, orthogonal=ortho)
            self.critic = (
                mlp(obs_dim, hidden_sizes, 1, activation=activation, orthogonal=ortho, out_std=1.0) if critic else None
            )
            feat_dim = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.head = action_head(feat_dim, action_space, ortho, log_std_init, sde_sample_freq)

    def _encode(self, obs: Tensor) -> Tensor:
        return self.encoder(obs) if self.encoder is not None else obs.flatten(1).float()

    def _value(self, x: Tensor) -> Tensor:
        return self.critic(x).squeeze(-1) if self.critic is not None else x.new_zeros(x.shape[0])

    def value(self, obs: Tensor) -> Tensor:
        return self._value(self._encode(obs))

    def act(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Sample actions for collection: ``(actions, log_probs, values)``."""
        x = self._encode(obs)
        params = self.head(self.actor_body(x))
        actions = self.head.sample(params)
        return actions, self.head.log_prob(params, actions), self._value(x)

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For the loss: ``(log_probs, entropies, values)`` of given actions."""
        x = self._encode(obs)
        params = self.head(self.actor_body(x))
        return *self.head.log_prob_entropy(params, actions), self._value(x)

    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions for acting (evaluation, deployment): the mode, or a sample."""
        params = self.head(self.actor_body(self._encode(obs)))
        return self.head.mode(params) if deterministic else self.head.sample(params)

    def compile(self, *args, **kwargs) -> None:
        """``torch.compile`` every entry point in place: ``act`` (collection), ``evaluate`` (the loss),
        ``value`` and ``forward``. ``nn.Module.compile`` alone would cover ``forward`` only.
        Parameter names, and so checkpoints, do not change."""
        for name in ("act", "evaluate", "value", "forward"):
            setattr(self, name, torch.compile(getattr(self, name), *args, **kwargs))
