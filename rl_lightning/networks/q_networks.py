"""Q-networks for discrete actions: an MLP for flat observations, the image encoders
(``encoders.py``) for observations with images, an optional dueling head, optional noisy layers
(``noisy.py``) and optional distributional outputs (``atoms`` values per action: C51's logits,
QR-DQN's quantiles).

Initialization is PyTorch's default (as in SB3's and CleanRL's DQN) unless ``orthogonal_init`` (CleanRL's
PQN), and ``layer_norm`` normalizes every hidden layer (PQN).
"""

from __future__ import annotations

import math

import gymnasium as gym
from torch import Tensor, nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.encoders import flat_dim, image_encoder
from rl_lightning.networks.mlp import layer_init, mlp
from rl_lightning.networks.noisy import make_noisy, reset_noise


class MLPTorso(nn.Module):
    """Flattened observations through hidden layers (the last activation included)."""

    def __init__(
        self,
        observation_space: gym.Space,
        hidden_sizes: tuple[int, ...],
        activation: str,
        orthogonal_init: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        dim = flat_dim(observation_space)
        layers = mlp(dim, hidden_sizes, activation=activation, orthogonal=orthogonal_init, layer_norm=layer_norm)
        self.net = nn.Sequential(nn.Flatten(), *layers)
        self.features_dim = hidden_sizes[-1] if hidden_sizes else dim

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs.float())


class QNetwork(nn.Module):
    """``Q(s, .)`` for every discrete action: a torso (the image CNN of ``encoders.image_encoder`` for
    images, an MLP otherwise) and a linear head, or a dueling head (Wang et al. 2016, "Dueling Network
    Architectures for Deep Reinforcement Learning"):

        Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')

    With ``atoms > 1`` it returns ``[..., A, atoms]`` (a distribution's parameters per action) and the
    dueling combination applies to each atom, as in Rainbow. With ``noisy`` every linear layer, the
    torso's included, is a ``NoisyLinear`` (Fortunato et al. 2018).

    Deviation: the dueling streams share the torso's last layer (Wang et al. give each stream its
    own 512-unit layer on top of the convolutions).

    Args:
        observation_space: A ``Box``.
        action_space: ``Discrete``.
        hidden_sizes: MLP hidden widths (ignored for images).
        activation: MLP hidden activation (ignored for images).
        dueling: Use the dueling head.
        noisy: Use factorized Gaussian noisy linear layers.
        atoms: Outputs per action (1: ``[..., A]`` Q-values).
        orthogonal_init: Orthogonal weights of gain sqrt(2), zero biases, in every layer, the heads
            included (CleanRL's PQN); otherwise PyTorch's default.
        layer_norm: ``LayerNorm`` before every hidden activation, the torso's convolutions included (PQN).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "relu",
        dueling: bool = False,
        noisy: bool = False,
        atoms: int = 1,
        orthogonal_init: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"QNetwork needs a Discrete action space, got {action_space}.")
        n = int(action_space.n)
        self.torso: nn.Module = image_encoder(observation_space, orthogonal_init, layer_norm) or MLPTorso(
            observation_space, tuple(hidden_sizes), activation, orthogonal_init, layer_norm
        )
        dim = self.torso.features_dim
        self.dueling = dueling
        self.atoms = atoms
        self.head = nn.Linear(dim, n * atoms)  # the advantage stream when dueling
        self.value = nn.Linear(dim, atoms) if dueling else None
        if orthogonal_init:
            for head in (self.head, self.value):
                if head is not None:
                    layer_init(head, std=math.sqrt(2))
        if noisy:
            make_noisy(self)

    def forward(self, obs: Tensor) -> Tensor:
        features = self.torso(obs)
        q = self.head(features)
        if self.atoms > 1:
            q = q.unflatten(-1, (-1, self.atoms))
        if self.value is not None:
            value = self.value(features)
            value = value.unsqueeze(-2) if self.atoms > 1 else value
            q = value + q - q.mean(-1 if self.atoms == 1 else -2, keepdim=True)
        return q

    def reset_noise(self) -> None:
        """New noise in the noisy layers (nothing without them)."""
        reset_noise(self)
