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
Actions are normalized to ``[-1, 1]`` inside (see ``off_policy``); ``forward`` returns env units.

One Lightning training step is ``phases_per_step`` collection phases (``train_freq`` vector steps
into the replay buffer), each followed by ``gradient_steps`` critic updates (manual optimization,
two optimizers); each phase is collected after the previous phase's updates, as with one per step.

Deviations: none of substance. The delay counts gradient steps over the whole run (SB3's
``_n_updates``; CleanRL counts env steps). Time-limit truncation bootstraps from the final
observation (SB3 does; CleanRL does not).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.algorithms import off_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.data.replay import ReplayBuffer
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import check
from rl_lightning.networks.continuous import DeterministicActor, QEnsemble, to_env_units
from rl_lightning.networks.mlp import ACTIVATIONS
from rl_lightning.networks.utils import polyak_update


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
        total_env_steps: Training budget in env steps (all ranks together).
        buffer_size: Replay capacity in transitions, per rank.
        learning_rate: Adam learning rate of the actor and the critics.
        batch_size: Transitions per gradient step.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target networks (``target <- tau * online + (1 - tau) *
            target``; 1.0 copies).
        learning_starts: Env steps of uniformly random actions before the first gradient step (all
            ranks together); at most ``total_env_steps``.
        train_freq: Vector steps per collection phase (``train_freq * env.num_envs`` env steps per
            rank); each phase is followed by ``gradient_steps`` updates.
        gradient_steps: Critic updates after each collection phase.
        phases_per_step: Collection phases (each followed by its updates) per Lightning training step
            (speed only: the run is the same; metrics are logged per training step).
        exploration_noise: Std of the Gaussian noise added to the actor's actions during collection,
            relative to half the action range (0.1 adds 10 % of it).
        policy_frequency: Critic updates per actor and target update (TD3's delay).
        target_policy_noise: Std of the smoothing noise on the target actor's actions (relative to
            half the action range).
        target_noise_clip: The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``.
        hidden_sizes: Hidden widths of the actor and of each critic.
        activation: Hidden activation: ``relu``, ``tanh``, ``elu`` or ``silu``.
        save_replay_buffer: Save the replay buffer with checkpoints (one of 64 MiB or more in a side
            file ``<checkpoint>.replay-<env step>.pt`` next to it), so a resumed run continues with the
            same contents instead of refilling it.
        buffer_on_cpu: Keep the replay buffer in host memory even when training on an accelerator.
        env_steps_per_epoch: Env steps per Lightning epoch (all ranks); one evaluation per epoch.
        eval_episodes: Deterministic evaluation episodes (no exploration noise) per evaluation.
    """

    action_spaces = (gym.spaces.Box,)
    ddp_find_unused_parameters = True  # actor, critic (and alpha) backward passes reach disjoint parameters
    n_critics = 2  # clipped double-Q (DDPG: 1)

    def __init__(
        self,
        env: EnvConfig | None = None,
        total_env_steps: int = 1_000_000,
        buffer_size: int = 1_000_000,
        learning_rate: float = 1e-3,
        batch_size: int = 256,
        gamma: float = 0.99,
        tau: float = 0.005,
        learning_starts: int = 100,
        train_freq: int = 1,
        gradient_steps: int = 1,
        phases_per_step: int = 10,
        exploration_noise: float = 0.1,
        policy_frequency: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        hidden_sizes: tuple[int, ...] = (400, 300),
        activation: str = "relu",
        save_replay_buffer: bool = False,
        buffer_on_cpu: bool = False,
        env_steps_per_epoch: int = 10_000,
        eval_episodes: int = 20,
    ) -> None:
        super().__init__(env, total_env_steps, env_steps_per_epoch, eval_episodes)
        self.save_hyperparameters()
        self.automatic_optimization = False
        # TD3's three changes, as attributes: DDPG fixes them, so its hparams (under the CLI) lack them.
        self.policy_frequency, self.target_policy_noise = policy_frequency, target_policy_noise
        self.target_noise_clip = target_noise_clip
        self._check_hparams()
        self.replay: ReplayBuffer | None = None
        self._replay_state: dict[str, Any] | None = None  # from a checkpoint, until the buffer exists
        self.num_updates = 0  # critic updates so far: drives the policy delay

    def _check_hparams(self) -> None:
        hp = self.hparams
        off_policy.check_hparams(hp, self.total_env_steps)
        check(hp.activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}, got {hp.activation!r}.")
        check(self.policy_frequency >= 1, f"policy_frequency must be >= 1, got {self.policy_frequency}.")
        check(hp.exploration_noise >= 0, f"exploration_noise must be >= 0, got {hp.exploration_noise}.")
        for name in ("target_policy_noise", "target_noise_clip"):
            check(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}.")

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        off_policy.check_action_space(self, action_space)
        hp = self.hparams
        obs_dim, act_dim = int(np.prod(observation_space.shape)), int(action_space.shape[0])
        self.actor = DeterministicActor(obs_dim, act_dim, hp.hidden_sizes, hp.activation)
        self.critic = QEnsemble(obs_dim, act_dim, hp.hidden_sizes, n=self.n_critics, activation=hp.activation)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.observation_space, self.action_space = observation_space, action_space

    # ------------------------------------------------------------------------------------- data
    def batches_per_epoch(self) -> int:
        return off_policy.batches_per_epoch(self)

    def generate_batches(self) -> Iterator[Iterator[int]]:
        """Yields each training step's collection phases (lazily: see ``off_policy``); training_step
        samples the replay buffer itself, once per gradient step."""
        yield from off_policy.collection_phases(self, self._explore)

    # ----------------------------------------------------------------------------------- acting
    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions in env units: ``mu(s)``, or with exploration noise."""
        actions = self.actor(obs) if deterministic else self._noisy(self.actor(obs))
        return to_env_units(actions, self.action_low, self.action_high)

    def _explore(self, obs: Tensor) -> Tensor:
        """Normalized noisy actions, for the collector."""
        return self._noisy(self.actor(obs.to(self.device))).to(obs.device)

    def _noisy(self, actions: Tensor) -> Tensor:
        noise = torch.randn_like(actions) * self.hparams.exploration_noise
        return (actions + noise).clamp(-1.0, 1.0)

    # --------------------------------------------------------------------------------- training
    def training_step(self, phases: Iterator[int], batch_idx: int) -> Tensor:
        hp = self.hparams
        actor_opt, critic_opt = self.optimizers()
        log = self.should_log()
        critic_stats: list[Tensor] = []
        actor_stats: list[Tensor] = []
        for _ in off_policy.gradient_steps(self, phases):
            b = off_policy.sample(self)
            with torch.no_grad():
                next_actions = self.actor_target(b.next_obs)
                if self.target_policy_noise > 0:
                    noise = torch.randn_like(next_actions) * self.target_policy_noise
                    next_actions = smoothed_target_actions(next_actions, noise, self.target_noise_clip)
                target = td3_target(b.rewards, b.discounts, b.terminated, self.critic_target(b.next_obs, next_actions))
            q = self.critic(b.obs, b.actions)
            loss_q = off_policy.q_loss(q, target)
            self._step(critic_opt, loss_q)
            self.num_updates += 1
            if log:
                critic_stats.append(torch.stack([loss_q, q.mean()]).detach())

            if self.num_updates % self.policy_frequency == 0:
                # The actor's gradient flows through the critic into the actions only.
                self.critic.requires_grad_(False)
                loss_pi = deterministic_actor_loss(self.critic(b.obs, self.actor(b.obs), first=1)[0])
                self.critic.requires_grad_(True)
                self._step(actor_opt, loss_pi)
                polyak_update(self.critic, self.critic_target, hp.tau)
                polyak_update(self.actor, self.actor_target, hp.tau)
                if log:
                    actor_stats.append(loss_pi.detach())

        if log:
            loss_q_mean, q_mean = torch.stack(critic_stats).mean(0)
            metrics = {"train/critic_loss": loss_q_mean, "train/q_values": q_mean}
            if actor_stats:
                metrics["train/actor_loss"] = torch.stack(actor_stats).mean()
            self.log_training(metrics)
        return loss_q.detach()

    def _step(self, opt: Any, loss: Tensor) -> None:
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        lr = self.hparams.learning_rate
        return [
            self.adam(self.actor.parameters(), lr, clipped=False),
            self.adam(self.critic.parameters(), lr, clipped=False),
        ]

    # ------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        off_policy.save_state(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        off_policy.load_state(self, checkpoint)
