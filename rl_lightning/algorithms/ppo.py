"""Proximal Policy Optimization (PPO-Clip).

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", https://arxiv.org/abs/1707.06347;
implementation details as in Huang et al. 2022, "The 37 Implementation Details of PPO" (CleanRL),
and Stable-Baselines3: orthogonal init, Adam eps 1e-5, per-minibatch advantage normalization,
global gradient-norm clipping, learning rate annealed linearly over env steps.

Deviations: none of substance. Time-limit truncation bootstraps from V(final observation) (SB3 does,
CleanRL does not).

One Lightning training step is one rollout: ``training_step`` runs ``update_epochs x
num_minibatches`` Adam steps on it through manual optimization (``manual_backward``,
``clip_gradients``: precision plugins and DDP gradient sync still apply). Lightning's fixed cost is
paid once per rollout instead of once per minibatch, and ``trainer.global_step`` still counts
optimizer steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.on_policy import OnPolicyMixin
from rl_lightning.data.rollout import RolloutBatch, gae_batch
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import check


class PPOLoss(NamedTuple):
    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_fraction: Tensor


def ppo_loss(
    new_logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    clip_coef: float,
    clip_vloss: bool,
    ent_coef: float,
    vf_coef: float,
) -> PPOLoss:
    """The PPO objective on one minibatch (advantages already normalized if wanted).

    ratio  = exp(logp_new - logp_old)
    L_pi   = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))
    L_v    = 0.5 * mean((V - R)^2)   or, clipped, 0.5 * mean(max((V - R)^2, (V_clip - R)^2))
             with V_clip = V_old + clip(V - V_old, -eps, eps)
    loss   = L_pi - ent_coef * mean(entropy) + vf_coef * L_v
    approx_kl = mean((ratio - 1) - log ratio)   (Schulman's unbiased, low-variance k3 estimator)
    """
    log_ratio = new_logprobs - old_logprobs
    ratio = log_ratio.exp()
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        value_loss = 0.5 * torch.max((new_values - returns).pow(2), (clipped - returns).pow(2)).mean()
    else:
        value_loss = 0.5 * (new_values - returns).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss - ent_coef * entropy_mean + vf_coef * value_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_coef).float().mean()
    return PPOLoss(loss, policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction)


class PPO(OnPolicyMixin, RLModule):
    """PPO for discrete (categorical) and continuous (diagonal Gaussian) actions.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        total_env_steps: Training budget in env steps (all ranks together).
        num_steps: Steps per sub-env per rollout; a rollout is ``num_envs * num_steps`` transitions.
        learning_rate: Adam learning rate (the start value when annealed).
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_env_steps``.
        gamma: Discount factor, in (0, 1].
        gae_lambda: GAE lambda, in [0, 1].
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``num_envs * num_steps``.
        clip_coef: Surrogate clipping epsilon (also the value clipping range with ``clip_vloss``).
        clip_vloss: Clip the value loss around the rollout's values (off by default, as in SB3;
            Andrychowicz et al. 2021 found it does not help).
        norm_adv: Normalize advantages per minibatch.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient.
        max_grad_norm: Global gradient-norm clipping threshold.
        target_kl: Stop the update epochs of a rollout early once the approximate KL exceeds this
            (checked after each epoch); ``None`` never stops.
        hidden_sizes: Hidden layer widths of the actor and of the critic MLP (vector observations;
            image observations get the shared Nature CNN instead).
        activation: Hidden activation of the MLPs: ``tanh``, ``relu``, ``elu`` or ``silu``.
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
        num_steps: int = 128,
        learning_rate: float = 2.5e-4,
        anneal_lr: bool = True,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        clip_coef: float = 0.2,
        clip_vloss: bool = False,
        norm_adv: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        target_kl: float | None = None,
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
        self.minibatch_size = self.rollout_size // max(num_minibatches, 1)
        self._check_hparams()

    def _check_hparams(self) -> None:
        hp = self.hparams
        self.check_common_hparams()
        check(0 <= hp.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {hp.gae_lambda}.")
        for name in ("clip_coef", "max_grad_norm"):
            check(hp[name] > 0, f"{name} must be > 0, got {hp[name]}.")
        for name in ("vf_coef", "ent_coef"):
            check(hp[name] >= 0, f"{name} must be >= 0, got {hp[name]}.")
        check(hp.target_kl is None or hp.target_kl > 0, f"target_kl must be > 0 or null, got {hp.target_kl}.")
        for name in ("update_epochs", "num_minibatches"):
            check(hp[name] >= 1, f"{name} must be >= 1, got {hp[name]}.")
        check(
            self.rollout_size % hp.num_minibatches == 0,
            f"num_minibatches={hp.num_minibatches} does not divide the rollout size "
            f"env.num_envs * num_steps = {self.env_config.num_envs} * {hp.num_steps} = {self.rollout_size}.",
        )

    # ------------------------------------------------------------------------------------- data
    # build_networks, batches_per_epoch, collect_rollout and forward (acting): OnPolicyMixin.
    def generate_batches(self) -> Iterator[RolloutBatch]:
        for _ in range(self.batches_per_epoch()):
            yield gae_batch(self.collect_rollout(), self.hparams.gamma, self.hparams.gae_lambda)

    # --------------------------------------------------------------------------------- training
    def training_step(self, batch: RolloutBatch, batch_idx: int) -> Tensor:
        hp = self.hparams
        opt = self.optimizers()
        if hp.anneal_lr:
            self.anneal_learning_rate(opt)
        logging = self.should_log()
        stats: list[Tensor] = []
        for _ in range(hp.update_epochs):
            if hp.num_minibatches == 1:  # the whole rollout: views, no shuffle (a mean ignores order)
                minibatches: Iterable[Tensor | slice] = (slice(None),)
            else:
                minibatches = torch.randperm(self.rollout_size, device=self.device).split(self.minibatch_size)
            for mb_inds in minibatches:
                out = self.minibatch_loss(
                    batch.obs[mb_inds],
                    batch.actions[mb_inds],
                    batch.logprobs[mb_inds],
                    batch.advantages[mb_inds],
                    batch.values[mb_inds],
                    batch.returns[mb_inds],
                )
                opt.zero_grad()
                self.manual_backward(out.loss)
                self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
                opt.step()
                if logging:  # ~15 us of stacking per minibatch, only on the steps that log
                    stats.append(torch.stack([t.detach() for t in out[1:]]))
            if hp.target_kl is not None:
                # Same decision on every DDP rank, or their optimizer steps would diverge.
                kl = self.trainer.strategy.reduce(out.approx_kl.detach(), reduce_op="mean")
                if kl > hp.target_kl:
                    break

        if logging:
            policy_loss, value_loss, entropy, approx_kl, clip_fraction = torch.stack(stats).mean(0)
            explained_var = 1 - (batch.returns - batch.values).var() / batch.returns.var()
            self.log_training(
                {
                    "train/policy_loss": policy_loss,
                    "train/value_loss": value_loss,
                    "train/entropy": entropy,
                    "train/approx_kl": approx_kl,
                    "train/clip_fraction": clip_fraction,
                    "train/explained_variance": explained_var,
                    "train/learning_rate": opt.param_groups[0]["lr"],
                }
            )
        return out.loss.detach()

    def minibatch_loss(
        self, obs: Tensor, actions: Tensor, logprobs: Tensor, advantages: Tensor, values: Tensor, returns: Tensor
    ) -> PPOLoss:
        """The networks' forward and the PPO objective on one minibatch: one function, so that
        ``compile_networks`` compiles the whole loss (and, through AOTAutograd, its backward)."""
        hp = self.hparams
        if hp.norm_adv:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        newlogprob, entropy, newvalue = self.agent.evaluate(obs, actions)
        return ppo_loss(
            newlogprob.float(),
            logprobs,
            advantages,
            newvalue.float(),
            values,
            returns,
            entropy.float(),
            hp.clip_coef,
            hp.clip_vloss,
            hp.ent_coef,
            hp.vf_coef,
        )

    def compile_networks(self, **compile_kwargs: Any) -> None:
        if not getattr(self, "_networks_compiled", False):
            self.minibatch_loss = torch.compile(self.minibatch_loss, **compile_kwargs)  # type: ignore[method-assign]
        super().compile_networks(**compile_kwargs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.adam(self.agent.parameters(), lr=self.hparams.learning_rate, eps=1e-5)
