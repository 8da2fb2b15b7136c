"""Running mean and variance of observations or returns, kept as module buffers.

Why not gymnasium's ``NormalizeObservation`` / ``NormalizeReward`` wrappers: their statistics are
numpy state inside the training env, so they would need their own save/restore path, a copy pushed
into every evaluation env, and the policy alone (``model(obs)`` after ``load_from_checkpoint``) could
not act on raw observations; and the vector ``NormalizeObservation`` leaves ``info["final_obs"]``
unnormalized, which the truncation bootstrap reads. As buffers of the LightningModule the statistics
are in every checkpoint (plain tensors: ``torch.load(weights_only=True)`` reads them), move with the
module between devices, and are updated only by the rollout collector: evaluation and deployment use
them frozen.

Observations are normalized to ``clip((x - mean) / sqrt(var + eps), -10, 10)``; rewards are divided
by the standard deviation of the discounted return (not normalized to zero mean, which would change
the task) and clipped to [-10, 10]: SB3's ``VecNormalize`` and CleanRL's wrapper stack.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.errors import ConfigError

EPS = 1e-8
CLIP = 10.0


class RunningMeanStd(nn.Module):
    """Mean and variance of a stream of batches (Chan et al. 1979, parallel variance), as buffers.

    Args:
        shape: Shape of one sample (``()`` for scalars such as returns).
        epsilon: Initial count (mean 0, var 1 before any data), as in SB3 and gymnasium.
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(epsilon))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold in a batch ``x`` of shape ``[B, *shape]``."""
        x = x.to(self.mean.dtype)
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: Tensor) -> Tensor:
        """``clip((x - mean) / std, -10, 10)``, in float32."""
        return ((x.float() - self.mean) / (self.var + EPS).sqrt()).clamp(-CLIP, CLIP)

    def scale(self, x: Tensor) -> Tensor:
        """``clip(x / std, -10, 10)``: for rewards, scaled by the std of the return, mean kept."""
        return (x.float() / (self.var + EPS).sqrt()).clamp(-CLIP, CLIP)


def normalizers(
    observation_space: gym.Space, normalize_obs: bool, normalize_reward: bool
) -> tuple[RunningMeanStd | None, RunningMeanStd | None]:
    """The observation and return statistics an on-policy module keeps as buffers (``None`` where off)."""
    image = isinstance(observation_space, gym.spaces.Box) and observation_space.dtype == np.uint8
    if normalize_obs and image and len(observation_space.shape) == 3:
        raise ConfigError(
            "normalize_obs is for vector observations; image observations are scaled to [0, 1] by the CNN."
        )
    obs_rms = RunningMeanStd(observation_space.shape) if normalize_obs else None
    return obs_rms, RunningMeanStd(()) if normalize_reward else None
