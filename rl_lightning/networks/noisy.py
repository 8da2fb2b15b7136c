"""Noisy linear layers for exploration (Fortunato et al. 2018, "Noisy Networks for Exploration",
https://arxiv.org/abs/1706.10295): factorized Gaussian noise, as in their DQN and in Rainbow.

    y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out),   f(x) = sign(x) sqrt(|x|)

with ``eps_in`` and ``eps_out`` standard normal vectors: ``p + q`` random numbers per layer instead of
``p * q``. The noise is a pair of buffers (so checkpoints carry it and a resumed run continues with
the same noise), drawn again only by ``reset_noise``: the algorithm decides when (per collection step
and per update for DQN). In eval mode a layer uses its mean weights ``mu`` only, so evaluation,
videos and exported policies are deterministic.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class NoisyLinear(nn.Module):
    """A linear layer with learned factorized Gaussian noise on its weights and biases.

    Args:
        in_features: Input width ``p``.
        out_features: Output width ``q``.
        sigma0: Initial noise scale: ``sigma = sigma0 / sqrt(p)`` (0.5 in the paper).
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("epsilon_in", torch.zeros(in_features))
        self.register_buffer("epsilon_out", torch.zeros(out_features))
        self.reset_noise()

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new noise (in place, so a captured CUDA graph reads it)."""
        for eps in (self.epsilon_in, self.epsilon_out):
            eps.normal_()
            eps.copy_(eps.sign() * eps.abs().sqrt())

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.epsilon_out, self.epsilon_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.epsilon_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def make_noisy(module: nn.Module, sigma0: float = 0.5) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``module`` by a fresh ``NoisyLinear`` of the same shape (the
    paper makes all fully-connected layers noisy; convolutions stay as they are). Returns ``module``."""
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, NoisyLinear(child.in_features, child.out_features, sigma0))
        else:
            make_noisy(child, sigma0)
    return module


def reset_noise(module: nn.Module) -> None:
    """Draw new noise in every ``NoisyLinear`` of ``module``."""
    for layer in module.modules():
        if isinstance(layer, NoisyLinear):
            layer.reset_noise()
