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
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.cnn import NatureCNN, is_image_space
from rl_lightning.networks.mlp import Float32Linear, layer_init, mlp


class CategoricalHead(nn.Module):
    """Logits over ``n`` discrete actions."""

    def __init__(self, in_dim: int, n: int) -> None:
        super().__init__()
        self.linear = layer_init(Float32Linear(in_dim, n), std=0.01)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features)

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


class DiagGaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent, learned log standard deviation (PPO's default
    for continuous control: Schulman et al. 2017). Returns ``(mean, log_std)``."""

    def __init__(self, in_dim: int, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.linear = layer_init(Float32Linear(in_dim, action_dim), std=0.01)
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
        _, log_std = params
        return (log_std.float() + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    @classmethod
    def log_prob_entropy(cls, params: tuple[Tensor, Tensor], actions: Tensor) -> tuple[Tensor, Tensor]:
        return cls.log_prob(params, actions), cls.entropy(params)


def flat_obs_dim(space: gym.Space) -> int:
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(f"Observation space {space} is not supported: expected a gymnasium Box.")
    return int(np.prod(space.shape))


class ActorCritic(nn.Module):
    """A policy head (categorical or diagonal Gaussian) and a value head on top of:

    - vector observations: separate actor and critic MLPs (no shared trunk: the SB3/CleanRL default);
    - uint8 image stacks ``[C, H, W]`` (Atari): one shared ``NatureCNN`` encoder, orthogonally
      initialized, with a linear policy head and a linear value head on its 512 features (Mnih et
      al. 2016; the PPO-Atari network of baselines, SB3 and CleanRL). ``hidden_sizes`` and
      ``activation`` are then unused.

    Observations reach the networks through ``_encode`` only, the one step where the two differ.

    Args:
        observation_space: A ``Box``: flat vectors, or uint8 images ``[C, H, W]``.
        action_space: ``Discrete`` or ``Box``.
        hidden_sizes: Hidden layer widths of both the actor and the critic MLP.
        activation: Hidden activation, one of ``tanh``, ``relu``, ``elu``, ``silu``.
        critic: Build the value network; without one (REINFORCE without a baseline) ``value`` is 0.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: list[int] | tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        critic: bool = True,
    ) -> None:
        super().__init__()
        if is_image_space(observation_space):
            self.encoder: NatureCNN | None = NatureCNN(observation_space, orthogonal_init=True)
            feat_dim = self.encoder.features_dim
            self.actor_body: nn.Module = nn.Identity()
            self.critic = mlp(feat_dim, (), 1, out_std=1.0) if critic else None
        else:
            self.encoder = None
            obs_dim = flat_obs_dim(observation_space)
            self.actor_body = mlp(obs_dim, hidden_sizes, activation=activation)
            self.critic = mlp(obs_dim, hidden_sizes, 1, activation=activation, out_std=1.0) if critic else None
            feat_dim = hidden_sizes[-1] if hidden_sizes else obs_dim
        if isinstance(action_space, gym.spaces.Discrete):
            self.head: CategoricalHead | DiagGaussianHead = CategoricalHead(feat_dim, int(action_space.n))
        elif isinstance(action_space, gym.spaces.Box):
            self.head = DiagGaussianHead(feat_dim, int(np.prod(action_space.shape)))
        else:
            raise ConfigError(f"Action space {action_space} is not supported by ActorCritic.")

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
