"""Soft Actor-Critic (SAC) for continuous actions.

Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep Reinforcement Learning with
a Stochastic Actor", https://arxiv.org/abs/1801.01290, and "Soft Actor-Critic Algorithms and
Applications", https://arxiv.org/abs/1812.05905 (automatic entropy tuning, no value network).
Implementation as in Stable-Baselines3 and CleanRL: twin Q critics with Polyak-averaged targets, a
tanh-squashed Gaussian actor with the change-of-variables log-probability, the entropy coefficient
alpha tuned towards a target entropy of ``-|A|`` (or fixed), uniformly random actions for the first
``learning_starts`` env steps. Defaults are SB3's.

One Lightning training step is ``phases_per_step`` collection phases (``train_freq`` vector steps
into the replay buffer), each followed by ``gradient_steps`` updates, each stepping three optimizers
(alpha, critics, actor, in SB3's order) through manual optimization, so Lightning's precision
plugins still apply. Grouping phases only pays Lightning's fixed cost per training step (~1 ms)
less often: each phase is collected after the previous phase's updates, as with one per step.
Actions are normalized to ``[-1, 1]`` inside (see ``off_policy``); ``forward`` returns env units.

Deviations: none of substance. Time-limit truncation bootstraps from the final observation (SB3
does; CleanRL does not).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.algorithms import off_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.data.replay import ReplayBuffer
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import check
from rl_lightning.networks.continuous import QEnsemble, TanhGaussianActor, to_env_units
from rl_lightning.networks.mlp import ACTIVATIONS
from rl_lightning.networks.utils import polyak_update


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
        total_env_steps: Training budget in env steps (all ranks together).
        buffer_size: Replay capacity in transitions, per rank.
        learning_rate: Adam learning rate of the actor, the critics and alpha.
        batch_size: Transitions per gradient step.
        gamma: Discount factor, in (0, 1].
        tau: Polyak coefficient of the target critics, updated after every gradient step
            (``target <- tau * online + (1 - tau) * target``; 1.0 copies).
        learning_starts: Env steps of uniformly random actions before the first gradient step (all
            ranks together); at most ``total_env_steps``.
        train_freq: Vector steps per collection phase (``train_freq * env.num_envs`` env steps per
            rank); each phase is followed by ``gradient_steps`` updates.
        gradient_steps: Gradient steps after each collection phase.
        phases_per_step: Collection phases (each followed by its updates) per Lightning training step
            (speed only: the run is the same; metrics are logged per training step).
        ent_coef: Entropy coefficient alpha: ``auto`` tunes it towards ``target_entropy``; a number
            fixes it.
        ent_coef_init: Initial alpha when tuned.
        target_entropy: Entropy target of the tuning; ``None`` means ``-|A|`` (action dimensions).
        hidden_sizes: Hidden widths of the actor and of each critic.
        activation: Hidden activation: ``relu``, ``tanh``, ``elu`` or ``silu``.
        save_replay_buffer: Save the replay buffer with checkpoints (one of 64 MiB or more in a side
            file ``<checkpoint>.replay-<env step>.pt`` next to it), so a resumed run continues with the
            same contents instead of refilling it.
        buffer_on_cpu: Keep the replay buffer in host memory even when training on an accelerator.
        env_steps_per_epoch: Env steps per Lightning epoch (all ranks); one evaluation per epoch.
        eval_episodes: Deterministic evaluation episodes (the tanh of the mean) per evaluation.
    """

    action_spaces = (gym.spaces.Box,)
    ddp_find_unused_parameters = True  # actor, critic (and alpha) backward passes reach disjoint parameters

    def __init__(
        self,
        env: EnvConfig | None = None,
        total_env_steps: int = 1_000_000,
        buffer_size: int = 1_000_000,
        learning_rate: float = 3e-4,
        batch_size: int = 256,
        gamma: float = 0.99,
        tau: float = 0.005,
        learning_starts: int = 100,
        train_freq: int = 1,
        gradient_steps: int = 1,
        phases_per_step: int = 10,
        ent_coef: float | Literal["auto"] = "auto",
        ent_coef_init: float = 1.0,
        target_entropy: float | None = None,
        hidden_sizes: tuple[int, ...] = (256, 256),
        activation: str = "relu",
        save_replay_buffer: bool = False,
        buffer_on_cpu: bool = False,
        env_steps_per_epoch: int = 10_000,
        eval_episodes: int = 20,
    ) -> None:
        super().__init__(env, total_env_steps, env_steps_per_epoch, eval_episodes)
        self.save_hyperparameters()
        self.automatic_optimization = False
        self._check_hparams()
        self.tune_alpha = ent_coef == "auto"
        log_alpha = torch.tensor(math.log(ent_coef_init if self.tune_alpha else float(ent_coef)))
        if self.tune_alpha:  # a parameter or a buffer: in the state_dict (and checkpoints) either way
            self.log_alpha = nn.Parameter(log_alpha)
        else:
            self.register_buffer("log_alpha", log_alpha)
        self.replay: ReplayBuffer | None = None
        self._replay_state: dict[str, Any] | None = None  # from a checkpoint, until the buffer exists
        self.num_updates = 0

    def _check_hparams(self) -> None:
        hp = self.hparams
        off_policy.check_hparams(hp, self.total_env_steps)
        check(hp.activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}, got {hp.activation!r}.")
        check(
            hp.ent_coef == "auto" or (isinstance(hp.ent_coef, float | int) and hp.ent_coef > 0),
            f"ent_coef must be 'auto' or a number > 0, got {hp.ent_coef!r}.",
        )
        check(hp.ent_coef_init > 0, f"ent_coef_init must be > 0, got {hp.ent_coef_init}.")

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        off_policy.check_action_space(self, action_space)
        hp = self.hparams
        obs_dim, act_dim = int(np.prod(observation_space.shape)), int(action_space.shape[0])
        self.actor = TanhGaussianActor(obs_dim, act_dim, hp.hidden_sizes, hp.activation)
        self.critic = QEnsemble(obs_dim, act_dim, hp.hidden_sizes, n=2, activation=hp.activation)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_entropy = float(-act_dim if hp.target_entropy is None else hp.target_entropy)
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
        """Actions in env units: ``tanh(mean)`` or a sample, rescaled to the action bounds."""
        actions = self.actor.mode(obs) if deterministic else self.actor.sample(obs)[0]
        return to_env_units(actions, self.action_low, self.action_high)

    def _explore(self, obs: Tensor) -> Tensor:
        """Normalized sampled actions, for the collector."""
        return self.actor.sample(obs.to(self.device))[0].to(obs.device)

    # --------------------------------------------------------------------------------- training
    def training_step(self, phases: Iterator[int], batch_idx: int) -> Tensor:
        hp = self.hparams
        actor_opt, critic_opt, *alpha_opt = self.optimizers()
        log = self.should_log()
        stats: list[Tensor] = []
        for _ in off_policy.gradient_steps(self, phases):
            b = off_policy.sample(self)
            actions_pi, log_pi = self.actor.sample(b.obs)
            alpha = self.log_alpha.detach().exp()  # this step's alpha: the value before its update
            if self.tune_alpha:
                loss_alpha = alpha_loss(self.log_alpha, log_pi, self.target_entropy)
                self._step(alpha_opt[0], loss_alpha)

            with torch.no_grad():
                next_actions, next_log_pi = self.actor.sample(b.next_obs)
                next_q = self.critic_target(b.next_obs, next_actions)
                target = soft_q_target(b.rewards, b.discounts, b.terminated, next_q, next_log_pi, alpha)
            q = self.critic(b.obs, b.actions)
            loss_q = off_policy.q_loss(q, target)
            self._step(critic_opt, loss_q)

            # The actor's gradient flows through the (just updated) critics into the actions only.
            self.critic.requires_grad_(False)
            loss_pi = sac_actor_loss(self.critic(b.obs, actions_pi), log_pi, alpha)
            self.critic.requires_grad_(True)
            self._step(actor_opt, loss_pi)

            polyak_update(self.critic, self.critic_target, hp.tau)
            self.num_updates += 1
            if log:
                stats.append(torch.stack([loss_q, loss_pi, q.mean(), -log_pi.mean(), alpha]).detach())

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
        return torch.stack([loss_q, loss_pi]).detach()

    def _step(self, opt: Any, loss: Tensor) -> None:
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        lr = self.hparams.learning_rate
        opts = [
            self.adam(self.actor.parameters(), lr, clipped=False),
            self.adam(self.critic.parameters(), lr, clipped=False),
        ]
        if self.tune_alpha:
            opts.append(self.adam([self.log_alpha], lr, clipped=False))
        return opts

    # ------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        off_policy.save_state(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        off_policy.load_state(self, checkpoint)
