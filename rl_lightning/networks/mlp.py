"""Multi-layer perceptrons with the orthogonal initialization RL implementations rely on."""

from __future__ import annotations

import math

from torch import nn

from rl_lightning.errors import ConfigError

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Engstrom et al. 2020, "Implementation
    Matters in Deep Policy Gradients"; the PPO defaults of baselines, SB3 and CleanRL)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(
    in_dim: int,
    hidden_sizes: list[int] | tuple[int, ...],
    out_dim: int | None = None,
    activation: str = "tanh",
    out_std: float = 1.0,
) -> nn.Sequential:
    """``in_dim -> hidden... -> out_dim``; hidden layers get gain sqrt(2), the output ``out_std``.

    With ``out_dim=None`` the network ends with the last hidden activation (a feature extractor).
    """
    if activation not in ACTIVATIONS:
        raise ConfigError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
    layers: list[nn.Module] = []
    dim = in_dim
    for size in hidden_sizes:
        layers += [layer_init(nn.Linear(dim, size)), ACTIVATIONS[activation]()]
        dim = size
    if out_dim is not None:
        layers.append(layer_init(nn.Linear(dim, out_dim), std=out_std))
    return nn.Sequential(*layers)
