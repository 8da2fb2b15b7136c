"""Twin Delayed Deep Deterministic policy gradient (TD3), and the deterministic actor-critic DDPG shares.

Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods",
https://arxiv.org/abs/1802.09477. TD3 is DDPG (``rl_lightning.algorithms.ddpg``) with three changes,
each a hyperparameter or class attribute here, so DDPG is this class with them switched off:

- clipped double-Q: ``n_critics = 2`` critics, the target takes their minimum;
- delayed policy updates: the actor and the targets are updated every ``policy_frequency``
  critic updates;
- target policy smoothing: clipped Gaussian noise (``target_policy_noise``, ``target_noise_clip``)
  on the target actor's actions.

Implementation as in Stable-Baselines3 (whose defaults these are) and CleanRL: Gaussian exploration
noise of std ``exploration_noise`` (relative to half the action range), uniformly random actions for
the first ``learning_starts`` env steps, Polyak-averaged targets, the actor maximizing ``Q_1``.
Actions are normalized to ``[-1, 1]`` inside, as in SAC (``rl_lightning.algorithms.sac``);
``forward`` returns env units.

One Lightning training step is ``replay.phases_per_step`` collection phases (``train_freq`` vector
steps into the replay buffer), each followed by ``gradient_steps`` critic updates (manual
optimization, two optimizers); each phase is collected after the previous phase's updates, as with
one per step.

Deviations: none of substance. The delay counts gradient steps over the whole run (SB3's
``_n_updates``; CleanRL counts env steps). Time-limit truncation bootstraps from the final
observation (SB3 does; CleanRL does not).

``run.population: N`` trains N seeds as one batched model as SAC does (docs/population.md): the
updates are one code for a run and a population.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import CONTINUOUS_CONTROL_REPLAY, DEFAULT_RUN, ReplayConfig, RunConfig
from rl_lightning.data.replay import Replay
from rl_lightning.envs.make import EnvConfig
from rl_lightning.exploration import NoiseType, action_noise
from rl_lightning.networks.continuous import DeterministicActor, QEnsemble, q_loss, to_env_units
from rl_lightning.networks.encoders import flat_dim
from rl_lightning.networks.mlp import Activation
from rl_lightning.networks.utils import polyak_update
from rl_lightning.validation import at_least, non_negative, off_policy_args


def smoothed_target_actions(next_actions: Tensor, noise: Tensor, noise_clip: float) -> Tensor:
    """Target policy smoothing: ``clip(mu_target(s') + clip(noise, -c, c), -1, 1)`` in normalized
    units (``noise ~ N(0, target_policy_noise^2)``)."""
    return (next_actions + noise.clamp(-noise_clip, noise_clip)).clamp(-1.0, 1.0)


def td3_target(rewards: Tensor, discounts: Tensor, terminated: Tensor, next_q: Tensor) -> Tensor:
    """``y = r + discount * (1 - terminated) * min_i Q_target_i(s', a')`` for ``[n, B]`` target values
    (with one critic, DDPG's target)."""
    return rewards + discounts * (1.0 - terminated) * next_q.min(0).values


def deterministic_actor_loss(q1: Tensor) -> Tensor:
    """``-mean Q_1(s, mu(s))``: the deterministic policy gradient (Silver et al. 2014)."""
    return -q1.mean()


class TD3(RLModule):
    """TD3 for continuous (``Box``) actions with finite bounds.

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        run: Budget (``total_env_steps``) and evaluation rhythm.
        replay: Replay buffer, warm-up and the rhythm of collection phases and gradient steps.
        learning_rate: Adam learning rate of the actor and the critics.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target networks (``target <- tau * online + (1 - tau) *
            target``; 1.0 copies).
        exploration_noise: Scale (sigma) of the noise added to the actor's actions during collection,
            relative to half the action range (0.1 adds 10 % of it).
        noise_type: ``normal`` (i.i.d. Gaussian), ``ornstein_uhlenbeck`` (temporally correlated, reset
            at episode ends) or ``pink`` (1/f colored noise over each episode); see
            ``rl_lightning.exploration``. Stateful noise is saved with checkpoints.
        policy_frequency: Critic updates per actor and target update (TD3's delay).
        target_policy_noise: Std of the smoothing noise on the target actor's actions (relative to
            half the action range).
        target_noise_clip: The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``.
        hidden_sizes: Hidden widths of the actor and of each critic.
        activation: Hidden activation of the MLPs.
    """

    action_spaces = (gym.spaces.Box,)
    bounded_actions = True
    image_observations = False  # MLPs on flat observations
    ddp_find_unused_parameters = True  # actor and critic backward passes reach disjoint parameters
    checkpointed_attributes = ("num_updates",)
    n_critics = 2  # clipped double-Q (DDPG: 1)
    trains_populations = True  # run.population: as SAC's (docs/population.md)
    member_hyperparameters = ("learning_rate", "tau")

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        replay: ReplayConfig = CONTINUOUS_CONTROL_REPLAY,
        learning_rate: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        exploration_noise: float = 0.1,
        noise_type: NoiseType = "normal",
        policy_frequency: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        hidden_sizes: tuple[int, ...] = (400, 300),
        activation: Activation = "relu",
    ) -> None:
        super().__init__(env, run)
        self.configure_replay(replay)
        # TD3's three changes, as attributes: DDPG fixes them, so its hparams (under the CLI) lack them.
        self.policy_frequency, self.target_policy_noise = policy_frequency, target_policy_noise
        self.target_noise_clip = target_noise_clip
        self.num_updates = 0  # critic updates so far: drives the policy delay
        off_policy_args(learning_rate, gamma, tau, hidden_sizes, activation)
        at_least("policy_frequency", policy_frequency, 1)
        non_negative("exploration_noise", exploration_noise)
        non_negative("target_policy_noise", target_policy_noise)
        non_negative("target_noise_clip", target_noise_clip)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        obs_dim, act_dim = flat_dim(observation_space), int(action_space.shape[0])

        def actor() -> DeterministicActor:
            return DeterministicActor(obs_dim, act_dim, hp.hidden_sizes, hp.activation)

        def critic() -> QEnsemble:
            return QEnsemble(obs_dim, act_dim, hp.hidden_sizes, n=self.n_critics, activation=hp.activation)

        if self.population == 1:
            self.actor, self.critic = actor(), critic()
        else:  # each member's networks as its run builds them: the actor, then the critics
            self.actor, self.critic = self.make_population(actor), self.make_population(critic, before=actor)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        # A stateful noise process (None for i.i.d. Gaussian noise): buffers, so in checkpoints. One per
        # sub-env (a population's: all its members').
        sub_envs = self.env_config.num_envs * self.population
        self.noise = action_noise(hp.noise_type, sub_envs, act_dim, hp.exploration_noise)

    def build_experience(self) -> Replay:
        on_episode_end = self.noise.reset if self.noise is not None else None  # a new noise process per episode
        self.replay = Replay(
            self.replay_config,
            gamma=self.hparams.gamma,
            normalized_actions=True,
            on_episode_end=on_episode_end,
            members=self.population,
        )
        return self.replay

    # ----------------------------------------------------------------------------------- acting
    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions in env units: ``mu(s)``, or with exploration noise."""
        actions = self.actor(obs) if deterministic else self._noisy(self.actor(obs))
        return to_env_units(actions, self.action_low, self.action_high)

    def _explore(self, obs: Tensor) -> Tensor:
        """Normalized noisy actions, for the collector (one row per sub-env)."""
        actions = self.actor(obs.to(self.device))
        if self.noise is not None:
            return (actions + self.noise()).clamp(-1.0, 1.0).to(obs.device)
        return self._noisy(actions).to(obs.device)

    def _noisy(self, actions: Tensor) -> Tensor:
        noise = torch.randn_like(actions) * self.hparams.exploration_noise
        return (actions + noise).clamp(-1.0, 1.0)

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` collection phases (``replay.phases_per_step``), each followed by its updates."""
        log = self.should_log()
        critic_stats: list[Tensor] = []
        actor_stats: list[Tensor] = []
        for _ in self.within_budget(iterations):
            self.collect_phase(self._explore)
            for _ in range(self.replay_config.gradient_steps):
                b = self.replay.sample()
                obs, *fields = self.member_rows(b.obs, b.actions, b.rewards, b.discounts, b.terminated, b.next_obs)
                critic_out = self.run_update(self.critic_update, obs, *fields)
                self.num_updates += 1
                if log:
                    critic_stats.append(critic_out.clone())
                if self.num_updates % self.policy_frequency == 0:
                    loss_pi = self.run_update(self.actor_update, obs)
                    if log:
                        actor_stats.append(loss_pi.clone())

        if log:
            loss_q_mean, q_mean = torch.stack(critic_stats).mean(0)
            metrics = {"train/critic_loss": loss_q_mean, "train/q_values": q_mean}
            if actor_stats:
                metrics["train/actor_loss"] = torch.stack(actor_stats).mean(0)
            self.log_training(metrics)
        return critic_out[0]

    def critic_update(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, discounts: Tensor, terminated: Tensor, next_obs: Tensor
    ) -> Tensor:
        """One critic update on a batch (one CUDA graph with CUDA graphs on): the loss and the mean
        Q-value, stacked; a population's batch member-major ``(N, B, ...)``, each an ``(N,)`` tensor
        (``members_call``, ``per_member``, ``members_step``: SAC's population notes)."""
        with torch.no_grad():
            next_actions = self.members_call(self.actor_target, "forward", next_obs)
            if self.target_policy_noise > 0:
                noise = torch.randn_like(next_actions) * self.target_policy_noise
                next_actions = smoothed_target_actions(next_actions, noise, self.target_noise_clip)
            next_q = self.members_call(self.critic_target, "forward", next_obs, next_actions)
            target = self.per_member(td3_target, rewards, discounts, terminated, next_q)
        q = self.members_call(self.critic, "forward", obs, actions)
        loss_q = self.per_member(q_loss, q, target)
        self.members_step(self.optimizers()[1], loss_q)
        return torch.stack([loss_q, self.member_mean(q)]).detach()

    def actor_update(self, obs: Tensor) -> Tensor:
        """The delayed actor update and the target networks' (one CUDA graph with CUDA graphs on)."""
        # The actor's gradient flows through the critic into the actions only.
        self.critic.requires_grad_(False)
        q_1 = self.members_call(self.critic, "forward", obs, self.members_call(self.actor, "forward", obs), first=1)
        loss_pi = self.per_member(lambda q: deterministic_actor_loss(q[0]), q_1)
        self.critic.requires_grad_(True)
        self.members_step(self.optimizers()[0], loss_pi)
        tau = self.member_hparam("tau")
        polyak_update(self.critic, self.critic_target, tau)
        polyak_update(self.actor, self.actor_target, tau)
        return loss_pi.detach()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        lr = self.hparams.learning_rate
        return [
            self.with_member_learning_rates(self.adam(self.actor.parameters(), lr, clipped=False)),
            self.with_member_learning_rates(self.adam(self.critic.parameters(), lr, clipped=False)),
        ]
