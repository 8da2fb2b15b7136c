"""Image observations: which spaces are images, their layout, and the encoders shared by the Q-networks
and the actor-critics: the Nature CNN, and the MinAtar CNN for images too small for it."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import layer_init, norm_layer

MIN_SIZE = 36  # the Nature CNN's receptive field: 8x8 stride 4, 4x4 stride 2, 3x3 stride 1
MINATAR_MIN_SIZE = 3  # the MinAtar CNN's: one 3x3 convolution


def is_image_space(space: gym.Space) -> bool:
    """uint8 frames: ``[C, H, W]`` (Atari's stacks), ``[H, W, C]`` (rendered RGB, e.g. CarRacing) or
    ``[k, H, W, C]`` (``FrameStackObservation`` over RGB frames); or boolean ones (MinAtar's
    ``[10, 10, C]`` object channels)."""
    return isinstance(space, gym.spaces.Box) and space.dtype in (np.uint8, np.bool_) and len(space.shape) in (3, 4)


def image_layout(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of an image shape. A 3-D shape is channels-last
    when its last axis is its smallest (``(96, 96, 3)``), else channels-first (``(4, 84, 84)``); a 4-D
    shape is a stack of channels-last frames, whose stack and colour axes become the channels. A tie
    is channels-last (MinAtar Seaquest's ``(10, 10, 10)``)."""
    if len(shape) == 4:
        k, h, w, c = shape
        return k * c, h, w, True
    if shape[-1] <= shape[0]:
        h, w, c = shape
        return c, h, w, True
    c, h, w = shape
    return c, h, w, False


def pixel_range(space: gym.spaces.Box) -> float:
    """What the CNNs divide frames by: 255 for uint8 pixels, 1 for booleans (kept as 0/1). By the
    space, not the tensor: the rollout collectors hand boolean frames over as floats."""
    return 255.0 if space.dtype == np.uint8 else 1.0


def image_input(obs: Tensor, pixel_range: float, channels_last: bool) -> Tensor:
    """Frames as the CNNs read them: float ``[B, C, H, W]`` in [0, 1] (divided by ``pixel_range``)."""
    x = obs.float() / pixel_range
    if channels_last:  # [B, H, W, C] or [B, k, H, W, C] -> [B, C, H, W]
        x = x.movedim(-1, -3) if x.dim() == 4 else x.permute(0, 1, 4, 2, 3).flatten(1, 2)
    return x


class ConvTorso(nn.Module):
    """Convolutions (``convs``: ``(out_channels, kernel, stride)``, no padding), then a linear layer of
    ``features_dim`` units, ReLU after each. Takes frames in the space's layout (``image_layout``) and
    scales uint8 ones to [0, 1] inside (``image_input``). Subclasses name the architecture.

    Args:
        observation_space: An image space (``is_image_space``) at least ``min_size`` pixels high and wide.
        features_dim: Width of the output layer; ``None``: the architecture's.
        orthogonal_init: Orthogonal weights with gain sqrt(2) and zero biases (the PPO convention of
            baselines, SB3 and CleanRL); otherwise PyTorch's default (their DQN convention).
        layer_norm: ``LayerNorm`` over each layer's output before its ReLU (PQN; CleanRL's
            ``pqn_atari_envpool``).
    """

    name: str
    convs: tuple[tuple[int, int, int], ...]
    min_size: int  # the receptive field of the convolutions
    default_features_dim: int
    too_small_hint: str  # the way forward for smaller images

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        features_dim: int | None = None,
        orthogonal_init: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        channels, height, width, self.channels_last = image_layout(tuple(observation_space.shape))
        if min(height, width) < self.min_size:
            raise ConfigError(
                f"Image observations of {height}x{width} are smaller than the {self.name}'s {self.min_size}x"
                f"{self.min_size} receptive field (shape {observation_space.shape}). {self.too_small_hint}"
            )
        features_dim = features_dim or self.default_features_dim
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in self.convs:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            layers += [nn.Conv2d(channels, out_channels, kernel, stride=stride)]
            layers += [*norm_layer(layer_norm, (out_channels, height, width)), nn.ReLU()]
            channels = out_channels
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(
            nn.Linear(channels * height * width, features_dim), *norm_layer(layer_norm, features_dim), nn.ReLU()
        )
        self.features_dim = features_dim
        self.pixel_range = pixel_range(observation_space)
        if orthogonal_init:
            for layer in self.modules():
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    layer_init(layer, std=math.sqrt(2))

    def forward(self, obs: Tensor) -> Tensor:
        return self.linear(self.cnn(image_input(obs, self.pixel_range, self.channels_last)))


class NatureCNN(ConvTorso):
    """The convolutional torso of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning"): 32 8x8/4, 64 4x4/2, 64 3x3/1, then a 512-unit linear layer, ReLU throughout; for images
    at least 36x36 (``ConvTorso`` has the arguments)."""

    name = "Nature CNN"
    convs = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    min_size = MIN_SIZE
    default_features_dim = 512
    too_small_hint = (
        "Resize them (gymnasium's ResizeObservation in env.wrappers), or flatten them for an MLP (FlattenObservation)."
    )


class MinAtarCNN(ConvTorso):
    """The network of Young & Tian 2019 ("MinAtar: An Atari-Inspired Testbed for Thorough and
    Reproducible Reinforcement Learning Experiments"): one 3x3 stride-1 convolution of 16 channels, ReLU,
    then a 128-unit linear layer, ReLU. For images smaller than the Nature CNN sees (MinAtar's 10x10
    boolean frames); ``ConvTorso`` has the arguments."""

    name = "MinAtar CNN"
    convs = ((16, 3, 1),)
    min_size = MINATAR_MIN_SIZE
    default_features_dim = 128
    too_small_hint = "Flatten them for an MLP (FlattenObservation)."
