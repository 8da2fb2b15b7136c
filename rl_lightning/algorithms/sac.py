"""Soft Actor-Critic (SAC) for continuous actions.

Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep Reinforcement Learning with
a Stochastic Actor", https://arxiv.org/abs/1801.01290, and "Soft Actor-Critic Algorithms and
Applications", https://arxiv.org/abs/1812.05905 (automatic entropy tuning, no value network).
Implementation as in Stable-Baselines3 and CleanRL: twin Q critics with Polyak-averaged targets, a
tanh-squashed Gaussian actor with the change-of-variables log-probability, the entropy coefficient
alpha tuned towards a target entropy of ``-|A|`` (or fixed), uniformly random actions for the first
``learning_starts`` env steps. Defaults are SB3's.

One Lightning training step is ``replay.phases_per_step`` collection phases (``train_freq`` vector
steps into the replay buffer), each followed by ``gradient_steps`` updates, each stepping three
optimizers (alpha, critics, actor, in SB3's order) through manual optimization, so Lightning's
precision plugins still apply. Grouping phases only pays Lightning's fixed cost per training step
(~1 ms) less often: each phase is collected after the previous phase's updates, as with one per step.

Actions are normalized: the actor outputs, and the critics and the replay buffer take, actions in
``[-1, 1]^d``; they are rescaled to the env's bounds on their way to the env, and ``forward`` returns
env units, as in SB3. Env actions are therefore always within bounds, whatever the exploration.

Deviations: none of substance. Time-limit truncation bootstraps from the final observation (SB3
does; CleanRL does not).

With ``run.population: N`` (docs/population.md) the actor, the critics and their targets are
``Population``s of N members and alpha is one per member; each member collects into and samples from
its own part of the replay buffer (``Replay(members=N)``), and one update steps every member on its own
batch (``members_call``, ``per_member``, ``members_step``): the same code as a run's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Literal

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import CONTINUOUS_CONTROL_REPLAY, DEFAULT_RUN, ReplayConfig, RunConfig
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.data.replay import Replay
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import check
from rl_lightning.networks.continuous import GSDEActor, QEnsemble, TanhGaussianActor, q_loss, to_env_units
from rl_lightning.networks.encoders import flat_dim
from rl_lightning.networks.mlp import Activation
from rl_lightning.networks.utils import polyak_update
from rl_lightning.validation import at_least_or, off_policy_args, positive


def soft_q_target(
    rewards: Tensor, discounts: Tensor, terminated: Tensor, next_q: Tensor, next_log_probs: Tensor, alpha: Tensor
) -> Tensor:
    """The soft Bellman target for ``[n, B]`` target-critic values at ``(s', a' ~ pi(s'))``:

    y = r + discount * (1 - terminated) * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))
    """
    next_v = next_q.min(0).values - alpha * next_log_probs
    return rewards + discounts * (1.0 - terminated) * next_v


def sac_actor_loss(q_pi: Tensor, log_probs: Tensor, alpha: Tensor) -> Tensor:
    """``mean(alpha * log pi(a|s) - min_i Q_i(s, a))`` with ``a ~ pi(s)`` reparameterized."""
    return (alpha * log_probs - q_pi.min(0).values).mean()


def alpha_loss(log_alpha: Tensor, log_probs: Tensor, target_entropy: float) -> Tensor:
    """``-mean(log alpha * (log pi(a|s) + target_entropy))`` (SB3; Haarnoja et al. 2018b, eq. 18, on
    log alpha): when the policy's entropy ``-log pi`` is below the target, the gradient raises alpha."""
    return -(log_alpha * (log_probs.detach() + target_entropy)).mean()


class SAC(RLModule):
    """SAC for continuous (``Box``) actions with finite bounds.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        run: Budget (``total_env_steps``) and evaluation rhythm.
        replay: Replay buffer, warm-up and the rhythm of collection phases and gradient steps.
        learning_rate: Adam learning rate of the actor, the critics and alpha.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target critics, updated after every gradient step
            (``target <- tau * online + (1 - tau) * target``; 1.0 copies).
        ent_coef: Entropy coefficient alpha: ``auto`` tunes it towards ``target_entropy``; a number
            fixes it.
        ent_coef_init: Initial alpha when tuned.
        target_entropy: Entropy target of the tuning; ``None`` means ``-|A|`` (action dimensions).
        use_sde: Generalized state-dependent exploration (gSDE, ``GSDEActor``): noise that is a function
            of the state, drawn anew per collection phase (and every ``sde_sample_freq`` steps), instead
            of independent noise every step; for sparse-reward tasks (MountainCarContinuous).
        sde_sample_freq: With ``use_sde``: collection steps between new exploration matrices; -1 only at
            the start of each collection phase.
        log_std_init: With ``use_sde``: the initial log-std of the exploration matrices.
        hidden_sizes: Hidden widths of the actor and of each critic.
        activation: Hidden activation of the MLPs.
    """

    action_spaces = (gym.spaces.Box,)
    bounded_actions = True
    image_observations = False  # MLPs on flat observations
    ddp_find_unused_parameters = True  # actor, critic and alpha backward passes reach disjoint parameters
    checkpointed_attributes = ("num_updates",)
    target_critic = True  # Polyak-averaged target critics (CrossQ has none)
    trains_populations = True
    member_hyperparameters = ("learning_rate", "tau")
    population_excludes = ("use_sde",)  # exploration matrices shared by the members

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        replay: ReplayConfig = CONTINUOUS_CONTROL_REPLAY,
        learning_rate: float = 3e-4,
        gamma: float = 0.99,
        tau: float = 0.005,
        ent_coef: float | Literal["auto"] = "auto",
        ent_coef_init: float = 1.0,
        target_entropy: float | None = None,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        log_std_init: float = -3.0,
        hidden_sizes: tuple[int, ...] = (256, 256),
        activation: Activation = "relu",
    ) -> None:
        super().__init__(env, run)
        self.configure_replay(replay)
        off_policy_args(learning_rate, gamma, tau, hidden_sizes, activation)
        check(
            ent_coef == "auto" or (isinstance(ent_coef, float | int) and ent_coef > 0),
            f"ent_coef must be 'auto' or a number > 0, got {ent_coef!r}.",
        )
        positive("ent_coef_init", ent_coef_init)
        at_least_or("sde_sample_freq", sde_sample_freq, 1, -1)
        self.tune_alpha = ent_coef == "auto"
        log_alpha = torch.tensor(math.log(ent_coef_init if self.tune_alpha else float(ent_coef)))
        if self.population > 1:
            log_alpha = log_alpha.repeat(self.population)  # one alpha per member
        if self.tune_alpha:  # a parameter or a buffer: in the state_dict (and checkpoints) either way
            self.log_alpha = nn.Parameter(log_alpha)
        else:
            self.register_buffer("log_alpha", log_alpha)
        self.num_updates = 0
        self.sde_steps = 0  # collection steps, for sde_sample_freq

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        obs_dim, act_dim = flat_dim(observation_space), int(action_space.shape[0])
        if self.population == 1:
            self.actor = self.build_actor(obs_dim, act_dim)
            self.critic = self.build_critic(obs_dim, act_dim)
        else:  # each member's networks as its run builds them: the actor, then the critics
            self.actor = self.make_population(lambda: self.build_actor(obs_dim, act_dim))
            self.critic = self.make_population(
                lambda: self.build_critic(obs_dim, act_dim), before=lambda: self.build_actor(obs_dim, act_dim)
            )
        if self.target_critic:
            self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_entropy = float(-act_dim if hp.target_entropy is None else hp.target_entropy)

    def build_actor(self, obs_dim: int, act_dim: int, norm: Callable[[int], nn.Module] | None = None) -> nn.Module:
        """The tanh-Gaussian actor, with gSDE if asked; ``norm(dim)`` before each of its linear layers."""
        hp = self.hparams
        if hp.use_sde:
            return GSDEActor(obs_dim, act_dim, hp.hidden_sizes, hp.activation, hp.log_std_init, norm)
        return TanhGaussianActor(obs_dim, act_dim, hp.hidden_sizes, hp.activation, norm)

    def build_critic(self, obs_dim: int, act_dim: int) -> QEnsemble:
        """Twin Q critics (``TQC``: quantile critics)."""
        return QEnsemble(obs_dim, act_dim, self.hparams.hidden_sizes, n=2, activation=self.hparams.activation)

    def build_experience(self) -> Replay:
        self.replay = Replay(
            self.replay_config, gamma=self.hparams.gamma, normalized_actions=True, members=self.population
        )
        return self.replay

    # ----------------------------------------------------------------------------------- acting
    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions in env units: ``tanh(mean)`` or a sample, rescaled to the action bounds."""
        actions = self.actor.mode(obs) if deterministic else self.actor.sample(obs)[0]
        return to_env_units(actions, self.action_low, self.action_high)

    def _explore(self, obs: Tensor) -> Tensor:
        """Normalized sampled actions, for the collector (one row per sub-env)."""
        if self.hparams.use_sde:
            self.sde_steps += 1
            if self.hparams.sde_sample_freq > 0 and self.sde_steps % self.hparams.sde_sample_freq == 0:
                self.actor.reset_noise(len(obs))
        return self.actor.sample(obs.to(self.device))[0].to(obs.device)

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` collection phases (``replay.phases_per_step``), each followed by its updates."""
        hp = self.hparams
        log = self.should_log()
        stats: list[Tensor] = []
        for _ in self.within_budget(iterations):
            if hp.use_sde:
                self.actor.reset_noise(self.env_config.num_envs)  # one exploration matrix per sub-env
            self.collect_phase(self._explore)
            for _ in range(self.replay_config.gradient_steps):
                if hp.use_sde and not self.graphs.enabled:  # drawn before the batch (a graph draws it inside)
                    self.actor.reset_noise()  # one matrix for this gradient step's batch, as in SB3
                out = self.update(self.replay.sample())
                self.num_updates += 1
                if log:
                    stats.append(out.clone())

        if log:
            loss_q_mean, loss_pi_mean, q_mean, entropy, alpha_mean = torch.stack(stats).mean(0)
            self.log_training(
                {
                    "train/critic_loss": loss_q_mean,
                    "train/actor_loss": loss_pi_mean,
                    "train/q_values": q_mean,
                    "train/entropy": entropy,  # -log pi of sampled actions (tanh-squashed, [-1, 1])
                    "train/ent_coef": alpha_mean,
                }
            )
        return out[:2]

    def update(self, b: ReplayBatch) -> Tensor:
        """One gradient step on the batch ``b``: ``batch_update`` (one CUDA graph with CUDA graphs on); a
        population's batch member-major, ``(N, B, ...)``."""
        fields = self.member_rows(b.obs, b.actions, b.rewards, b.discounts, b.terminated, b.next_obs)
        return self.run_update(self.batch_update, *fields)

    def batch_update(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, discounts: Tensor, terminated: Tensor, next_obs: Tensor
    ) -> Tensor:
        """One update of the temperature, the critics and the actor on a batch, and the target critics
        (one CUDA graph with CUDA graphs on). Returns the critic and actor losses, the mean Q-value,
        the entropy estimate and the temperature used, stacked."""
        hp = self.hparams
        actor_opt, critic_opt, *alpha_opt = self.optimizers()
        if hp.use_sde and self.graphs.enabled:
            self.actor.reset_noise()  # inside the graph, so that its replays draw new noise
        actions_pi, log_pi = self.members_call(self.actor, "sample", obs)
        alpha = self.log_alpha.detach().exp()  # this step's alpha: the value before its update
        if self.tune_alpha:
            target_entropy = self.target_entropy
            loss_alpha = self.per_member(lambda a, lp: alpha_loss(a, lp, target_entropy), self.log_alpha, log_pi)
            self.members_step(alpha_opt[0], loss_alpha)

        with torch.no_grad():
            next_actions, next_log_pi = self.members_call(self.actor, "sample", next_obs)
            next_q = self.members_call(self.critic_target, "forward", next_obs, next_actions)
            target = self.per_member(self.td_target, rewards, discounts, terminated, next_q, next_log_pi, alpha)
        q = self.members_call(self.critic, "forward", obs, actions)
        loss_q = self.per_member(self.critic_loss, q, target)
        self.members_step(critic_opt, loss_q)

        # The actor's gradient flows through the (just updated) critics into the actions only.
        self.critic.requires_grad_(False)
        q_pi = self.members_call(self.critic, "forward", obs, actions_pi)
        loss_pi = self.per_member(self.actor_loss, q_pi, log_pi, alpha)
        self.critic.requires_grad_(True)
        self.members_step(actor_opt, loss_pi)

        polyak_update(self.critic, self.critic_target, self.member_hparam("tau"))
        # A population's: each an (N,) tensor, logged per member (log_training).
        return torch.stack([loss_q, loss_pi, self.member_mean(q), -self.member_mean(log_pi), alpha]).detach()

    # The losses, as methods so that TQC can replace them (pure functions above).
    def td_target(
        self, rewards: Tensor, discounts: Tensor, terminated: Tensor, next_q: Tensor, next_log_pi: Tensor, alpha: Tensor
    ) -> Tensor:
        return soft_q_target(rewards, discounts, terminated, next_q, next_log_pi, alpha)

    def critic_loss(self, q: Tensor, target: Tensor) -> Tensor:
        return q_loss(q, target)

    def actor_loss(self, q_pi: Tensor, log_pi: Tensor, alpha: Tensor) -> Tensor:
        return sac_actor_loss(q_pi, log_pi, alpha)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        lr = self.hparams.learning_rate
        opts = [
            self.adam(self.actor.parameters(), lr, clipped=False),
            self.adam(self.critic.parameters(), lr, clipped=False),
        ]
        if self.tune_alpha:
            opts.append(self.adam([self.log_alpha], lr, clipped=False))
        return [self.with_member_learning_rates(opt) for opt in opts]
