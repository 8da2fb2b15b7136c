"""The one MLP builder, with the initializations RL implementations rely on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar, get_args

import torch
from torch import Tensor, nn

from rl_lightning.validation import Activation, mlp_args

LayerT = TypeVar("LayerT", nn.Linear, nn.Conv2d)

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
assert set(ACTIVATIONS) == set(get_args(Activation))


def layer_init(layer: LayerT, std: float = math.sqrt(2), bias: float = 0.0) -> LayerT:
    """Orthogonal weights with gain ``std`` and constant bias (Engstrom et al. 2020, "Implementation
    Matters in Deep Policy Gradients"; the PPO defaults of baselines, SB3 and CleanRL)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Float32Linear(nn.Linear):
    """A linear layer computed in float32 even under autocast (mixed precision): for output layers.

    Values, Q-values and logits are where bfloat16's 8-bit mantissa hurts: it rounds a return of 50 to
    a multiple of 0.25 and one of 500 to a multiple of 2, and a near-deterministic policy's logits
    enough to move its log-probabilities by ~0.01. The hidden layers keep running in low precision.
    Same parameters as ``nn.Linear`` (checkpoints are interchangeable).
    """

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return super().forward(x.float())
        return super().forward(x)


def norm_layer(layer_norm: bool, shape: int | Sequence[int]) -> list[nn.Module]:
    """``[LayerNorm(shape)]`` where ``layer_norm``, else ``[]``: what goes between a layer and its activation."""
    return [nn.LayerNorm(shape)] if layer_norm else []


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int | None = None,
    activation: str = "tanh",
    orthogonal: bool = True,
    out_std: float = 1.0,
    layer_norm: bool = False,
) -> nn.Sequential:
    """``in_dim -> hidden... -> out_dim`` as ``Sequential(Linear, act, ..., Linear)``.

    With ``orthogonal`` (the policy-gradient convention) hidden layers get orthogonal weights of gain
    sqrt(2) and the output layer gain ``out_std``; otherwise PyTorch's default initialization (the
    DQN, SAC and TD3 convention of SB3 and CleanRL). With ``out_dim=None`` the network ends with the
    last hidden activation (a feature extractor). The output layer computes in float32 under mixed
    precision (``Float32Linear``). With ``layer_norm`` each hidden layer is normalized (``LayerNorm``)
    before its activation (PQN's Q-network).
    """
    mlp_args(hidden_sizes, activation)
    layers: list[nn.Module] = []
    dim = in_dim
    for size in hidden_sizes:
        linear = nn.Linear(dim, size)
        linear = layer_init(linear) if orthogonal else linear
        layers += [linear, *norm_layer(layer_norm, size), ACTIVATIONS[activation]()]
        dim = size
    if out_dim is not None:
        out = Float32Linear(dim, out_dim)
        layers.append(layer_init(out, std=out_std) if orthogonal else out)
    return nn.Sequential(*layers)
