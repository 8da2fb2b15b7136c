"""Batch renormalization (Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch Dependence in
Batch-Normalized Models", https://arxiv.org/abs/1702.03275), in the form CrossQ uses (sb3-contrib's
``BatchRenorm1d``, after SBX): batch normalization for the first ``warmup_steps`` training calls,
then the batch statistics corrected towards the running ones (``r`` clipped to ``[1/3, 3]``, ``d`` to
``[-5, 5]``). Evaluation mode normalizes with the running statistics and leaves them alone.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

R_MAX, D_MAX = 3.0, 5.0  # clipping of the renormalization's scale and shift (sb3-contrib's)


class BatchRenorm(nn.Module):
    """Batch renormalization over the batch dimension of ``[B, F]`` inputs, or per member of an
    ensemble (``n``): ``[n, B, F]`` (or ``[B, F]`` shared by the members), with statistics, scale and
    shift of shape ``[n, 1, F]``.

    Buffers ``running_mean``, ``running_var`` and ``steps`` (training calls so far) are in the
    state_dict, so checkpoints carry them. The batch variance is the unbiased one, as in sb3-contrib.

    Args:
        num_features: ``F``.
        n: Ensemble members, each with its own statistics; ``None`` for a plain ``[B, F]`` layer.
        momentum: Rate of the running averages: ``running <- running + momentum * (batch - running)``.
        eps: Added to the variances.
        warmup_steps: Training calls that normalize with the batch statistics only.
    """

    def __init__(
        self,
        num_features: int,
        n: int | None = None,
        momentum: float = 0.01,
        eps: float = 1e-3,
        warmup_steps: int = 100_000,
    ) -> None:
        super().__init__()
        shape = (num_features,) if n is None else (n, 1, num_features)
        self.momentum, self.eps, self.warmup_steps = momentum, eps, warmup_steps
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.tensor(0, dtype=torch.long))
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            keepdim = self.running_mean.dim() == 3  # [n, 1, F]
            # Sums, not Tensor.mean/var: on CPU torch's var over the batch dimension, and mean's backward,
            # are several times slower than the two-pass sums (a quarter of CrossQ's update time).
            rows = x.shape[-2]
            batch_mean = x.sum(-2, keepdim=True) / rows
            batch_var = (x - batch_mean).square().sum(-2, keepdim=keepdim) / (rows - 1)  # unbiased
            batch_mean = batch_mean if keepdim else batch_mean.squeeze(-2)
            running_std = (self.running_var + self.eps).sqrt()
            batch_std = (batch_var + self.eps).sqrt()
            r = (batch_std / running_std).detach().clamp(1 / R_MAX, R_MAX)
            d = ((batch_mean - self.running_mean) / running_std).detach().clamp(-D_MAX, D_MAX)
            # A tensor condition, not a Python branch: no host sync, and a CUDA graph can capture it.
            renorm = self.steps > self.warmup_steps
            mean = torch.where(renorm, batch_mean - d * batch_var.sqrt() / r, batch_mean)
            var = torch.where(renorm, batch_var / r.pow(2), batch_var)
            with torch.no_grad():
                self.running_mean.lerp_(batch_mean.detach().expand_as(self.running_mean), self.momentum)
                self.running_var.lerp_(batch_var.detach().expand_as(self.running_var), self.momentum)
                self.steps += 1
        else:
            mean, var = self.running_mean, self.running_var
        # (x - mean) / std * weight + bias as one multiply-add over the batch: x * scale + shift.
        scale = self.weight * (var + self.eps).rsqrt()
        return torch.addcmul(self.bias - mean * scale, x, scale)

    def extra_repr(self) -> str:
        return f"{tuple(self.running_mean.shape)}, momentum={self.momentum}, warmup_steps={self.warmup_steps}"


def set_batch_renorm_mode(module: nn.Module, training: bool) -> None:
    """Training (batch statistics, running ones updated) or evaluation mode for the ``BatchRenorm``
    layers of ``module`` only (sb3-contrib's ``set_bn_training_mode``)."""
    for layer in module.modules():
        if isinstance(layer, BatchRenorm):
            layer.train(training)
