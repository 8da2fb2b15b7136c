"""Helpers shared by the networks of several algorithms."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


@torch.no_grad()
def polyak_update(source: nn.Module, target: nn.Module, tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target`` for every parameter; buffers (e.g. batch-norm
    statistics) are copied. ``tau = 1.0`` is a hard copy (DQN's periodic target update), done as an
    exact copy rather than through the interpolation's rounding."""
    src, dst = list(source.parameters()), list(target.parameters())
    if tau == 1.0:
        torch._foreach_copy_(dst, src)
    else:
        torch._foreach_lerp_(dst, src, tau)
    for b_dst, b_src in zip(target.buffers(), source.buffers(), strict=True):
        b_dst.copy_(b_src)


def make_adam(params: Any, lr: float, eps: float, fused: bool, capturable: bool = False) -> torch.optim.Adam:
    """Adam, fused where ``fused`` (and the device has a fused kernel). The fused kernel updates every
    parameter at once: on small RL networks it is several times faster than the default per-tensor
    loop (docs/benchmarks.md, "Where the time goes"). Callers pass ``fused=False`` under mixed
    precision when they clip gradients: Lightning's mixed-precision plugin refuses to clip the
    gradients of an optimizer that unscales them internally, which a fused one does.

    ``capturable`` on a CUDA device: an Adam a CUDA graph can capture (its step counts on the
    device, the learning rate a device tensor that ``anneal_learning_rate`` updates in place); the
    per-tensor (foreach) kernel, the one PyTorch documents for capture. Elsewhere it changes nothing."""
    params = list(params)
    device = params[0]["params"][0].device if isinstance(params[0], dict) else params[0].device
    if capturable and device.type == "cuda":
        return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), eps=eps, capturable=True, foreach=True)
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=fused and device.type in ("cpu", "cuda"))
