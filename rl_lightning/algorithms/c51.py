"""C51: categorical distributional DQN.

Bellemare, Dabney, Munos 2017, "A Distributional Perspective on Reinforcement Learning"
(https://arxiv.org/abs/1707.06887). The Q-network outputs, per action, the logits of a distribution
of returns on ``n_atoms`` fixed atoms ``z_i`` evenly spaced on ``[v_min, v_max]``; ``Q(s, a)`` is its
mean. The target distribution of ``r + gamma^n Z(s', a*)`` is projected back onto the atoms
(``categorical_projection``) and the loss is the cross-entropy to it (``categorical_loss``), which
prioritized replay also uses as priority (as Rainbow and Dopamine do).

Everything else is DQN's (``dqn.py``): collection, epsilon or noisy exploration, target updates,
double Q (``a*`` chosen by the online network's means), dueling (per atom, on the logits), n-step
returns and prioritized replay. With all of them on it is Rainbow (Hessel et al. 2018):
``configs/rainbow/``. DQN's ``loss`` option does not apply (the loss is the cross-entropy).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_lightning.algorithms.dqn import DQN, of_actions
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.errors import check
from rl_lightning.validation import at_least


def categorical_projection(
    next_probs: Tensor, support: Tensor, rewards: Tensor, discounts: Tensor, terminated: Tensor
) -> Tensor:
    """The distribution of ``r + discount * (1 - terminated) * Z`` projected onto ``support``.

    ``next_probs`` ``[B, N]`` are the probabilities of ``Z(s', a*)`` on the ``N`` evenly spaced atoms of
    ``support``; ``rewards``, ``discounts`` (``gamma^n``) and ``terminated`` are ``[B]``. Each shifted atom
    ``Tz_j``, clipped to ``[v_min, v_max]``, splits its probability between the two atoms around it in
    proportion to its closeness (all of it to an atom it falls on). A terminal transition puts all
    mass at ``r``.
    """
    n_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    shifted = rewards[:, None] + (discounts * (1.0 - terminated))[:, None] * support[None, :]
    position = ((shifted.clamp(v_min, v_max) - v_min) / ((v_max - v_min) / (n_atoms - 1))).clamp(0, n_atoms - 1)
    lower, upper = position.floor(), position.ceil()
    projected = torch.zeros_like(next_probs)
    # An atom that falls exactly on z_l (lower == upper) gives it all its mass.
    projected.scatter_add_(1, lower.long(), next_probs * (upper - position + (lower == upper).float()))
    projected.scatter_add_(1, upper.long(), next_probs * (position - lower))
    return projected


def categorical_loss(logits: Tensor, target_probs: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """``mean(w * H(target, softmax(logits)))``, the cross-entropy of ``[B, N]`` logits to the projected
    target distribution; returns ``(loss, per-sample cross-entropies)``."""
    cross_entropy = -(target_probs * torch.log_softmax(logits, -1)).sum(-1)
    return (weights * cross_entropy).mean(), cross_entropy.detach()


class C51(DQN):
    """Categorical distributional DQN (C51) for discrete actions.

    DQN's arguments all apply (but ``loss``), described there: ``double_q`` bootstraps from the action
    the online network's mean values choose, ``dueling`` has value and advantage streams per atom,
    prioritized replay's priority is the cross-entropy.

    Args:
        n_atoms: Atoms of the return distribution.
        v_min: Lowest atom.
        v_max: Highest atom.
    """

    def __init__(self, n_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0, **kwargs: Any) -> None:
        super().__init__(loss="huber", **kwargs)  # no use: the loss is the cross-entropy (td_loss)
        at_least("n_atoms", n_atoms, 2)
        check(v_min < v_max, f"v_min must be below v_max, got v_min={v_min}, v_max={v_max}.")
        self.atoms = n_atoms
        self.register_buffer("support", torch.linspace(v_min, v_max, n_atoms), persistent=False)

    def q_values(self, outputs: Tensor) -> Tensor:
        """The means of the distributions the logits ``[..., A, N]`` give."""
        return (outputs.float().softmax(-1) * self.support).sum(-1)

    def _target(self, batch: ReplayBatch, next_logits: Tensor) -> Tensor:
        next_probs = of_actions(next_logits, self.next_actions(batch, next_logits)).float().softmax(-1)
        return categorical_projection(next_probs, self.support, batch.rewards, batch.discounts, batch.terminated)

    def td_loss(
        self, obs: Tensor, actions: Tensor, target: Tensor, weights: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        logits = of_actions(self.q_net(obs), actions).float()
        loss, cross_entropy = self.member_losses(categorical_loss, logits, target, weights)
        return loss, cross_entropy, self.member_mean(*self.member_rows(self.q_values(logits.detach())))
