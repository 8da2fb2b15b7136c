"""The image encoder shared by the Q-networks and the actor-critic: the Nature CNN."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.networks.mlp import layer_init


def is_image_space(space: gym.Space) -> bool:
    """Stacked uint8 frames ``[C, H, W]`` (what the Atari preprocessing produces)."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning"): 32 8x8/4, 64 4x4/2, 64 3x3/1, then a 512-unit linear layer, ReLU throughout. Takes
    uint8 frames ``[B, C, H, W]`` and scales them to [0, 1] inside.

    Args:
        observation_space: A ``Box`` of shape ``[C, H, W]``.
        features_dim: Width of the output layer.
        orthogonal_init: Orthogonal weights with gain sqrt(2) and zero biases (the PPO convention of
            baselines, SB3 and CleanRL); otherwise PyTorch's default (their DQN convention).
    """

    def __init__(
        self, observation_space: gym.spaces.Box, features_dim: int = 512, orthogonal_init: bool = False
    ) -> None:
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
        if orthogonal_init:
            for layer in self.modules():
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    layer_init(layer, std=math.sqrt(2))

    def forward(self, obs: Tensor) -> Tensor:
        return self.linear(self.cnn(obs.float() / 255.0))
