"""Advantage Actor-Critic (A2C), the synchronous variant of A3C.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning",
https://arxiv.org/abs/1602.01783; synchronous, batched over vector envs as in OpenAI Baselines and
Stable-Baselines3 (``a2c/a2c.py``), whose defaults these are: 5-step rollouts, ``gae_lambda=1``
(plain n-step returns; lower it for GAE), RMSprop (alpha 0.99, eps 1e-5), value loss as the mean
squared error weighted by ``vf_coef=0.5``, gradient-norm clipping at 0.5, no advantage normalization.

Deviations: none in the update. Time-limit truncation bootstraps from V(final observation), as in
SB3. RMSprop is torch's (eps outside the square root), as SB3's default (not its ``RMSpropTFLike``).

Speed: a 5 x 8 rollout is 40 env steps and one small update, cheaper than Lightning's fixed cost
of a training step. So one Lightning training step runs ``rollouts_per_step`` rollout-update pairs,
each rollout collected after the previous update, by the current policy: the same sequence of
updates, and the same evaluation points, as one rollout per training step (``rollouts_per_step=1``);
only the logging interval changes.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from rl_lightning.algorithms import on_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import DEFAULT_RUN, RunConfig
from rl_lightning.envs.make import EnvConfig
from rl_lightning.networks.mlp import Activation
from rl_lightning.validation import actor_critic_loss_args, at_least, on_policy_args, one_of


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
    ent_coef: float | Tensor,
    vf_coef: float | Tensor,
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


@on_policy.with_shared_args
class A2C(RLModule):
    """A2C for the actions of ``on_policy.ACTION_SPACES``. The hyperparameters that mean the same in
    every on-policy algorithm (``env``, ``run``, ``anneal_lr``, ``gamma``, ...) are described once, in
    ``on_policy.SHARED_ARGS``, which ``with_shared_args`` adds to these.

    Args:
        num_steps: Steps per sub-env per rollout (the n of n-step returns); one update per rollout.
        learning_rate: Optimizer learning rate (the start value when annealed).
        gae_lambda: GAE lambda, in [0, 1]; 1 gives n-step returns bootstrapped at the rollout end.
        vf_coef: Value loss coefficient.
        norm_adv: Normalize advantages per rollout.
        optimizer: ``rmsprop`` (alpha 0.99, eps 1e-5: A3C's and SB3's) or ``adam`` (eps 1e-5).
        rollouts_per_step: Rollout-update pairs per Lightning training step (speed only: the
            updates are the same; metrics are logged per training step).
        hidden_sizes: Hidden layer widths of the actor and of the critic MLP.
    """

    action_spaces = on_policy.ACTION_SPACES
    trains_populations = True
    member_hyperparameters = ("learning_rate", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm")
    population_excludes = ("normalize_obs", "normalize_reward", "use_sde")  # statistics, matrices shared

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
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
        activation: Activation = "tanh",
        normalize_obs: bool = False,
        normalize_reward: bool = False,
    ) -> None:
        super().__init__(env, run)
        self.env_steps_per_iteration = self.env_config.num_envs * num_steps  # one rollout
        self.iterations_per_step = rollouts_per_step
        for hp in self.members_hparams():  # each member's values (population_variants) checked as its run's
            on_policy_args(num_steps, hp["learning_rate"], hp["gamma"], hidden_sizes, activation)
            actor_critic_loss_args(hp["gae_lambda"], hp["ent_coef"], hp["vf_coef"], hp["max_grad_norm"])
        at_least("rollouts_per_step", rollouts_per_step, 1)
        one_of("optimizer", optimizer, ("rmsprop", "adam"))

    build_networks = on_policy.build_actor_critic  # ActorCritic(hidden_sizes, activation), normalizers
    build_experience = on_policy.actor_critic_rollouts  # num_steps vector steps per rollout

    # ----------------------------------------------------------------------------------- acting
    forward = on_policy.actor_critic_forward  # actions for raw observations: the mode of the policy, or a sample

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` rollouts (``rollouts_per_step``), each followed by one update."""
        opt = self.optimizers()
        for b in on_policy.rollout_batches(self, iterations, lambda rollout: on_policy.gae_member_batch(self, rollout)):
            out = self.run_update(self.rollout_update, b.obs, b.actions, b.advantages, b.returns)

        if self.should_log():  # the last update of the step
            self.log_training(
                {
                    "train/policy_loss": out.policy_loss,
                    "train/value_loss": out.value_loss,
                    "train/entropy": out.entropy,
                    "train/explained_variance": on_policy.explained_variance(b.returns, b.values),
                    "train/learning_rate": opt.param_groups[0]["lr"],
                }
            )
        return out.loss

    def rollout_update(self, obs: Tensor, actions: Tensor, advantages: Tensor, returns: Tensor) -> A2CLoss:
        """The rollout's loss and optimizer step (one CUDA graph with CUDA graphs on). A population's: every
        member's loss on its own rollout at once, each field ``(members,)``, its ``loss`` the sum over the
        members that did not diverge (``population_step``)."""
        hp = self.hparams
        if self.population > 1:  # a member's own values of the hyperparameters the members vary (population_variants)
            out = self.agent.map(self.agent_loss, obs, actions, advantages, returns, **self.loss_coefficients())
            loss = self.population_step(self.optimizers(), out.loss, self.member_hparam("max_grad_norm"))
            return A2CLoss(loss, *(t.detach() for t in out[1:]))
        out = self.agent_loss(self.agent, obs, actions, advantages, returns)
        self.gradient_step(self.optimizers(), out.loss, hp.max_grad_norm)
        return A2CLoss(*(t.detach() for t in out))

    def agent_loss(
        self, agent: Any, obs: Tensor, actions: Tensor, advantages: Tensor, returns: Tensor, **coefficients: Any
    ) -> A2CLoss:
        """The A2C objective of ``agent`` on a rollout: the module's own, or a population member's (under ``vmap``,
        with its own ``loss_coefficients`` as ``coefficients``)."""
        c = coefficients or self.loss_coefficients()
        if self.hparams.norm_adv:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        logprobs, entropy, values = agent.evaluate(obs, actions)
        return a2c_loss(
            logprobs.float(), advantages, values.float(), returns, entropy.float(), c["ent_coef"], c["vf_coef"]
        )

    def loss_coefficients(self) -> dict[str, float | Tensor]:
        """The A2C objective's coefficients: floats, or ``(N,)`` tensors (one value per member) for those the
        members vary (``run.population_variants``)."""
        return dict(ent_coef=self.member_hparam("ent_coef"), vf_coef=self.member_hparam("vf_coef"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.hparams.optimizer == "rmsprop":
            # foreach: torch picks it by default on CUDA only and loops over the tensors on CPU (no
            # fused RMSprop exists); one kernel per op for all tensors is faster on CPU too.
            lr, capturable = self.hparams.learning_rate, self.graphs.enabled and self.device.type == "cuda"
            rmsprop = torch.optim.RMSprop(
                self.agent.parameters(),
                lr=torch.tensor(lr, device=self.device) if capturable else lr,  # a tensor: annealed in place
                alpha=0.99,
                eps=1e-5,
                foreach=True,
                capturable=capturable,
            )
            return self.with_member_learning_rates(rmsprop)
        return self.with_member_learning_rates(
            self.adam(self.agent.parameters(), lr=self.hparams.learning_rate, eps=1e-5)
        )
