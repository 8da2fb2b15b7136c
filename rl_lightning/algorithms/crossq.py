"""CrossQ for continuous actions.

Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample
Efficiency and Simplicity", ICLR, https://arxiv.org/abs/1902.05605. SAC (``rl_lightning.algorithms.sac``:
the actor, the temperature, gSDE, the collection and update rhythm are its) without target networks:

- batch renormalization (``rl_lightning.networks.batch_renorm``) before every linear layer of the
  critics and of the actor, as sb3-contrib places it;
- the critics see ``(s, a)`` and ``(s', a' ~ pi(s'))`` in one batch of ``2B`` rows, so their batch
  statistics are those of the mixture, and the bootstrap values come from the same forward pass
  (detached) instead of a target network;
- the actor and the temperature are updated every ``policy_delay`` critic updates;
- Adam with ``betas = (0.5, 0.999)`` for the actor and the critics (the temperature's keeps Adam's
  default (0.9, 0.999), as in the paper's code and sb3-contrib); wide critics
  (``critic_hidden_sizes``; the paper's are 2048 wide, sb3-contrib's default 1024).

Implementation and defaults as in sb3-contrib's ``CrossQ``: the actor samples ``a'`` with its
running statistics (evaluation mode), ``pi(s)`` for its own update with batch statistics; the critics
give the actor loss with their running statistics. Collection and evaluation use running statistics.

Deviations: the critic loss sums the critics' mean squared errors (SAC's; sb3-contrib halves it,
which Adam's scale invariance makes immaterial).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms.sac import SAC, alpha_loss, sac_actor_loss, soft_q_target
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.networks.batch_renorm import BatchRenorm, set_batch_renorm_mode
from rl_lightning.networks.continuous import QEnsemble, q_loss
from rl_lightning.networks.encoders import flat_dim
from rl_lightning.validation import at_least, mlp_args, non_negative, positive_fraction

ADAM_BETAS = (0.5, 0.999)  # the paper's and sb3-contrib's, for the actor and the critics


class CrossQ(SAC):
    """CrossQ for continuous (``Box``) actions with finite bounds.

    Its other arguments are SAC's, described there, but ``tau``: CrossQ has no target critics.

    Args:
        learning_rate: Adam learning rate of the actor, the critics and alpha.
        hidden_sizes: Hidden widths of the actor.
        policy_delay: Critic updates per actor and temperature update.
        n_critics: Q critics (the target takes their minimum).
        critic_hidden_sizes: Hidden widths of each critic.
        batch_renorm_momentum: Rate of the batch renormalization's running statistics.
        batch_renorm_warmup_steps: Training calls of each batch renormalization layer that use the batch
            statistics alone, before the running ones take part.
    """

    target_critic = False
    # Its batch renormalization keeps running statistics that one batched update cannot keep per member.
    trains_populations = False
    member_hyperparameters = ()

    def __init__(
        self,
        learning_rate: float = 1e-3,
        hidden_sizes: tuple[int, ...] = (256, 256),
        policy_delay: int = 3,
        n_critics: int = 2,
        critic_hidden_sizes: tuple[int, ...] = (1024, 1024),
        batch_renorm_momentum: float = 0.01,
        batch_renorm_warmup_steps: int = 100_000,
        **kwargs: Any,
    ) -> None:
        # tau: no target networks.
        super().__init__(learning_rate=learning_rate, hidden_sizes=hidden_sizes, tau=1.0, **kwargs)
        at_least("policy_delay", policy_delay, 1)
        at_least("n_critics", n_critics, 1)
        mlp_args(critic_hidden_sizes, self.hparams.activation)
        positive_fraction("batch_renorm_momentum", batch_renorm_momentum)
        non_negative("batch_renorm_warmup_steps", batch_renorm_warmup_steps)
        self.actor_stats = torch.zeros(3)  # the latest actor update's loss, entropy and alpha, for logging

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        renorm = partial(BatchRenorm, momentum=hp.batch_renorm_momentum, warmup_steps=hp.batch_renorm_warmup_steps)
        obs_dim, act_dim = flat_dim(observation_space), int(action_space.shape[0])
        self.actor = self.build_actor(obs_dim, act_dim, norm=renorm)
        self.critic = QEnsemble(
            obs_dim,
            act_dim,
            hp.critic_hidden_sizes,
            hp.n_critics,
            hp.activation,
            norm=lambda n, dim: renorm(dim, n),
        )
        self.target_entropy = float(-act_dim if hp.target_entropy is None else hp.target_entropy)

    # ----------------------------------------------------------------------------------- acting
    def _explore(self, obs: Tensor) -> Tensor:
        set_batch_renorm_mode(self.actor, False)  # collection acts with the running statistics
        return super()._explore(obs)

    # --------------------------------------------------------------------------------- training
    def update(self, b: ReplayBatch) -> Tensor:
        """A critic update, and every ``policy_delay`` of them an actor and temperature update (each one
        CUDA graph with CUDA graphs on); the losses, mean Q, entropy and alpha, stacked as SAC's."""
        loss_q, q_mean = self.run_update(
            self.critic_update, b.obs, b.actions, b.rewards, b.discounts, b.terminated, b.next_obs
        )
        if (self.num_updates + 1) % self.hparams.policy_delay == 0:
            self.actor_stats = self.run_update(self.actor_update, b.obs).clone()
        loss_pi, entropy, alpha = self.actor_stats.to(loss_q.device)
        return torch.stack([loss_q, loss_pi, q_mean, entropy, alpha])

    def critic_update(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, discounts: Tensor, terminated: Tensor, next_obs: Tensor
    ) -> Tensor:
        """The critics on ``(s, a)`` and ``(s', a')`` in one forward pass (batch statistics of both, running
        ones updated); the bootstrap values from its second half, detached."""
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            set_batch_renorm_mode(self.actor, False)
            next_actions, next_log_pi = self.actor.sample(next_obs)
        set_batch_renorm_mode(self.critic, True)
        q_all = self.critic(torch.cat([obs, next_obs]), torch.cat([actions, next_actions]))
        q, next_q = q_all.split(len(obs), dim=1)
        target = soft_q_target(rewards, discounts, terminated, next_q.detach(), next_log_pi, alpha)
        loss_q = q_loss(q, target)
        self.gradient_step(self.optimizers()[1], loss_q)
        return torch.stack([loss_q, q.mean()]).detach()

    def actor_update(self, obs: Tensor) -> Tensor:
        """The delayed temperature and actor update: the actor with batch statistics, the critics (frozen)
        with running ones. Returns the actor loss, the entropy estimate and the alpha used."""
        actor_opt, _, *alpha_opt = self.optimizers()
        alpha = self.log_alpha.detach().exp()  # the value before its update
        set_batch_renorm_mode(self.actor, True)
        actions_pi, log_pi = self.actor.sample(obs)
        set_batch_renorm_mode(self.actor, False)
        if self.tune_alpha:
            self.gradient_step(alpha_opt[0], alpha_loss(self.log_alpha, log_pi, self.target_entropy))
        set_batch_renorm_mode(self.critic, False)
        self.critic.requires_grad_(False)
        loss_pi = sac_actor_loss(self.critic(obs, actions_pi), log_pi, alpha)
        self.critic.requires_grad_(True)
        self.gradient_step(actor_opt, loss_pi)
        return torch.stack([loss_pi, -log_pi.mean(), alpha]).detach()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        optimizers = super().configure_optimizers()
        for optimizer in optimizers[:2]:  # the actor's and the critics'; the temperature's keeps (0.9, 0.999)
            for group in optimizer.param_groups:
                group["betas"] = ADAM_BETAS
        return optimizers
