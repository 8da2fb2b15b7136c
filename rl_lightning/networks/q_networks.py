"""Q-networks for discrete actions: an MLP for vector observations, the Nature CNN for stacked frames,
and an optional dueling head.

Initialization is PyTorch's default (as in SB3's and CleanRL's DQN), not the orthogonal one of the
policy-gradient networks.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import ACTIVATIONS


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning"): 32 8x8/4, 64 4x4/2, 64 3x3/1, then a 512-unit linear layer, ReLU throughout. Takes
    uint8 frames ``[B, C, H, W]`` and scales them to [0, 1] inside."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 512) -> None:
        super().__init__()
        channels = observation_space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.cnn(torch.zeros(1, *observation_space.shape)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())
        self.features_dim = features_dim

    def forward(self, obs: Tensor) -> Tensor:
        return self.linear(self.cnn(obs.float() / 255.0))


class MLPTorso(nn.Module):
    """Flattened observations through hidden layers (the last activation included)."""

    def __init__(self, observation_space: gym.spaces.Box, hidden_sizes: tuple[int, ...], activation: str) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        dim, layers = int(np.prod(observation_space.shape)), []
        for size in hidden_sizes:
            layers += [nn.Linear(dim, size), ACTIVATIONS[activation]()]
            dim = size
        self.net = nn.Sequential(nn.Flatten(), *layers)
        self.features_dim = dim

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs.float())


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


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
        if not isinstance(observation_space, gym.spaces.Box):
            raise ConfigError(f"Observation space {observation_space} is not supported: expected a gymnasium Box.")
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"QNetwork needs a Discrete action space, got {action_space}.")
        n = int(action_space.n)
        if is_image_space(observation_space):
            self.torso: nn.Module = NatureCNN(observation_space)
        else:
            self.torso = MLPTorso(observation_space, tuple(hidden_sizes), activation)
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
