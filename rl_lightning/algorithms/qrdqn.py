"""QR-DQN: distributional DQN by quantile regression.

Dabney, Rowland, Bellemare, Munos 2018, "Distributional Reinforcement Learning with Quantile
Regression" (https://arxiv.org/abs/1710.10044). The Q-network outputs, per action, ``n_quantiles``
values ``theta_i``: the quantiles of the return distribution at the midpoints
``tau_i = (2i + 1) / 2N``; ``Q(s, a)`` is their mean. The target quantiles are
``r + gamma^n theta_j(s', a*)`` and the loss is the quantile Huber loss (kappa = 1) between every
pair of current and target quantiles (``quantile_huber_loss``), as in sb3-contrib's ``QRDQN``, whose
defaults these are (Adam epsilon ``0.01 / batch_size`` as in the paper, no gradient clipping).

Everything else is DQN's (``dqn.py``): collection, epsilon or noisy exploration, target updates,
double Q (``a*`` chosen by the online network's means), dueling (per quantile), n-step returns and
prioritized replay (priority: the per-sample loss). DQN's ``loss`` option does not apply.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rl_lightning.algorithms.dqn import DQN, of_actions
from rl_lightning.config import resolve_config
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.validation import at_least


def quantile_huber_loss(quantiles: Tensor, target_quantiles: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """The quantile Huber loss (kappa = 1) of ``[B, N]`` quantiles at the midpoints ``tau_i`` against
    ``[B, N']`` target quantiles; returns ``(loss, per-sample losses)``.

    For every pair ``u_ij = target_j - theta_i``: ``|tau_i - 1{u_ij < 0}| * huber(u_ij)``, summed over
    the current quantiles ``i`` and averaged over the targets ``j`` (sb3-contrib's
    ``quantile_huber_loss``), then ``mean(w * .)`` over the batch.
    """
    n = quantiles.shape[-1]
    dtype = torch.promote_types(quantiles.dtype, target_quantiles.dtype)  # bf16 and float32 under autocast
    taus = (torch.arange(n, device=quantiles.device, dtype=dtype) + 0.5)[:, None] / n
    q, y = torch.broadcast_tensors(quantiles.to(dtype)[:, :, None], target_quantiles.to(dtype)[:, None, :])
    weight = torch.where(y.detach() < q.detach(), 1.0 - taus, taus)  # |tau_i - 1{u_ij < 0}|
    per_sample = (weight * F.huber_loss(q, y, reduction="none")).sum(1).mean(1)
    return (weights * per_sample).mean(), per_sample.detach()


class QRDQN(DQN):
    """Quantile-regression DQN for discrete actions.

    DQN's arguments all apply (but ``loss``), described there: ``double_q`` bootstraps from the action
    the online network's mean values choose, ``dueling`` has value and advantage streams per quantile,
    prioritized replay's priority is the per-sample loss. The defaults that differ from DQN's are
    sb3-contrib's.

    Args:
        n_quantiles: Quantiles per action.
        learning_rate: Adam learning rate.
        end_e: Exploration epsilon after the decay; ``None``: 0.01, or 0.0 with ``noisy``.
        exploration_fraction: Fraction of ``total_env_steps`` over which epsilon decays linearly.
        max_grad_norm: Global gradient-norm clipping threshold; ``None`` does not clip.
        adam_eps: Adam's epsilon; ``None``: ``0.01 / replay.batch_size`` (the QR-DQN paper).
    """

    def __init__(
        self,
        n_quantiles: int = 200,
        learning_rate: float = 5e-5,
        end_e: float | None = None,
        exploration_fraction: float = 0.005,
        max_grad_norm: float | None = None,
        adam_eps: float | None = None,
        **kwargs: Any,
    ) -> None:
        # dict.get, not kwargs.get: the CLI would read the latter as a parameter of this class.
        if end_e is None and not dict.get(kwargs, "noisy", False):
            end_e = 0.01  # sb3-contrib's exploration_final_eps
        if adam_eps is None:
            adam_eps = 0.01 / resolve_config(type(self), "replay", dict.get(kwargs, "replay")).batch_size
        super().__init__(
            learning_rate=learning_rate,
            end_e=end_e,
            exploration_fraction=exploration_fraction,
            max_grad_norm=max_grad_norm,
            adam_eps=adam_eps,
            loss="huber",  # no use: the loss is the quantile Huber loss (td_loss)
            **kwargs,
        )
        at_least("n_quantiles", n_quantiles, 2)
        self.atoms = n_quantiles

    def q_values(self, outputs: Tensor) -> Tensor:
        """The means of the quantiles ``[..., A, N]``."""
        return outputs.float().mean(-1)

    def _target(self, batch: ReplayBatch, next_quantiles: Tensor) -> Tensor:
        next_quantiles = of_actions(next_quantiles, self.next_actions(batch, next_quantiles)).float()
        return batch.rewards[:, None] + (batch.discounts * (1.0 - batch.terminated))[:, None] * next_quantiles

    def td_loss(
        self, obs: Tensor, actions: Tensor, target: Tensor, weights: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        quantiles = of_actions(self.q_net(obs), actions).float()
        loss, per_sample = self.member_losses(quantile_huber_loss, quantiles, target, weights)
        return loss, per_sample, self.member_mean(*self.member_rows(quantiles.detach()))
