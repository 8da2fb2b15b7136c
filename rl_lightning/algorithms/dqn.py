"""Deep Q-Networks (DQN) and its common extensions.

Mnih et al. 2015, "Human-level control through deep reinforcement learning" (Nature); with options
for Double DQN (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461), dueling heads (Wang et
al. 2016, https://arxiv.org/abs/1511.06581), n-step returns (Sutton 1988; as in Rainbow, Hessel et
al. 2018) and proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).
Implementation choices follow Stable-Baselines3 and CleanRL: Huber loss, gradient-norm clipping,
epsilon-greedy exploration decayed linearly over env steps, hard target updates every
``target_network_frequency`` env steps (or Polyak averaging with ``tau < 1``).

One Lightning training step is one collection phase: ``train_freq`` vector steps (each steps all
``env.num_envs`` sub-envs) go into the replay buffer, then ``gradient_steps`` Adam steps run on
minibatches sampled from it (manual optimization, so Lightning's fixed cost is paid once per phase).
The first phase of a run also fills the buffer with ``learning_starts`` random steps, so every epoch
has the same number of training steps. Neither the buffer nor the target network changes during the
updates of a phase, so with uniform replay all of its minibatches are sampled at once (i.i.d., as
one at a time) and the target network evaluates them in one forward pass instead of
``gradient_steps`` small ones (``_minibatches``). Prioritized replay samples each minibatch after the
previous step's priority update; Double DQN's online term, which changes every step, is computed per
minibatch.

Deviations: ``target_network_frequency`` counts env steps like SB3's ``target_update_interval`` and
CleanRL's ``target_network_frequency``, but updates happen between collection phases, so the
interval is rounded up to whole phases (``k`` due updates with ``tau < 1`` are applied as one with
``1 - (1 - tau)^k``, the same result). Epsilon is updated once per phase, not per env step.
Time-limit truncation bootstraps from the final observation (SB3 does; CleanRL does not).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any, Literal

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from rl_lightning.algorithms import off_policy
from rl_lightning.algorithms.base import RLModule
from rl_lightning.data.replay import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer, ReplayCollector
from rl_lightning.envs.atari import FRAME_STACK, is_atari
from rl_lightning.envs.make import EnvConfig
from rl_lightning.errors import ConfigError
from rl_lightning.networks.q_networks import QNetwork
from rl_lightning.networks.utils import polyak_update


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = duration``, then ``end``."""
    if duration <= 0:
        return end
    return start + (end - start) * min(t / duration, 1.0)


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


def dqn_loss(q: Tensor, target: Tensor, weights: Tensor, loss: str) -> tuple[Tensor, Tensor]:
    """``mean(w * l(Q(s, a) - y))`` with ``l`` the Huber loss (delta 1, SB3's ``smooth_l1_loss``) or the
    squared error; returns ``(loss, td_errors)``. ``weights`` are prioritized replay's importance
    weights (ones otherwise)."""
    td = q - target
    per_sample = F.smooth_l1_loss(q, target, reduction="none") if loss == "huber" else td.pow(2)
    return (weights * per_sample).mean(), td.detach()


class DQN(RLModule):
    """DQN for discrete actions, vector observations (MLP) or Atari frames (Nature CNN).

    Args:
        env: Environment to train on; ``env.num_envs`` sub-envs per rank.
        total_env_steps: Training budget in env steps (all ranks together).
        buffer_size: Replay capacity in transitions, per rank.
        learning_rate: Adam learning rate.
        batch_size: Transitions per gradient step.
        gamma: Discount factor, in (0, 1].
        learning_starts: Env steps of uniformly random actions that fill the buffer before the
            first gradient step (all ranks together; capped at ``total_env_steps``).
        train_freq: Vector steps per collection phase (``train_freq * env.num_envs`` env steps per
            rank); each phase is followed by ``gradient_steps`` updates.
        gradient_steps: Gradient steps after each collection phase.
        target_network_frequency: Env steps (all ranks) between target-network updates.
        tau: Target update coefficient: 1.0 copies the online network (hard update), smaller values
            average it in (Polyak).
        start_e: Exploration epsilon at the start.
        end_e: Exploration epsilon after the decay.
        exploration_fraction: Fraction of ``total_env_steps`` over which epsilon decays linearly.
        double_q: Use the Double DQN target.
        dueling: Use a dueling Q-network head.
        n_step: Steps of the n-step return (1 = one-step TD).
        prioritized_replay: Use proportional prioritized replay.
        prioritized_replay_alpha: Priority exponent alpha.
        prioritized_replay_beta: Initial importance-sampling exponent, annealed linearly to 1 over
            ``total_env_steps``.
        loss: ``huber`` (SB3, Nature's error clipping) or ``mse`` (CleanRL).
        max_grad_norm: Global gradient-norm clipping threshold; ``None`` does not clip.
        hidden_sizes: Hidden widths of the MLP Q-network (vector observations only).
        activation: Hidden activation of the MLP: ``relu``, ``tanh``, ``elu`` or ``silu``.
        save_replay_buffer: Save the replay buffer with checkpoints (one of 64 MiB or more in a side
            file ``<checkpoint>.replay-<env step>.pt`` next to it), so a resumed run continues with the
            same contents instead of refilling it.
        buffer_on_cpu: Keep the replay buffer in host memory even when training on an accelerator.
        env_steps_per_epoch: Env steps per Lightning epoch (all ranks); one evaluation per epoch.
        eval_episodes: Deterministic (greedy) evaluation episodes per evaluation.
    """

    action_spaces = (gym.spaces.Discrete,)

    def __init__(
        self,
        env: EnvConfig | None = None,
        total_env_steps: int = 1_000_000,
        buffer_size: int = 1_000_000,
        learning_rate: float = 1e-4,
        batch_size: int = 32,
        gamma: float = 0.99,
        learning_starts: int = 100,
        train_freq: int = 4,
        gradient_steps: int = 1,
        target_network_frequency: int = 10_000,
        tau: float = 1.0,
        start_e: float = 1.0,
        end_e: float = 0.05,
        exploration_fraction: float = 0.1,
        double_q: bool = False,
        dueling: bool = False,
        n_step: int = 1,
        prioritized_replay: bool = False,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        loss: Literal["huber", "mse"] = "huber",
        max_grad_norm: float | None = 10.0,
        hidden_sizes: tuple[int, ...] = (64, 64),
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
        self.epsilon = start_e
        self.replay: ReplayBuffer | None = None
        self._replay_state: dict[str, Any] | None = None  # from a checkpoint, until the buffer exists

    def _check_hparams(self) -> None:
        hp = self.hparams
        if not 0 < hp.gamma <= 1:
            raise ConfigError(f"gamma must be in (0, 1], got {hp.gamma}.")
        if not 0 < hp.tau <= 1:
            raise ConfigError(f"tau must be in (0, 1], got {hp.tau}.")
        if hp.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be > 0, got {hp.learning_rate}.")
        for name in ("batch_size", "train_freq", "gradient_steps", "target_network_frequency", "n_step"):
            if hp[name] < 1:
                raise ConfigError(f"{name} must be >= 1, got {hp[name]}.")
        if not 0 <= hp.learning_starts < self.total_env_steps:
            raise ConfigError(
                f"learning_starts must be in [0, total_env_steps={self.total_env_steps}), got {hp.learning_starts}: "
                "the run would end before its first update."
            )
        if hp.buffer_size < hp.batch_size:
            raise ConfigError(f"buffer_size={hp.buffer_size} must be >= batch_size={hp.batch_size}.")
        for name in ("start_e", "end_e", "exploration_fraction", "prioritized_replay_beta"):
            if not 0 <= hp[name] <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {hp[name]}.")
        if hp.prioritized_replay_alpha < 0:
            raise ConfigError(f"prioritized_replay_alpha must be >= 0, got {hp.prioritized_replay_alpha}.")
        if hp.loss not in ("huber", "mse"):
            raise ConfigError(f"loss must be 'huber' or 'mse', got {hp.loss!r}.")
        if hp.max_grad_norm is not None and hp.max_grad_norm <= 0:
            raise ConfigError(f"max_grad_norm must be > 0 or None, got {hp.max_grad_norm}.")
        if not all(h >= 1 for h in hp.hidden_sizes):
            raise ConfigError(f"hidden_sizes must be positive, got {list(hp.hidden_sizes)}.")

    def suggest_for(self, action_space: gym.Space) -> str:
        if isinstance(action_space, gym.spaces.Box):
            return "DQN needs discrete actions; for continuous actions use SAC, TD3 or DDPG (or PPO)."
        return super().suggest_for(action_space)

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        self.q_net = QNetwork(observation_space, action_space, hp.hidden_sizes, hp.activation, hp.dueling)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.observation_space, self.action_space = observation_space, action_space

    # ------------------------------------------------------------------------------------- data
    def batches_per_epoch(self) -> int:
        per_phase = self.hparams.train_freq * self.env_config.num_envs * self.trainer.world_size
        return math.ceil(self.env_steps_per_epoch / per_phase)

    def generate_batches(self) -> Iterator[int]:
        """Yields the env steps (all ranks) of each collection phase; training_step samples the
        replay buffer itself."""
        hp, world = self.hparams, self.trainer.world_size
        if self.replay is None:
            self.replay = self._make_replay()
        if self.collector is None:
            self.collector = ReplayCollector(self.envs, self.replay, self.replay.device, self.rank_seed)
        per_vector_step = self.env_config.num_envs * world
        # Random actions fill the buffer first (the first phase, or after resuming without a saved buffer).
        warmup_until = math.ceil(min(hp.learning_starts, self.total_env_steps) / per_vector_step)
        for _ in range(self.batches_per_epoch()):
            self.epsilon = linear_schedule(
                hp.start_e, hp.end_e, hp.exploration_fraction * self.total_env_steps, self.env_steps
            )
            collected = self.collector.collect(self._explore, hp.train_freq, warmup_until) * per_vector_step
            self.env_steps += collected
            yield collected

    def _make_replay(self) -> ReplayBuffer:
        hp = self.hparams
        return off_policy.make_replay(
            self,
            PrioritizedReplayBuffer if hp.prioritized_replay else ReplayBuffer,
            n_step=hp.n_step,
            gamma=hp.gamma,
            frame_stack=FRAME_STACK if is_atari(self.env_config.env_id) else 1,
            **({"alpha": hp.prioritized_replay_alpha} if hp.prioritized_replay else {}),
        )

    # ----------------------------------------------------------------------------------- acting
    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Greedy actions, or epsilon-greedy with the current epsilon."""
        greedy = self.q_net(obs).argmax(-1)
        if deterministic:
            return greedy
        random = torch.randint(int(self.action_space.n), greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.epsilon
        return torch.where(explore, random, greedy)

    def _explore(self, obs: Tensor) -> Tensor:
        return self(obs.to(self.device), deterministic=False).to(obs.device)

    # --------------------------------------------------------------------------------- training
    def training_step(self, collected: int, batch_idx: int) -> None:
        hp = self.hparams
        opt = self.optimizers()
        # Target updates due in the phase just collected (see the module docstring).
        freq = hp.target_network_frequency
        due = self.env_steps // freq - (self.env_steps - collected) // freq
        if due > 0:
            polyak_update(self.q_net, self.q_target, 1.0 - (1.0 - hp.tau) ** due)
        beta = linear_schedule(hp.prioritized_replay_beta, 1.0, self.total_env_steps, self.env_steps)
        logging = self.should_log()
        stats: list[Tensor] = []
        for batch, target in self._minibatches(beta):
            q = self.q_net(batch.obs).gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
            loss, td = dqn_loss(q.float(), target.float(), batch.weights, hp.loss)
            opt.zero_grad()
            self.manual_backward(loss)
            if hp.max_grad_norm is not None:
                self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
            self.replay.update_priorities(batch.indices, td.abs())
            if logging:  # a stack per gradient step, only on the steps that log
                stats.append(torch.stack([loss.detach(), q.detach().float().mean()]))

        if logging:
            loss_mean, q_mean = torch.stack(stats).mean(0)
            metrics = {"train/loss": loss_mean, "train/q_values": q_mean, "train/epsilon": self.epsilon}
            if hp.prioritized_replay:
                metrics["train/beta"] = beta
            self.log_training(metrics)

    @torch.no_grad()
    def _minibatches(self, beta: float) -> Iterator[tuple[ReplayBatch, Tensor]]:
        """The phase's ``gradient_steps`` minibatches and their TD targets (see the module docstring)."""
        hp, bs = self.hparams, self.hparams.batch_size
        if hp.prioritized_replay:
            for _ in range(hp.gradient_steps):
                batch = self._sample(bs, beta)
                yield batch, self._target(batch, self.q_target(batch.next_obs))
            return
        # Sampled in chunks of at most ~64 MiB of observations (Atari frames are 28 kB a stack).
        obs_bytes = 2 * bs * math.prod(self.observation_space.shape) * self.observation_space.dtype.itemsize
        per_chunk = max(1, min(hp.gradient_steps, (64 << 20) // obs_bytes))
        for start in range(0, hp.gradient_steps, per_chunk):
            steps = min(per_chunk, hp.gradient_steps - start)
            chunk = self._sample(steps * bs, beta)
            next_q_target = self.q_target(chunk.next_obs)
            targets = None if hp.double_q else self._target(chunk, next_q_target)
            for i in range(steps):
                rows = slice(i * bs, (i + 1) * bs)
                batch = ReplayBatch(*(field[rows] for field in chunk))
                yield batch, targets[rows] if targets is not None else self._target(batch, next_q_target[rows])

    def _target(self, batch: ReplayBatch, next_q_target: Tensor) -> Tensor:
        next_q_online = self.q_net(batch.next_obs) if self.hparams.double_q else None
        return dqn_target(batch.rewards, batch.discounts, batch.terminated, next_q_target, next_q_online)

    def _sample(self, size: int, beta: float) -> ReplayBatch:
        batch = self.replay.sample(size, beta) if self.hparams.prioritized_replay else self.replay.sample(size)
        if self.replay.device != self.device:  # indices stay on the host, with the priorities
            batch = batch._replace(**{k: getattr(batch, k).to(self.device) for k in batch._fields if k != "indices"})
        return batch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.adam(
            self.q_net.parameters(), lr=self.hparams.learning_rate, clipped=self.hparams.max_grad_norm is not None
        )

    # ------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["rl_lightning"]["epsilon"] = self.epsilon
        if self.hparams.save_replay_buffer and self.replay is not None:
            checkpoint["rl_lightning"]["replay_buffer"] = self.replay.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("rl_lightning", {})
        self.epsilon = float(state.get("epsilon", self.epsilon))
        self._replay_state = state.get("replay_buffer")
