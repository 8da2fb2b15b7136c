"""Truncated Quantile Critics (TQC) for continuous actions.

Kuznetsov et al. 2020, "Controlling Overestimation Bias with Truncated Mixture of Continuous
Distributional Quantile Critics", https://arxiv.org/abs/2005.04269. SAC (``rl_lightning.algorithms.sac``:
the actor, the temperature, gSDE, the collection and update rhythm are its) with distributional
critics: each of ``n_critics`` critics predicts ``n_quantiles`` quantiles of the return, trained with
the quantile Huber loss towards a truncated mixture: the target critics' quantiles at ``(s', a' ~
pi(s'))`` of all critics pooled and sorted, the ``top_quantiles_to_drop_per_net * n_critics`` largest
dropped (the overestimation control), then the soft Bellman backup. The actor maximizes the mean of
all quantiles. Implementation and defaults as in sb3-contrib's ``TQC``; the critics are one batched
network (``QEnsemble``).

Deviations: none of substance (SAC's).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rl_lightning.algorithms.sac import SAC
from rl_lightning.errors import check
from rl_lightning.networks.continuous import QEnsemble
from rl_lightning.validation import at_least, non_negative


def truncated_quantile_target(
    rewards: Tensor,
    discounts: Tensor,
    terminated: Tensor,
    next_quantiles: Tensor,
    next_log_probs: Tensor,
    alpha: Tensor,
    drop_per_net: int,
) -> Tensor:
    """TQC's target atoms ``[B, n M - k n]`` from ``[n, B, M]`` target quantiles: all ``n M`` atoms
    sorted, the ``k n`` largest dropped (``k = drop_per_net``), then per atom ``z``

    y = r + discount * (1 - terminated) * (z - alpha * log pi(a'|s'))
    """
    n, batch, m = next_quantiles.shape
    pooled = next_quantiles.permute(1, 0, 2).reshape(batch, n * m).sort(-1).values[:, : n * m - drop_per_net * n]
    next_v = pooled - alpha * next_log_probs.unsqueeze(-1)
    return rewards.unsqueeze(-1) + (discounts * (1.0 - terminated)).unsqueeze(-1) * next_v


def quantile_huber_loss(quantiles: Tensor, target: Tensor) -> Tensor:
    """The quantile Huber loss (Dabney et al. 2018, QR-DQN; kappa 1) of ``[n, B, M]`` quantiles at the
    midpoints ``tau_j = (j + 1/2) / M`` against ``[B, K]`` target atoms, averaged over critics, batch,
    quantiles and atoms (sb3-contrib's ``quantile_huber_loss(sum_over_quantiles=False)``):

    mean |tau_j - 1{y_k < q_j}| * huber(y_k - q_j)
    """
    m = quantiles.shape[-1]
    dtype = torch.promote_types(quantiles.dtype, target.dtype)  # bf16 quantiles, float32 targets under autocast
    taus = (torch.arange(m, device=quantiles.device, dtype=dtype) + 0.5).unsqueeze(-1) / m
    # Pairs as broadcast views, not materialized: the [n, B, M, K] tensors are the loss's whole cost (a
    # third of the time of spelling out delta, |delta|, the Huber branches and the weight; same values).
    q, y = torch.broadcast_tensors(quantiles.to(dtype).unsqueeze(-1), target.to(dtype).unsqueeze(-2))
    weight = torch.where(y.detach() < q.detach(), 1.0 - taus, taus)
    return (weight * F.huber_loss(q, y, reduction="none")).mean()


def tqc_actor_loss(quantiles_pi: Tensor, log_probs: Tensor, alpha: Tensor) -> Tensor:
    """``mean(alpha * log pi(a|s) - Q(s, a))`` with ``Q`` the mean of all critics' quantiles ``[n, B, M]``."""
    return (alpha * log_probs - quantiles_pi.mean((0, 2))).mean()


class TQC(SAC):
    """TQC for continuous (``Box``) actions with finite bounds.

    Its other arguments are SAC's, described there.

    Args:
        n_critics: Quantile critics.
        n_quantiles: Quantiles per critic.
        top_quantiles_to_drop_per_net: Largest target atoms dropped, per critic.
    """

    def __init__(
        self, n_critics: int = 2, n_quantiles: int = 25, top_quantiles_to_drop_per_net: int = 2, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        at_least("n_critics", n_critics, 1)
        at_least("n_quantiles", n_quantiles, 1)
        non_negative("top_quantiles_to_drop_per_net", top_quantiles_to_drop_per_net)
        check(
            top_quantiles_to_drop_per_net < n_quantiles,
            f"top_quantiles_to_drop_per_net ({top_quantiles_to_drop_per_net}) must be below n_quantiles "
            f"({n_quantiles}): the target would keep no atom.",
        )

    def build_critic(self, obs_dim: int, act_dim: int) -> QEnsemble:
        hp = self.hparams
        return QEnsemble(obs_dim, act_dim, hp.hidden_sizes, hp.n_critics, hp.activation, out_dim=hp.n_quantiles)

    def td_target(
        self, rewards: Tensor, discounts: Tensor, terminated: Tensor, next_q: Tensor, next_log_pi: Tensor, alpha: Tensor
    ) -> Tensor:
        drop = self.hparams.top_quantiles_to_drop_per_net
        return truncated_quantile_target(rewards, discounts, terminated, next_q, next_log_pi, alpha, drop)

    def critic_loss(self, q: Tensor, target: Tensor) -> Tensor:
        return quantile_huber_loss(q, target)

    def actor_loss(self, q_pi: Tensor, log_pi: Tensor, alpha: Tensor) -> Tensor:
        return tqc_actor_loss(q_pi, log_pi, alpha)
