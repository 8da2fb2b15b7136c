"""Advantage Actor-Critic (A2C), the synchronous variant of A3C.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning",
https://arxiv.org/abs/1602.01783; synchronous, batched over vector envs as in OpenAI Baselines and
Stable-Baselines3 (``a2c/a2c.py``), whose defaults these are: 5-step rollouts, ``gae_lambda=1``
(plain n-step returns; lower it for GAE), RMSprop (alpha 0.99, eps 1e-5), value loss as the mean
squared error weighted by ``vf_coef=0.5``, gradient-norm clipping at 0.5, no advantage normalization.

Deviations: none in the update. Time-limit truncation bootstraps from V(final observation), as in
SB3. RMSprop is torch's (eps outside the square root), as SB3's default (not its ``RMSpropTFLike``).

Speed: a 5 x 8 rollout is 40 env steps and one small update, cheaper than Lightning's fixed cost
of a training step. So one Lightning training step runs ``rollouts_per_step`` rollout-update pairs:
the batch it receives is a lazy iterator, and each rollout is collected only when the loop asks for
it, after the previous update, by the current policy. The result is the same sequence of updates,
and the same evaluation points, as one rollout per training step (``rollouts_per_step=1``); only
the logging interval changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NamedTuple

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.on_policy import OnPolicyMixin
from rl_lightning.data.rollout import RolloutBatch, gae_batch
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import ConfigError


class A2CLoss(NamedTuple):
    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor


def a2c_loss(
    logprobs: Tensor,
    advantages: Tensor,
    values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    ent_coef: float,
    vf_coef: float,
) -> A2CLoss:
    """The A2C objective on one rollout (advantages and returns are constants).

    L_pi = -mean(A * log pi(a|s))
    L_v  = mean((R - V(s))^2)      (SB3 / Baselines: mean squared error, no 1/2)
    loss = L_pi - ent_coef * mean(entropy) + vf_coef * L_v
    """
    policy_loss = -(advantages * logprobs).mean()
    value_loss = (returns - values).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss - ent_coef * entropy_mean + vf_coef * value_loss
    return A2CLoss(loss, policy_loss, value_loss, entropy_mean)


class A2C(OnPolicyMixin, RLModule):
    """A2C for discrete (categorical) and continuous (diagonal Gaussian) actions.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        total_env_steps: Training budget in env steps (all ranks together).
        num_steps: Steps per sub-env per rollout (the n of n-step returns); one update per rollout.
        learning_rate: Optimizer learning rate (the start value when annealed).
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_env_steps``.
        gamma: Discount factor, in (0, 1].
        gae_lambda: GAE lambda, in [0, 1]; 1 gives n-step returns bootstrapped at the rollout end.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient.
        max_grad_norm: Global gradient-norm clipping threshold.
        norm_adv: Normalize advantages per rollout.
        optimizer: ``rmsprop`` (alpha 0.99, eps 1e-5: A3C's and SB3's) or ``adam`` (eps 1e-5).
        rollouts_per_step: Rollout-update pairs per Lightning training step (speed only: the
            updates are the same; metrics are logged per training step).
        hidden_sizes: Hidden layer widths of the actor and of the critic MLP.
        activation: Hidden activation: ``tanh``, ``relu``, ``elu`` or ``silu``.
        normalize_obs: Normalize observations by running mean and std (statistics saved in
            checkpoints, frozen outside collection; ``forward`` takes raw observations).
        normalize_reward: Divide rewards by the running std of the discounted return (training only).
        env_steps_per_epoch: Env steps per Lightning epoch (all ranks); one evaluation per epoch.
        eval_episodes: Deterministic evaluation episodes per evaluation.
    """

    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)

    def __init__(
        self,
        env: EnvConfig | None = None,
        total_env_steps: int = 1_000_000,
        num_steps: int = 5,
        learning_rate: float = 7e-4,
        anneal_lr: bool = False,
        gamma: float = 0.99,
        gae_lambda: float = 1.0,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        norm_adv: bool = False,
        optimizer: Literal["rmsprop", "adam"] = "rmsprop",
        rollouts_per_step: int = 10,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        normalize_obs: bool = False,
        normalize_reward: bool = False,
        env_steps_per_epoch: int = 10_000,
        eval_episodes: int = 20,
    ) -> None:
        super().__init__(env, total_env_steps, env_steps_per_epoch, eval_episodes)
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.rollout_size = self.env_config.num_envs * num_steps
        self.rollouts_per_step = rollouts_per_step
        self.check_common_hparams()
        if not 0 <= gae_lambda <= 1:
            raise ConfigError(f"gae_lambda must be in [0, 1], got {gae_lambda}.")
        if rollouts_per_step < 1:
            raise ConfigError(f"rollouts_per_step must be >= 1, got {rollouts_per_step}.")
        if optimizer not in ("rmsprop", "adam"):
            raise ConfigError(f"optimizer must be 'rmsprop' or 'adam', got {optimizer!r}.")

    # ------------------------------------------------------------------------------------- data
    # build_networks, batches_per_epoch, collect_rollout and forward (acting): OnPolicyMixin.
    def generate_batches(self) -> Iterator[Iterator[RolloutBatch]]:
        left = self.rollouts_per_epoch()  # the last batch of an epoch may hold fewer rollouts
        while left > 0:
            count = min(self.rollouts_per_step, left)
            left -= count
            yield self._rollouts(count)

    def _rollouts(self, count: int) -> Iterator[RolloutBatch]:
        # A generator: each rollout is collected when training_step asks for it, by the policy
        # the previous update left.
        for _ in range(count):
            with self._naming_env_faults("Experience collection"):  # runs inside training_step
                rollout = self.collect_rollout()
            yield gae_batch(rollout, self.hparams.gamma, self.hparams.gae_lambda)

    # --------------------------------------------------------------------------------- training
    def training_step(self, rollouts: Iterator[RolloutBatch], batch_idx: int) -> None:
        hp = self.hparams
        opt = self.optimizers()
        for batch in rollouts:
            if hp.anneal_lr:
                self.anneal_learning_rate(opt)
            advantages = batch.advantages
            if hp.norm_adv:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            logprobs, entropy, values = self.agent.evaluate(batch.obs, batch.actions)
            out = a2c_loss(
                logprobs.float(), advantages, values.float(), batch.returns, entropy.float(), hp.ent_coef, hp.vf_coef
            )
            opt.zero_grad()
            self.manual_backward(out.loss)
            self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()

        if self.should_log():  # the last update of the step
            explained_var = 1 - (batch.returns - batch.values).var() / batch.returns.var()
            self.log_training(
                {
                    "train/policy_loss": out.policy_loss.detach(),
                    "train/value_loss": out.value_loss.detach(),
                    "train/entropy": out.entropy.detach(),
                    "train/explained_variance": explained_var,
                    "train/learning_rate": opt.param_groups[0]["lr"],
                }
            )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.optimizer == "rmsprop":
            # foreach: torch picks it by default on CUDA only, and loops over the tensors on CPU
            # (torch has no fused RMSprop).
            return torch.optim.RMSprop(
                self.agent.parameters(), lr=self.hparams.learning_rate, alpha=0.99, eps=1e-5, foreach=True
            )
        return self.adam(self.agent.parameters(), lr=self.hparams.learning_rate, eps=1e-5)
