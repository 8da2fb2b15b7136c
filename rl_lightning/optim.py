"""Optimizer construction and learning-rate schedules, shared by every algorithm."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def make_adam(params: Any, lr: float, eps: float, fused: bool, capturable: bool = False) -> torch.optim.Adam:
    """Adam, fused where ``fused`` (and the device has a fused kernel). The fused kernel updates every
    parameter at once: on small RL networks it is several times faster than the default per-tensor
    loop (docs/benchmarks.md, "Where the time goes"). Callers pass ``fused=False`` under mixed
    precision when they clip gradients: Lightning's mixed-precision plugin refuses to clip the
    gradients of an optimizer that unscales them internally, which a fused one does.

    ``capturable`` on a CUDA device: an Adam a CUDA graph can capture (its step counts on the
    device, the learning rate a device tensor that ``anneal_linearly`` updates in place); the
    per-tensor (foreach) kernel, the one PyTorch documents for capture. Elsewhere it changes nothing."""
    params = list(params)
    device = params[0]["params"][0].device if isinstance(params[0], dict) else params[0].device
    if capturable and device.type == "cuda":
        return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), eps=eps, capturable=True, foreach=True)
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=fused and device.type in ("cpu", "cuda"))


def fused_allowed(precision: str, clipped: bool) -> bool:
    """Whether a fused optimizer may be used under ``precision`` (see ``make_adam``)."""
    return not (clipped and ("mixed" in precision or precision == "16"))


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = duration``, then ``end``."""
    if duration <= 0:
        return end
    return start + (end - start) * min(t / duration, 1.0)


def anneal_linearly(optimizer: torch.optim.Optimizer, start: float | Tensor, duration: float, t: float) -> None:
    """Set the learning rate to ``start`` decayed linearly to 0 at ``t = duration`` (in place where it
    is a tensor: a CUDA graph reads it from there; ``start`` a tensor: a population's per-member rates)."""
    lr = start * linear_schedule(1.0, 0.0, duration, t)
    for group in optimizer.param_groups:
        if isinstance(lr, Tensor):
            group["lr"].copy_(lr)
        elif isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def plain_gradient_step(optimizer: torch.optim.Optimizer, loss: Tensor, max_grad_norm: float | None) -> None:
    """``zero_grad``, backward, gradient-norm clipping and the step: what Lightning's ``manual_backward``,
    ``clip_gradients`` and ``LightningOptimizer.step`` compute in full precision on one device, without
    their hooks."""
    optimizer.zero_grad()
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], max_grad_norm)
    optimizer.step()
