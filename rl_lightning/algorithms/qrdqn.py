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

import torch
from torch import Tensor

from rl_lightning.algorithms.dqn import DQN, DQN_REPLAY, dqn_arguments, of_actions, with_dqn_args
from rl_lightning.config import DEFAULT_RUN, ReplayConfig, RunConfig, resolve_config
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.envs.make import EnvConfig
from rl_lightning.networks.mlp import Activation
from rl_lightning.validation import at_least


def quantile_huber_loss(quantiles: Tensor, target_quantiles: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """The quantile Huber loss (kappa = 1) of ``[B, N]`` quantiles at the midpoints ``tau_i`` against
    ``[B, N']`` target quantiles; returns ``(loss, per-sample losses)``.

    For every pair ``u_ij = target_j - theta_i``: ``|tau_i - 1{u_ij < 0}| * huber(u_ij)``, summed over
    the current quantiles ``i`` and averaged over the targets ``j`` (sb3-contrib's
    ``quantile_huber_loss``), then ``mean(w * .)`` over the batch.
    """
    n = quantiles.shape[-1]
    taus = (torch.arange(n, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / n
    delta = target_quantiles[:, None, :] - quantiles[:, :, None]  # [B, N, N']
    huber = torch.where(delta.abs() > 1.0, delta.abs() - 0.5, 0.5 * delta.pow(2))
    per_sample = ((taus[:, None] - (delta.detach() < 0).float()).abs() * huber).sum(1).mean(1)
    return (weights * per_sample).mean(), per_sample.detach()


@with_dqn_args
class QRDQN(DQN):
    """Quantile-regression DQN for discrete actions; DQN's options all apply. Defaults: sb3-contrib's.

    Its other arguments are DQN's, described as there (``with_dqn_args`` adds them below).

    Args:
        end_e: Exploration epsilon after the decay; ``None``: 0.01, or 0.0 with ``noisy``.
        double_q: Bootstrap from the action the online network's mean values choose.
        dueling: Use a dueling head (value and advantage streams per quantile).
        prioritized_replay: Use proportional prioritized replay (priority: the per-sample loss).
        adam_eps: Adam's epsilon; ``None``: ``0.01 / replay.batch_size`` (the QR-DQN paper).
        n_quantiles: Quantiles per action.
    """

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        replay: ReplayConfig = DQN_REPLAY,
        learning_rate: float = 5e-5,
        gamma: float = 0.99,
        target_network_frequency: int = 10_000,
        tau: float = 1.0,
        start_e: float | None = None,
        end_e: float | None = None,
        exploration_fraction: float = 0.005,
        double_q: bool = False,
        dueling: bool = False,
        n_step: int = 1,
        prioritized_replay: bool = False,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        noisy: bool = False,
        max_grad_norm: float | None = None,
        adam_eps: float | None = None,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: Activation = "relu",
        n_quantiles: int = 200,
    ) -> None:
        if end_e is None and not noisy:
            end_e = 0.01  # sb3-contrib's exploration_final_eps
        if adam_eps is None:
            adam_eps = 0.01 / resolve_config(type(self), "replay", replay).batch_size
        super().__init__(**dqn_arguments(locals()))
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
        loss, per_sample = quantile_huber_loss(quantiles, target, weights)
        return loss, per_sample, quantiles.detach().mean()
