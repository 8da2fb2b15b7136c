"""From an env's observation space to what reads it: the one place that maps spaces to encoders.

- ``Box`` vectors (any shape): flattened, then the algorithm's MLPs.
- ``Box`` uint8 or boolean images (``[C, H, W]``, ``[H, W, C]`` or stacked ``[k, H, W, C]``): the Nature
  CNN, or the MinAtar CNN (one 3x3 convolution) for images smaller than the Nature CNN's 36x36 receptive
  field (MinAtar's 10x10 frames).
- ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Dict``, ``Tuple``: the envs flatten them with
  gymnasium's ``FlattenObservation`` (one-hot for discrete parts, parts concatenated in the space's
  order; ``rl_lightning.envs.make``), so storage is one flat tensor; the networks get the structured
  space and read the flat tensor through it. A ``Dict``/``Tuple`` with image parts gets
  ``MultiInputEncoder``: a CNN per image part, the other parts concatenated after their
  features (SB3's ``MultiInputPolicy``).
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_lightning.networks.cnn import MIN_SIZE, MinAtarCNN, NatureCNN, image_layout, is_image_space


def structured_parts(space: gym.Space) -> list[gym.Space]:
    """The parts of a ``Dict`` or ``Tuple`` space, in the order gymnasium flattens them; else ``[]``."""
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return list(space.spaces)
    return []


def has_images(space: gym.Space) -> bool:
    return is_image_space(space) or any(is_image_space(part) for part in structured_parts(space))


def flat_dim(space: gym.Space) -> int:
    """Width of the flat observation vector an MLP reads."""
    return gym.spaces.flatdim(space)


def image_cnn(space: gym.spaces.Box, orthogonal_init: bool, layer_norm: bool = False) -> NatureCNN | MinAtarCNN:
    """The CNN for an image space: the Nature CNN, or the MinAtar CNN for images smaller than it sees."""
    _, height, width, _ = image_layout(tuple(space.shape))
    cnn = MinAtarCNN if min(height, width) < MIN_SIZE else NatureCNN
    return cnn(space, orthogonal_init=orthogonal_init, layer_norm=layer_norm)


def image_encoder(space: gym.Space, orthogonal_init: bool, layer_norm: bool = False) -> nn.Module | None:
    """The encoder for observations with images (its ``features_dim`` is its output width), or
    ``None`` for flat observations. ``layer_norm``: ``LayerNorm`` before each of the CNNs' ReLUs."""
    if is_image_space(space):
        return image_cnn(space, orthogonal_init, layer_norm)
    if has_images(space):
        return MultiInputEncoder(space, orthogonal_init, layer_norm)
    return None


class MultiInputEncoder(nn.Module):
    """``Dict``/``Tuple`` observations with image parts, read from their gymnasium-flattened form: each
    image part is sliced out, reshaped and encoded by its own CNN (``image_cnn``); the other parts (already flat,
    one-hot for discrete ones) are concatenated after the CNN features.

    Args:
        observation_space: The structured space (before flattening).
        orthogonal_init: Orthogonal initialization of the CNNs (see ``NatureCNN``).
        layer_norm: ``LayerNorm`` in the CNNs (see ``NatureCNN``).
    """

    def __init__(self, observation_space: gym.Space, orthogonal_init: bool = False, layer_norm: bool = False) -> None:
        super().__init__()
        self.cnns = nn.ModuleList()
        self.parts: list[tuple[int, int, tuple[int, ...] | None]] = []  # (start, width, image shape or None)
        start = 0
        for part in structured_parts(observation_space):
            width = flat_dim(part)
            if is_image_space(part):
                self.cnns.append(image_cnn(part, orthogonal_init, layer_norm))
                self.parts.append((start, width, tuple(part.shape)))
            else:
                self.parts.append((start, width, None))
            start += width
        self.features_dim = sum(c.features_dim for c in self.cnns) + sum(w for _, w, s in self.parts if s is None)

    def forward(self, obs: Tensor) -> Tensor:
        images = iter(self.cnns)
        features = []
        for start, width, shape in self.parts:
            x = obs[:, start : start + width]
            features.append(next(images)(x.reshape(-1, *shape)) if shape is not None else x.float())
        return torch.cat(features, dim=1)
