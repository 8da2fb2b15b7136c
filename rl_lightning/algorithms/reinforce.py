"""REINFORCE: the Monte-Carlo policy gradient, optionally with a learned value baseline.

Williams 1992, "Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement
Learning", https://doi.org/10.1007/BF00992696; Sutton & Barto 2018, sections 13.3-13.4 (with
baseline). One gradient step per rollout on

    loss = -mean_t( (G_t - b(s_t)) * log pi(a_t|s_t) ) + vf_coef * mean_t( (G_t - V(s_t))^2 )

with ``G_t`` the discounted return from step t to the end of its episode, and ``b = V`` with
``baseline=True`` (else ``b = 0``); the weights ``G_t - b(s_t)`` are normalized per rollout with
``norm_returns`` (without a baseline that subtracts the batch-mean return, a constant baseline).

Whole episodes from fixed-length rollouts: sub-envs are never reset between rollouts, a rollout is
``num_steps`` vector steps, and only the steps whose episode ends inside the rollout enter the
update, each with its exact return-to-go (rewards from that step to the episode end, all collected
by the current policy; a time-limit truncation bootstraps from V(final observation), 0 without a
baseline). A sub-env's unfinished tail is dropped; its episode goes on in the next rollout, where
the remaining steps have complete returns. Cost: dropped samples (their share is logged as
``rollout/kept_fraction``), and a selection bias, since a step is kept only if its episode ends soon
enough; both shrink as ``num_steps`` grows past the episode length, so make rollouts a few episodes
long. Rejected alternatives: bootstrapping the tails from V (no longer Monte-Carlo: that is A2C with
``gae_lambda=1``), or resetting every sub-env per rollout and waiting for all to finish (rollouts of
variable length break fixed env-step epochs and equal batch counts across DDP ranks).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms import on_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import DEFAULT_RUN, RunConfig
from rl_lightning.data.rollout import episode_batch
from rl_lightning.envs.make import EnvConfig
from rl_lightning.networks.mlp import Activation
from rl_lightning.validation import non_negative, on_policy_args, positive_or_none


class ReinforceLoss(NamedTuple):
    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor


def reinforce_loss(
    logprobs: Tensor,
    weights: Tensor,
    values: Tensor | None,
    returns: Tensor,
    vf_coef: float,
) -> ReinforceLoss:
    """The REINFORCE objective on the kept steps of one rollout (``weights``, ``returns`` constant).

    L_pi = -mean(w * log pi(a|s))          w = G (or G - V(s), normalized or not)
    L_v  = mean((G - V(s))^2)              0 without a baseline (``values=None``)
    loss = L_pi + vf_coef * L_v

    Means are sums over ``max(n, 1)``, so a rollout without a finished episode gives a zero loss
    (still a backward pass: DDP ranks must stay in step).
    """
    n = max(logprobs.shape[0], 1)
    policy_loss = -(weights * logprobs).sum() / n
    value_loss = (returns - values).pow(2).sum() / n if values is not None else returns.new_zeros(())
    return ReinforceLoss(policy_loss + vf_coef * value_loss, policy_loss, value_loss)


REINFORCE_RUN = dataclasses.replace(DEFAULT_RUN, total_env_steps=500_000)


@on_policy.with_shared_args
class REINFORCE(RLModule):
    """REINFORCE for the actions of ``on_policy.ACTION_SPACES``. The hyperparameters that mean the same in
    every on-policy algorithm (``env``, ``run``, ``anneal_lr``, ``gamma``, ...) are described once, in
    ``on_policy.SHARED_ARGS``, which ``with_shared_args`` adds to these.

    Args:
        num_steps: Steps per sub-env per rollout; one update per rollout. Make it a few episodes
            long: steps whose episode does not end inside the rollout are dropped.
        learning_rate: Adam learning rate (the start value when annealed).
        baseline: Learn a state-value baseline V(s) and weight log-probabilities by ``G - V(s)``;
            ``False`` is Williams' plain REINFORCE (then nothing bootstraps a time limit: the
            last steps of an episode cut by it get small returns, as if they had failed).
        norm_returns: Normalize the weights (``G`` or ``G - V``) to zero mean, unit std per rollout.
        vf_coef: Value loss coefficient (with ``baseline``).
        max_grad_norm: Global gradient-norm clipping threshold; ``None`` does not clip.
        hidden_sizes: Hidden layer widths of the policy (and baseline) MLP.
    """

    action_spaces = on_policy.ACTION_SPACES

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = REINFORCE_RUN,
        num_steps: int = 500,
        learning_rate: float = 3e-3,
        anneal_lr: bool = True,
        gamma: float = 0.99,
        baseline: bool = True,
        norm_returns: bool = True,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = None,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: Activation = "tanh",
        normalize_obs: bool = False,
        normalize_reward: bool = False,
    ) -> None:
        super().__init__(env, run)
        self.env_steps_per_iteration = self.env_config.num_envs * num_steps  # one rollout
        on_policy_args(num_steps, learning_rate, gamma, hidden_sizes, activation)
        non_negative("vf_coef", vf_coef)
        positive_or_none("max_grad_norm", max_grad_norm)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        on_policy.build_actor_critic(self, observation_space, action_space, critic=self.hparams.baseline)

    build_experience = on_policy.actor_critic_rollouts  # num_steps vector steps per rollout

    # ----------------------------------------------------------------------------------- acting
    forward = on_policy.actor_critic_forward  # actions for raw observations: the mode of the policy, or a sample

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` (always 1 here) rollouts, each followed by one gradient step."""
        hp = self.hparams
        opt = self.optimizers()
        # the steps whose episode ends inside the rollout
        for b in on_policy.rollout_batches(self, iterations, lambda rollout: episode_batch(rollout, hp.gamma)):
            weights = b.advantages  # G - V, or G without a baseline (V = 0)
            if hp.norm_returns and weights.shape[0] > 1:
                weights = (weights - weights.mean()) / (weights.std() + 1e-8)
            logprobs, _, values = self.agent.evaluate(b.obs, b.actions)
            out = reinforce_loss(
                logprobs.float(), weights, values.float() if hp.baseline else None, b.returns, hp.vf_coef
            )
            self.gradient_step(opt, out.loss, hp.max_grad_norm)

        if self.should_log():
            metrics = {
                "train/policy_loss": out.policy_loss.detach(),
                "rollout/kept_fraction": b.obs.shape[0] / self.env_steps_per_iteration,
                "train/learning_rate": opt.param_groups[0]["lr"],
            }
            if hp.baseline:
                metrics["train/value_loss"] = out.value_loss.detach()
                metrics["train/explained_variance"] = on_policy.explained_variance(b.returns, b.values)
            self.log_training(metrics)
        return out.loss.detach()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.adam(self.agent.parameters(), lr=self.hparams.learning_rate, eps=1e-5)
