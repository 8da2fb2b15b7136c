"""Deep Q-Networks (DQN) and its common extensions.

Mnih et al. 2015, "Human-level control through deep reinforcement learning" (Nature); with options
for Double DQN (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461), dueling heads (Wang et
al. 2016, https://arxiv.org/abs/1511.06581), n-step returns (Sutton 1988; as in Rainbow, Hessel et
al. 2018), proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952) and
noisy networks (Fortunato et al. 2018, https://arxiv.org/abs/1706.10295).
Implementation choices follow Stable-Baselines3 and CleanRL: Huber loss, gradient-norm clipping,
epsilon-greedy exploration decayed linearly over env steps, hard target updates every
``target_network_frequency`` env steps (or Polyak averaging with ``tau < 1``).

One Lightning training step is ``replay.phases_per_step`` collection phases (default 1): each phase
puts ``train_freq`` vector steps (each steps all ``env.num_envs`` sub-envs) into the replay buffer,
then ``gradient_steps`` Adam steps run on minibatches sampled from it (manual optimization, so
Lightning's fixed cost is paid once per training step). The first phase of a run also fills the
buffer with ``learning_starts`` random steps, so every epoch has the same number of training steps.
Neither the buffer nor the target network changes during the updates of a phase, so with uniform
replay all of its minibatches are sampled at once (i.i.d., as one at a time) and the target network
evaluates them in one forward pass instead of ``gradient_steps`` small ones (``_minibatches``).
Prioritized replay samples each minibatch after the previous step's priority update; Double DQN's
online term, which changes every step, is computed per minibatch. With noisy networks both networks
draw new noise before each minibatch (its target and its update share the online network's noise,
as in Rainbow), so targets are computed per minibatch too; acting draws new noise every vector step.

C51 and QR-DQN (``c51.py``, ``qrdqn.py``) subclass this module: they change what the network's
outputs mean (``atoms``, ``q_values``), the target (``_target``) and the loss (``td_loss``).

Deviations: ``target_network_frequency`` counts env steps like SB3's ``target_update_interval`` and
CleanRL's ``target_network_frequency``, but updates happen between collection phases, so the
interval is rounded up to whole phases (``k`` due updates with ``tau < 1`` are applied as one with
``1 - (1 - tau)^k``, the same result). Epsilon is updated once per phase, not per env step.
Time-limit truncation bootstraps from the final observation (SB3 does; CleanRL does not).

``run.population: N`` (docs/population.md) trains N seeds as one batched model: the Q-network is a
``Population``, each member samples its own part of the replay buffer, and the loss is each member's
of its own rows (``member_losses``); not with prioritized replay or noisy networks.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Literal

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from rl_lightning.algorithms.base import RLModule
from rl_lightning.config import CONTINUOUS_CONTROL_REPLAY, DEFAULT_RUN, ReplayConfig, RunConfig
from rl_lightning.data.buffers import ReplayBatch
from rl_lightning.data.replay import Replay
from rl_lightning.envs.make import EnvConfig
from rl_lightning.networks.mlp import Activation
from rl_lightning.networks.q_networks import QNetwork
from rl_lightning.networks.utils import polyak_update
from rl_lightning.optim import linear_schedule
from rl_lightning.validation import (
    at_least,
    fraction,
    non_negative,
    off_policy_args,
    one_of,
    positive,
    positive_or_none,
)


def dqn_target(
    rewards: Tensor,
    discounts: Tensor,
    terminated: Tensor,
    next_q_target: Tensor,
    next_q_online: Tensor | None = None,
) -> Tensor:
    """The TD target ``y = r + discount * (1 - terminated) * V(s')`` with ``[B]`` rewards, discounts
    (``gamma^n``) and terminated flags, and ``[B, A]`` next-state Q-values.

    DQN:         V(s') = max_a Q_target(s', a)
    Double DQN:  V(s') = Q_target(s', argmax_a Q_online(s', a))   (when ``next_q_online`` is given)
    """
    if next_q_online is None:
        next_v = next_q_target.max(-1).values
    else:
        next_v = next_q_target.gather(-1, next_q_online.argmax(-1, keepdim=True)).squeeze(-1)
    return rewards + discounts * (1.0 - terminated) * next_v


def epsilon_greedy(greedy: Tensor, num_actions: int, epsilon: float | Tensor) -> Tensor:
    """The ``greedy`` actions, each replaced by a uniformly random one with probability ``epsilon``."""
    random = torch.randint(num_actions, greedy.shape, device=greedy.device)
    explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
    return torch.where(explore, random, greedy)


def of_actions(outputs: Tensor, actions: Tensor) -> Tensor:
    """The rows of ``[B, A, ...]`` network outputs that belong to the ``[B]`` actions: ``[B, ...]``."""
    return outputs[torch.arange(actions.shape[0], device=actions.device), actions.long()]


def dqn_loss(q: Tensor, target: Tensor, weights: Tensor, loss: str) -> tuple[Tensor, Tensor]:
    """``mean(w * l(Q(s, a) - y))`` with ``l`` the Huber loss (delta 1, SB3's ``smooth_l1_loss``) or the
    squared error; returns ``(loss, td_errors)``. ``weights`` are prioritized replay's importance
    weights (ones otherwise)."""
    td = q - target
    per_sample = F.smooth_l1_loss(q, target, reduction="none") if loss == "huber" else td.pow(2)
    return (weights * per_sample).mean(), td.detach()


# SB3's DQN defaults: small minibatches, a phase every 4 vector steps; one phase per training step.
DQN_REPLAY = dataclasses.replace(CONTINUOUS_CONTROL_REPLAY, batch_size=32, train_freq=4, phases_per_step=1)


class DQN(RLModule):
    """DQN for discrete actions, vector observations (MLP) or Atari frames (Nature CNN).

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        run: Budget (``total_env_steps``) and evaluation rhythm.
        replay: Replay buffer, warm-up and the rhythm of collection phases and gradient steps.
        learning_rate: Adam learning rate.
        anneal_lr: Decay the learning rate linearly to 0 over ``total_env_steps`` (the RL Zoo's ``lin_``
            schedules), set once per collection phase.
        gamma: Discount factor, in (0, 1].
        target_network_frequency: Env steps (all ranks) between target-network updates.
        tau: Target update coefficient: 1.0 copies the online network (hard update), smaller values
            average it in (Polyak).
        start_e: Exploration epsilon at the start; ``None``: 1.0, or 0.0 with ``noisy``.
        end_e: Exploration epsilon after the decay; ``None``: 0.05, or 0.0 with ``noisy``.
        exploration_fraction: Fraction of ``total_env_steps`` over which epsilon decays linearly.
        double_q: Use the Double DQN target.
        dueling: Use a dueling Q-network head.
        n_step: Steps of the n-step return (1 = one-step TD).
        prioritized_replay: Use proportional prioritized replay.
        prioritized_replay_alpha: Priority exponent alpha.
        prioritized_replay_beta: Initial importance-sampling exponent, annealed linearly to 1 over
            ``total_env_steps``.
        noisy: Factorized Gaussian noisy linear layers (NoisyNet, sigma0 0.5) explore instead of
            epsilon (which is then 0 unless given).
        loss: ``huber`` (SB3, Nature's error clipping) or ``mse`` (CleanRL).
        max_grad_norm: Global gradient-norm clipping threshold; ``None`` does not clip.
        adam_eps: Adam's epsilon (Rainbow: 1.5e-4).
        hidden_sizes: Hidden widths of the MLP Q-network (vector observations only).
        activation: Hidden activation of the MLP.
    """

    action_spaces = (gym.spaces.Discrete,)
    checkpointed_attributes = ("epsilon",)
    atoms = 1  # network outputs per action (C51: atoms of the distribution, QR-DQN: quantiles)
    trains_populations = True
    member_hyperparameters = ("learning_rate", "tau", "max_grad_norm")
    population_excludes = ("prioritized_replay", "noisy")  # one sum tree; noise buffers drawn in place

    def __init__(
        self,
        env: EnvConfig | None = None,
        run: RunConfig = DEFAULT_RUN,
        replay: ReplayConfig = DQN_REPLAY,
        learning_rate: float = 1e-4,
        anneal_lr: bool = False,
        gamma: float = 0.99,
        target_network_frequency: int = 10_000,
        tau: float = 1.0,
        start_e: float | None = None,
        end_e: float | None = None,
        exploration_fraction: float = 0.1,
        double_q: bool = False,
        dueling: bool = False,
        n_step: int = 1,
        prioritized_replay: bool = False,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        noisy: bool = False,
        loss: Literal["huber", "mse"] = "huber",
        max_grad_norm: float | None = 10.0,
        adam_eps: float = 1e-8,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: Activation = "relu",
    ) -> None:
        super().__init__(env, run)
        self.configure_replay(replay)
        self.start_e = (0.0 if noisy else 1.0) if start_e is None else start_e  # noise explores instead
        self.end_e = (0.0 if noisy else 0.05) if end_e is None else end_e
        self.epsilon = self.start_e
        self.adam_eps = adam_eps
        off_policy_args(learning_rate, gamma, tau, hidden_sizes, activation)
        at_least("target_network_frequency", target_network_frequency, 1)
        at_least("n_step", n_step, 1)
        for name in ("start_e", "end_e"):
            fraction(name, getattr(self, name))
        for name in ("exploration_fraction", "prioritized_replay_beta"):
            fraction(name, self.hparams[name])
        non_negative("prioritized_replay_alpha", prioritized_replay_alpha)
        one_of("loss", loss, ("huber", "mse"))
        positive_or_none("max_grad_norm", max_grad_norm)
        positive("adam_eps", adam_eps)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams

        def make() -> QNetwork:
            return QNetwork(
                observation_space, action_space, hp.hidden_sizes, hp.activation, hp.dueling, hp.noisy, self.atoms
            )

        self.q_net = make() if self.population == 1 else self.make_population(make)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)

    def build_experience(self) -> Replay:
        hp = self.hparams
        self.replay = Replay(
            self.replay_config,
            n_step=hp.n_step,
            gamma=hp.gamma,
            prioritized_alpha=hp.prioritized_replay_alpha if hp.prioritized_replay else None,
            members=self.population,
        )
        return self.replay

    # ----------------------------------------------------------------------------------- acting
    def q_values(self, outputs: Tensor) -> Tensor:
        """``Q(s, .)`` from the Q-network's outputs (here the Q-values themselves)."""
        return outputs

    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Greedy actions, or epsilon-greedy with the current epsilon."""
        greedy = self.q_values(self.q_net(obs)).argmax(-1)
        return greedy if deterministic else epsilon_greedy(greedy, int(self.action_space.n), self.epsilon)

    def _explore(self, obs: Tensor) -> Tensor:
        if self.hparams.noisy:
            self.q_net.reset_noise()  # new noise every collection step
        return self(obs.to(self.device), deterministic=False).to(obs.device)

    # --------------------------------------------------------------------------------- training
    def training_step(self, iterations: int, batch_idx: int) -> Tensor:
        """``iterations`` collection phases (``replay.phases_per_step``), each followed by its updates."""
        hp = self.hparams
        logging = self.should_log()
        stats: list[Tensor] = []
        for _ in self.within_budget(iterations):
            self.epsilon = linear_schedule(
                self.start_e, self.end_e, hp.exploration_fraction * self.total_env_steps, self.env_steps
            )
            collected = self.collect_phase(self._explore)
            if hp.anneal_lr:  # as SB3 sets it, from the env steps collected so far
                self.anneal_learning_rate(self.optimizers(), self.member_hparam("learning_rate"))
            # Target updates due in the phase just collected (see the module docstring).
            freq = hp.target_network_frequency
            due = self.env_steps // freq - (self.env_steps - collected) // freq
            if due > 0:
                polyak_update(self.q_net, self.q_target, 1.0 - (1.0 - self.member_hparam("tau")) ** due)
            beta = linear_schedule(hp.prioritized_replay_beta, 1.0, self.total_env_steps, self.env_steps)
            for batch, target in self._minibatches(beta):
                weights = [] if batch.weights is None else [batch.weights]
                loss, td, q_mean = self.run_update(self.minibatch_update, batch.obs, batch.actions, target, *weights)
                self.replay.update_priorities(batch.indices, td.abs())
                if logging:  # a stack per gradient step, only on the steps that log
                    stats.append(torch.stack([loss, q_mean]))

        if logging:
            loss_mean, q_mean = torch.stack(stats).mean(0)
            metrics = {"train/loss": loss_mean, "train/q_values": q_mean, "train/epsilon": self.epsilon}
            if hp.prioritized_replay:
                metrics["train/beta"] = beta
            if hp.anneal_lr:
                metrics["train/learning_rate"] = self.optimizers().param_groups[0]["lr"]
            self.log_training(metrics)
        return loss

    def minibatch_update(
        self, obs: Tensor, actions: Tensor, target: Tensor, weights: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One minibatch's TD loss and optimizer step (one CUDA graph with CUDA graphs on): the loss,
        the TD errors (new priorities) and the mean Q-value."""
        loss, td, q_mean = self.td_loss(obs, actions, target, weights)
        self.members_step(self.optimizers(), loss, self.member_hparam("max_grad_norm"))
        return loss.detach(), td.detach(), q_mean

    def td_loss(
        self, obs: Tensor, actions: Tensor, target: Tensor, weights: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The loss of ``Q(s, a)`` against the targets: the loss, the per-sample errors prioritized
        replay's priorities are made from, and the mean Q-value of the sampled actions (a population's:
        each member's, ``(N,)``)."""
        q = self.q_net(obs).gather(1, actions.long().unsqueeze(1)).squeeze(1)
        kind = self.hparams.loss
        loss, td = self.member_losses(lambda q, y, w: dqn_loss(q, y, w, kind), q.float(), target.float(), weights)
        return loss, td, self.member_mean(*self.member_rows(q.detach().float()))

    @torch.no_grad()
    def _minibatches(self, beta: float) -> Iterator[tuple[ReplayBatch, Tensor]]:
        """The phase's ``gradient_steps`` minibatches and their TD targets (see the module docstring)."""
        hp, steps_per_phase, bs = self.hparams, self.replay_config.gradient_steps, self.replay_config.batch_size
        if hp.prioritized_replay or hp.noisy:
            for _ in range(steps_per_phase):
                batch = self.replay.sample(bs, beta)  # beta: prioritized replay only
                if hp.noisy:  # new noise for this minibatch's target and update
                    self.q_net.reset_noise()
                    self.q_target.reset_noise()
                yield batch, self._target(batch, self.q_target(batch.next_obs))
            return
        # Sampled in chunks of at most ~64 MiB of observations (Atari frames are 28 kB a stack).
        obs_bytes = 2 * bs * self.replay.buffer.obs_nbytes
        per_chunk = max(1, min(steps_per_phase, (64 << 20) // obs_bytes))
        for start in range(0, steps_per_phase, per_chunk):
            steps = min(per_chunk, steps_per_phase - start)
            chunk = self.replay.sample(steps * bs)
            next_q_target = self.q_target(chunk.next_obs)
            targets = None if hp.double_q else self._target(chunk, next_q_target)
            for i in range(steps):
                batch = ReplayBatch(*(self._step_rows(field, i, bs) for field in chunk))
                next_q = self._step_rows(next_q_target, i, bs)
                yield batch, self._step_rows(targets, i, bs) if targets is not None else self._target(batch, next_q)

    def _step_rows(self, rows: Tensor, i: int, bs: int) -> Tensor:
        """Gradient step ``i``'s ``bs`` rows of a chunk sampled for several (a population's: ``bs`` of each
        member's, member-major as the chunk is)."""
        if self.population == 1:
            return rows[i * bs : (i + 1) * bs]
        return rows.unflatten(0, (self.population, -1))[:, i * bs : (i + 1) * bs].flatten(0, 1)

    def _target(self, batch: ReplayBatch, next_q_target: Tensor) -> Tensor:
        next_q_online = self.q_net(batch.next_obs) if self.hparams.double_q else None
        return dqn_target(batch.rewards, batch.discounts, batch.terminated, next_q_target, next_q_online)

    def next_actions(self, batch: ReplayBatch, next_target: Tensor) -> Tensor:
        """``a* = argmax_a Q(s', a)`` by the target network's outputs ``next_target``, or by the online
        network's with ``double_q``: the action the distributional targets bootstrap from."""
        next_online = self.q_net(batch.next_obs) if self.hparams.double_q else next_target
        return self.q_values(next_online).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        adam = self.adam(
            self.q_net.parameters(),
            lr=self.hparams.learning_rate,
            eps=self.adam_eps,
            clipped=self.hparams.max_grad_norm is not None,
        )
        return self.with_member_learning_rates(adam)
