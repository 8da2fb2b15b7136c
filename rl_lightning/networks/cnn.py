"""Image observations: which spaces are images, their layout, and the encoder shared by the Q-networks
and the actor-critic (the Nature CNN)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import layer_init

MIN_SIZE = 36  # the Nature CNN's receptive field: 8x8 stride 4, 4x4 stride 2, 3x3 stride 1


def is_image_space(space: gym.Space) -> bool:
    """uint8 frames: ``[C, H, W]`` (Atari's stacks), ``[H, W, C]`` (rendered RGB, e.g. CarRacing) or
    ``[k, H, W, C]`` (``FrameStackObservation`` over RGB frames)."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)


def image_layout(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of an image shape. A 3-D shape is channels-last
    when its last axis is its smallest (``(96, 96, 3)``), else channels-first (``(4, 84, 84)``); a 4-D
    shape is a stack of channels-last frames, whose stack and colour axes become the channels."""
    if len(shape) == 4:
        k, h, w, c = shape
        return k * c, h, w, True
    if shape[-1] < shape[0]:
        h, w, c = shape
        return c, h, w, True
    c, h, w = shape
    return c, h, w, False


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning"): 32 8x8/4, 64 4x4/2, 64 3x3/1, then a 512-unit linear layer, ReLU throughout. Takes
    uint8 frames in the space's layout (``image_layout``) and scales them to [0, 1] inside.

    Args:
        observation_space: A uint8 ``Box`` image space (``is_image_space``), at least 36x36.
        features_dim: Width of the output layer.
        orthogonal_init: Orthogonal weights with gain sqrt(2) and zero biases (the PPO convention of
            baselines, SB3 and CleanRL); otherwise PyTorch's default (their DQN convention).
    """

    def __init__(
        self, observation_space: gym.spaces.Box, features_dim: int = 512, orthogonal_init: bool = False
    ) -> None:
        super().__init__()
        channels, height, width, self.channels_last = image_layout(tuple(observation_space.shape))
        if min(height, width) < MIN_SIZE:
            raise ConfigError(
                f"Image observations of {height}x{width} are smaller than the Nature CNN's {MIN_SIZE}x{MIN_SIZE} "
                f"receptive field (shape {observation_space.shape}). Resize them (gymnasium's ResizeObservation in "
                "env.wrappers), or flatten them for an MLP (FlattenObservation)."
            )
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
            n_flat = self.cnn(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())
        self.features_dim = features_dim
        if orthogonal_init:
            for layer in self.modules():
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    layer_init(layer, std=math.sqrt(2))

    def forward(self, obs: Tensor) -> Tensor:
        x = obs.float() / 255.0
        if self.channels_last:  # [B, H, W, C] or [B, k, H, W, C] -> [B, C, H, W]
            x = x.movedim(-1, -3) if x.dim() == 4 else x.permute(0, 1, 4, 2, 3).flatten(1, 2)
        return self.linear(self.cnn(x))
