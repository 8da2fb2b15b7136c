"""Actions between the networks and the envs: how each action space is stored, and what the env is
given. The one place that knows ``Discrete.start`` and ``MultiBinary``'s integer bits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

DISCRETE_ACTIONS = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def action_shape(space: gym.Space) -> tuple[int, ...]:
    """Shape of one stored action: ``()`` for ``Discrete``, ``[k]`` for ``MultiDiscrete`` and
    ``MultiBinary`` (flattened), the space's shape for ``Box``."""
    if isinstance(space, gym.spaces.Discrete):
        return ()
    if isinstance(space, gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return (int(np.prod(space.shape)),)
    return tuple(space.shape)


def action_dtype(space: gym.Space) -> torch.dtype:
    """Indices are ``long``; ``MultiBinary`` bits and ``Box`` actions ``float32``."""
    return torch.long if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete) else torch.float32


def to_env_actions(space: gym.Space, actions: np.ndarray) -> np.ndarray:
    """Stored discrete actions as the env takes them: indices shifted by the space's ``start``, bits as
    integers in the space's shape (batched over sub-envs)."""
    if isinstance(space, gym.spaces.Discrete):
        return actions + int(space.start)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return actions.reshape(-1, *space.shape) + space.start
    if isinstance(space, gym.spaces.MultiBinary):
        return actions.reshape(-1, *space.shape).astype(space.dtype)
    return actions


def to_env_actions_tensor(space: gym.Space, actions: torch.Tensor) -> torch.Tensor:
    """``to_env_actions`` for a tensor (evaluation and exported policies): indices shifted by ``start``."""
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        return actions + int(space.start)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return actions.reshape(-1, *space.shape) + torch.as_tensor(space.start, device=actions.device)
    if isinstance(space, gym.spaces.MultiBinary):
        return actions.reshape(-1, *space.shape).long()
    return actions
