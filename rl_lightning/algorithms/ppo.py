"""Proximal Policy Optimization (PPO-Clip).

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", https://arxiv.org/abs/1707.06347;
implementation details as in Huang et al. 2022, "The 37 Implementation Details of PPO" (CleanRL),
and Stable-Baselines3: orthogonal init, Adam eps 1e-5, per-minibatch advantage normalization,
global gradient-norm clipping, learning rate annealed linearly over env steps.

Deviations: none of substance. Time-limit truncation bootstraps from V(final observation) (SB3 does,
CleanRL does not).

One Lightning training step is one rollout: ``training_step`` collects it, then runs
``update_epochs x num_minibatches`` Adam steps on it through manual optimization
(``manual_backward``, ``clip_gradients``: precision plugins and DDP gradient sync still apply).
Lightning's fixed cost is paid once per rollout instead of once per minibatch, and
``trainer.global_step`` still counts optimizer steps.

With ``run.population: N`` (docs/population.md) the agent is a ``Population`` of N members, each its
own run: the rollout is laid out per member, each member shuffles its own minibatches and normalizes
its own advantages, every member's loss is computed at once under ``vmap`` and one backward and one
``PopulationAdam`` step update them all (``population_step``: gradients clipped per member); with
``target_kl`` a member past it stops its own epochs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms import on_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import DEFAULT_RUN, RunConfig
from rl_lightning.data.rollout import RolloutBatch, Rollouts
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import check
from rl_lightning.networks.mlp import Activation
from rl_lightning.networks.population import member_minibatches
from rl_lightning.optim import linear_schedule
from rl_lightning.validation import (
    actor_critic_loss_args,
    at_least_or,
    on_policy_args,
    positive,
    positive_or_none,
)


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
    clip_coef: float | Tensor,
    clip_vloss: bool,
    ent_coef: float | Tensor,
    vf_coef: float | Tensor,
) -> PPOLoss:
    """The PPO objective on one minibatch (advantages already normalized if wanted; the coefficients floats,
    or 0-d tensors: a population member's own under ``vmap``).

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


@on_policy.with_shared_args
class PPO(RLModule):
    """PPO for the actions of ``on_policy.ACTION_SPACES``. The hyperparameters that mean the same in
    every on-policy algorithm (``env``, ``run``, ``anneal_lr``, ``gamma``, ...) are described once, in
    ``on_policy.SHARED_ARGS``, which ``with_shared_args`` adds to these.

    Args:
        num_steps: Steps per sub-env per rollout; a rollout is ``num_envs * num_steps`` transitions.
        learning_rate: Adam learning rate (the start value when annealed).
        gae_lambda: GAE lambda, in [0, 1].
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``num_envs * num_steps``.
        clip_coef: Surrogate clipping epsilon (also the value clipping range with ``clip_vloss``).
        anneal_clip_coef: Anneal ``clip_coef`` linearly to 0 over ``total_env_steps`` (the RL Zoo's
            ``clip_range: lin_...``); not with CUDA graphs or ``compile``, which would keep the first value.
        clip_vloss: Clip the value loss around the rollout's values (off by default, as in SB3;
            Andrychowicz et al. 2021 found it does not help).
        norm_adv: Normalize advantages per minibatch.
        vf_coef: Value loss coefficient, on half the squared error (CleanRL's convention).
            Stable-Baselines3 and its zoo weight the whole squared error: their ``vf_coef`` c is 2c here.
        target_kl: Stop the update epochs of a rollout early once the approximate KL exceeds this
            (checked after each epoch); ``None`` never stops.
        hidden_sizes: Hidden layer widths of the actor and of the critic MLP (vector observations;
            image observations get the shared Nature CNN instead).
        orthogonal_init: Orthogonal initialization (the PPO convention of baselines, SB3 and CleanRL);
            ``False`` keeps PyTorch's default (SB3's ``ortho_init=False``, which its MuJoCo configs use).
        log_std_init: Initial log standard deviation of the Gaussian policy (continuous actions); with
            ``use_sde``, of the exploration matrices.
        use_sde: Generalized state-dependent exploration (gSDE, ``GSDEHead``; continuous actions):
            noise that is a linear function of the policy's features, one matrix per sub-env drawn at
            the start of each rollout, instead of independent noise every step.
        sde_sample_freq: With ``use_sde``: env steps between new exploration matrices within a
            rollout; -1 only at the start of each rollout.
    """

    action_spaces = on_policy.ACTION_SPACES
    trains_populations = True
    member_hyperparameters = (
        "learning_rate",
        "gamma",
        "gae_lambda",
        "clip_coef",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
    )
    population_excludes = ("normalize_obs", "normalize_reward", "use_sde")  # statistics, matrices shared

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        num_steps: int = 128,
        learning_rate: float = 2.5e-4,
        anneal_lr: bool = True,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        clip_coef: float = 0.2,
        anneal_clip_coef: bool = False,
        clip_vloss: bool = False,
        norm_adv: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        target_kl: float | None = None,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: Activation = "tanh",
        orthogonal_init: bool = True,
        log_std_init: float = 0.0,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        normalize_obs: bool = False,
        normalize_reward: bool = False,
    ) -> None:
        super().__init__(env, run)
        on_policy.rollout_epochs(self, num_steps, update_epochs, num_minibatches)
        for hp in self.members_hparams():  # each member's values (population_variants) checked as its run's
            on_policy_args(num_steps, hp["learning_rate"], hp["gamma"], hidden_sizes, activation)
            actor_critic_loss_args(hp["gae_lambda"], hp["ent_coef"], hp["vf_coef"], hp["max_grad_norm"])
            positive("clip_coef", hp["clip_coef"])
        self.clip_coef_factor = 1.0  # of clip_coef in this rollout's update (anneal_clip_coef)
        positive_or_none("target_kl", target_kl)
        at_least_or("sde_sample_freq", sde_sample_freq, 1, -1)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        on_policy.build_actor_critic(
            self,
            observation_space,
            action_space,
            orthogonal_init=hp.orthogonal_init,
            log_std_init=hp.log_std_init,
            sde_sample_freq=hp.sde_sample_freq if hp.use_sde else None,
        )

    def build_experience(self) -> Rollouts:
        # gSDE redraws its exploration matrices from Python: its acting is not graphed
        return on_policy.actor_critic_rollouts(self, graph_act=not self.hparams.use_sde)

    # ----------------------------------------------------------------------------------- acting
    forward = on_policy.actor_critic_forward  # actions for raw observations: the mode of the policy, or a sample

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` (always 1 here) rollouts, each followed by its update epochs."""
        hp = self.hparams
        opt = self.optimizers()
        logging = self.should_log()
        for _ in self.within_budget(iterations):
            if hp.use_sde:
                self.agent.head.reset_noise(self.env_config.num_envs)  # one exploration matrix per sub-env
            rollout = self.collect_rollout(self.agent)
            b = on_policy.gae_member_batch(self, rollout)
            if self.population > 1:
                self.updating = torch.ones(self.population, dtype=torch.bool, device=self.device)  # target_kl
            if hp.anneal_lr:
                self.anneal_learning_rate(opt, self.member_hparam("learning_rate"))
            if hp.anneal_clip_coef:
                self.clip_coef_factor = linear_schedule(1.0, 0.0, self.total_env_steps, self.env_steps)
            stats: list[Tensor] = []
            for _ in range(hp.update_epochs):
                for minibatch in self.minibatches(b):
                    out = self.run_update(self.minibatch_update, *minibatch)
                    if logging:  # ~15 us of stacking per minibatch, only on the steps that log
                        stats.append(torch.stack(out[1:]))
                if hp.target_kl is not None and self.kl_stops_epochs(out.approx_kl):
                    break

        if logging:
            policy_loss, value_loss, entropy, approx_kl, clip_fraction = torch.stack(stats).mean(0)
            self.log_training(
                {
                    "train/policy_loss": policy_loss,
                    "train/value_loss": value_loss,
                    "train/entropy": entropy,
                    "train/approx_kl": approx_kl,
                    "train/clip_fraction": clip_fraction,
                    "train/explained_variance": on_policy.explained_variance(b.returns, b.values),
                    "train/learning_rate": opt.param_groups[0]["lr"],
                }
            )
        return out.loss

    def kl_stops_epochs(self, approx_kl: Tensor) -> bool:
        """``target_kl``: whether the approximate KL of the epoch's last minibatch stops the rollout's update
        epochs. A population member past it stops its own (its updates masked from then on, ``updating``);
        the epochs stop once every member has."""
        # Same decision on every DDP rank that trains the member, or their optimizer steps would diverge.
        kl = approx_kl.detach()
        if self.data_parallel_ranks > 1:
            kl = self.trainer.strategy.reduce(kl, reduce_op="mean")
        if self.population == 1:
            return bool(kl > self.hparams.target_kl)
        self.updating &= kl <= self.hparams.target_kl
        return not bool(self.updating.any())

    def minibatches(self, b: RolloutBatch) -> Iterator[tuple[Tensor, ...]]:
        """One epoch's minibatches of the rollout, each the arguments of ``minibatch_update``: shuffled
        transitions, or the whole rollout as it is when ``num_minibatches`` is 1 (a mean ignores order).
        A population's: each member's own transitions, shuffled by each member apart."""
        if self.hparams.num_minibatches == 1:
            yield b.obs, b.actions, b.logprobs, b.advantages, b.values, b.returns
            return
        if self.population > 1:
            fields = (b.obs, b.actions, b.logprobs, b.advantages, b.values, b.returns)
            yield from member_minibatches(fields, self.hparams.num_minibatches)
            return
        for mb_inds in torch.randperm(self.env_steps_per_iteration, device=self.device).split(self.minibatch_size):
            yield tuple(x[mb_inds] for x in (b.obs, b.actions, b.logprobs, b.advantages, b.values, b.returns))

    def minibatch_update(self, *minibatch: Tensor) -> PPOLoss:
        """One minibatch's loss (``minibatch_loss``'s arguments) and optimizer step (one CUDA graph with
        CUDA graphs on). A population's: every member's loss on its own minibatch at once, each field
        ``(members,)``; its ``loss`` the sum over the members that did not diverge."""
        if self.population > 1:  # a member's own values of the hyperparameters the members vary (population_variants)
            out = self.agent.map(self.agent_loss, *minibatch, **self.loss_coefficients())
            max_grad_norm = self.member_hparam("max_grad_norm")
            loss = self.population_step(self.optimizers(), out.loss, max_grad_norm, self.updating)
            return PPOLoss(loss, *(t.detach() for t in out[1:]))
        out = self.minibatch_loss(*minibatch)
        self.gradient_step(self.optimizers(), out.loss, self.hparams.max_grad_norm)
        return PPOLoss(*(t.detach() for t in out))

    def minibatch_loss(self, *minibatch: Tensor) -> PPOLoss:
        """The networks' forward and the PPO objective on one minibatch (``agent_loss``'s arguments after
        the agent): one function, so that ``compile_networks`` compiles the whole loss (and, through
        AOTAutograd, its backward)."""
        return self.agent_loss(self.agent, *minibatch)

    def agent_loss(
        self,
        agent: Any,
        obs: Tensor,
        actions: Tensor,
        logprobs: Tensor,
        advantages: Tensor,
        values: Tensor,
        returns: Tensor,
        *memory: Tensor,
        **coefficients: float | Tensor,
    ) -> PPOLoss:
        """The PPO objective of ``agent`` on one minibatch: the module's own agent (``minibatch_loss``), or a
        population member (under ``vmap``, ``minibatch_update``, with its own ``loss_coefficients`` as
        ``coefficients``). ``memory``: what a recurrent agent's ``evaluate`` needs besides observations
        and actions (``RecurrentPPO``)."""
        hp = self.hparams
        c = coefficients or self.loss_coefficients()
        if hp.norm_adv:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        newlogprob, entropy, newvalue = agent.evaluate(obs, actions, *memory)
        return ppo_loss(
            newlogprob.float(),
            logprobs,
            advantages,
            newvalue.float(),
            values,
            returns,
            entropy.float(),
            c["clip_coef"],
            hp.clip_vloss,
            c["ent_coef"],
            c["vf_coef"],
        )

    @property
    def clip_coef(self) -> float | Tensor:
        """The clipping range of this rollout's update: ``clip_coef``, annealed with ``anneal_clip_coef``; an
        ``(N,)`` tensor where the members vary it (``run.population_variants``)."""
        return self.member_hparam("clip_coef") * self.clip_coef_factor

    def loss_coefficients(self) -> dict[str, float | Tensor]:
        """The PPO objective's coefficients in this rollout's update: floats, or ``(N,)`` tensors (one value
        per member) for those the members vary."""
        return dict(
            clip_coef=self.clip_coef, ent_coef=self.member_hparam("ent_coef"), vf_coef=self.member_hparam("vf_coef")
        )

    def enable_cuda_graphs(self) -> None:
        check(not self.hparams.anneal_clip_coef, "anneal_clip_coef does not run as CUDA graphs; set it false.")
        super().enable_cuda_graphs()

    def compile_networks(self, **compile_kwargs: Any) -> None:
        check(not self.hparams.anneal_clip_coef, "anneal_clip_coef does not run compiled; set it false.")
        if not getattr(self, "_networks_compiled", False):
            self.minibatch_loss = torch.compile(self.minibatch_loss, **compile_kwargs)  # type: ignore[method-assign]
        super().compile_networks(**compile_kwargs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.with_member_learning_rates(
            self.adam(self.agent.parameters(), lr=self.hparams.learning_rate, eps=1e-5)
        )
