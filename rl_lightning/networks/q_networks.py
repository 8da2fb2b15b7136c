"""Q-networks for discrete actions: an MLP for flat observations, the image encoders
(``encoders.py``) for observations with images, and an optional dueling head.

Initialization is PyTorch's default (as in SB3's and CleanRL's DQN), not the orthogonal one of the
policy-gradient networks.
"""

from __future__ import annotations

import gymnasium as gym
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.encoders import flat_dim, image_encoder
from rl_lightning.networks.mlp import mlp


class MLPTorso(nn.Module):
    """Flattened observations through hidden layers (the last activation included)."""

    def __init__(self, observation_space: gym.Space, hidden_sizes: tuple[int, ...], activation: str) -> None:
        super().__init__()
        dim = flat_dim(observation_space)
        self.net = nn.Sequential(nn.Flatten(), *mlp(dim, hidden_sizes, activation=activation, orthogonal=False))
        self.features_dim = hidden_sizes[-1] if hidden_sizes else dim

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs.float())


class QNetwork(nn.Module):
    """``Q(s, .)`` for every discrete action: a torso (``NatureCNN`` for uint8 images ``[C, H, W]``,
    an MLP otherwise) and a linear head, or a dueling head (Wang et al. 2016, "Dueling Network
    Architectures for Deep Reinforcement Learning"):

        Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')

    Deviation: the dueling streams share the torso's last layer (Wang et al. give each stream its
    own 512-unit layer on top of the convolutions).

    Args:
        observation_space: A ``Box``.
        action_space: ``Discrete``.
        hidden_sizes: MLP hidden widths (ignored for images).
        activation: MLP hidden activation (ignored for images).
        dueling: Use the dueling head.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "relu",
        dueling: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"QNetwork needs a Discrete action space, got {action_space}.")
        n = int(action_space.n)
        self.torso: nn.Module = image_encoder(observation_space, orthogonal_init=False) or MLPTorso(
            observation_space, tuple(hidden_sizes), activation
        )
        dim = self.torso.features_dim
        self.dueling = dueling
        self.head = nn.Linear(dim, n)  # the advantage stream when dueling
        self.value = nn.Linear(dim, 1) if dueling else None

    def forward(self, obs: Tensor) -> Tensor:
        features = self.torso(obs)
        q = self.head(features)
        if self.value is not None:
            q = self.value(features) + q - q.mean(-1, keepdim=True)
        return q
