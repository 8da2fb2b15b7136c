"""Helpers shared by the networks of several algorithms."""

from __future__ import annotations

import torch
from torch import Tensor, nn


@torch.no_grad()
def polyak_update(source: nn.Module, target: nn.Module, tau: float | Tensor) -> None:
    """``target <- tau * source + (1 - tau) * target`` for every parameter; buffers (e.g. batch-norm
    statistics) are copied. ``tau = 1.0`` is a hard copy (DQN's periodic target update), done as an
    exact copy rather than through the interpolation's rounding. ``tau`` an ``(N,)`` tensor: stacked
    population members (the member dimension first), each interpolated with its own."""
    src, dst = list(source.parameters()), list(target.parameters())
    if isinstance(tau, Tensor):
        torch._foreach_lerp_(dst, src, [tau.to(p).view([-1] + [1] * (p.dim() - 1)) for p in dst])
    elif tau == 1.0:
        torch._foreach_copy_(dst, src)
    else:
        torch._foreach_lerp_(dst, src, tau)
    for b_dst, b_src in zip(target.buffers(), source.buffers(), strict=True):
        b_dst.copy_(b_src)
