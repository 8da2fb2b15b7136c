"""What PPO, A2C and REINFORCE share beyond ``RLModule``: the agent, normalization, rollouts.

A mixin (``class PPO(OnPolicyMixin, RLModule)``) rather than a base class, so the hierarchy stays
RLModule -> algorithm and the algorithm file still shows every step of its data and training. It
only fills in RLModule's hooks the three would otherwise repeat line for line:

- ``build_networks``: an ``ActorCritic`` and, if asked, the observation / return statistics
  (``RunningMeanStd`` buffers: saved in checkpoints, updated only by the collector, so evaluation
  and deployment use them frozen);
- ``rollouts_per_epoch``, ``batches_per_epoch`` and ``collect_rollout``: one ``RolloutCollector``
  per fit, a fixed number of rollouts per epoch, the global env-step counter;
- ``forward(obs)``: deterministic (or sampled) actions from raw observations, normalization included;
- ``anneal_learning_rate``: linear decay over the env-step budget.

The algorithm sets ``self.rollout_size`` (``num_envs * num_steps``) and has the hyperparameters
``num_steps, gamma, learning_rate, hidden_sizes, activation, normalize_obs, normalize_reward``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning.data.rollout import Rollout, RolloutCollector
from rl_lightning.envs.normalize import RunningMeanStd
from rl_lightning.errors import check
from rl_lightning.networks.cnn import is_image_space
from rl_lightning.networks.mlp import ACTIVATIONS
from rl_lightning.networks.policies import ActorCritic


class OnPolicyMixin:
    rollout_size: int  # num_envs * num_steps, set by the algorithm
    rollouts_per_step: int = 1  # rollouts (each followed by its update) per Lightning training step
    hparams: Any

    def check_common_hparams(self) -> None:
        hp = self.hparams
        check(0 < hp.gamma <= 1, f"gamma must be in (0, 1], got {hp.gamma}.")
        check(hp.learning_rate > 0, f"learning_rate must be > 0, got {hp.learning_rate}.")
        check(hp.num_steps >= 1, f"num_steps must be >= 1, got {hp.num_steps}.")
        check(hp.activation in ACTIVATIONS, f"activation must be one of {sorted(ACTIVATIONS)}, got {hp.activation!r}.")
        check(all(h >= 1 for h in hp.hidden_sizes), f"hidden_sizes must be positive, got {list(hp.hidden_sizes)}.")

    def uses_critic(self) -> bool:
        return True

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        hp = self.hparams
        check(
            not (hp.normalize_obs and is_image_space(observation_space)),
            "normalize_obs is for vector observations; image observations are scaled to [0, 1] by the CNN.",
        )
        self.agent = ActorCritic(observation_space, action_space, hp.hidden_sizes, hp.activation, self.uses_critic())
        self.obs_rms = RunningMeanStd(observation_space.shape) if hp.normalize_obs else None
        self.return_rms = RunningMeanStd(()) if hp.normalize_reward else None

    def rollouts_per_epoch(self) -> int:
        return math.ceil(self.env_steps_per_epoch / (self.rollout_size * self.trainer.world_size))

    def batches_per_epoch(self) -> int:
        return math.ceil(self.rollouts_per_epoch() / self.rollouts_per_step)

    def collect_rollout(self) -> Rollout:
        """One rollout with the current policy (collected when called: on-policy by construction)."""
        hp = self.hparams
        if self.collector is None:
            self.collector = RolloutCollector(
                self.envs, hp.num_steps, self.device, self.rank_seed, self.obs_rms, self.return_rms, hp.gamma
            )
        rollout = self.collector.rollout(self.agent)
        self.env_steps += self.rollout_size * self.trainer.world_size
        return rollout

    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions for raw observations: the mode of the policy, or a sample."""
        if self.obs_rms is not None:
            obs = self.obs_rms.normalize(obs)
        return self.agent(obs, deterministic)

    def anneal_learning_rate(self, optimizer: torch.optim.Optimizer) -> None:
        """Learning rate decays linearly from ``learning_rate`` to 0 over ``total_env_steps``."""
        lr = self.hparams.learning_rate * max(1.0 - self.env_steps / self.total_env_steps, 0.0)
        for group in optimizer.param_groups:
            group["lr"] = lr
