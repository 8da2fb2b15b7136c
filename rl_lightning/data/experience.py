"""The experience side: what an algorithm collects experience with, one interface for all.

``RLModule`` holds one (``experience``, built by the algorithm's ``build_experience``) and drives it:
it starts it on the rank's envs at the first collection (after a checkpoint was restored and the module
moved to its device), calls ``collect`` once per rollout or collection phase (naming env faults and
restarting the envs around it, ``env.restart_on_failure``), counts the env steps it took, logs its
episode statistics, saves and restores its state with checkpoints, and stops it when the envs close.

Two implement it: ``Rollouts`` (on-policy: PPO, A2C, REINFORCE; ``collect(policy) -> Rollout``) and
``Replay`` (off-policy: DQN, SAC, TD3, DDPG; ``collect(act) -> None``, the transitions go to its
buffer, sampled with ``Replay.sample``).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.cuda_graphs import UpdateGraphs
from rl_lightning.envs.make import EpisodeLog, remake_vector_env
from rl_lightning.errors import CollectionError, naming_env_faults

Collected = TypeVar("Collected", covariant=True)


@runtime_checkable
class ExperienceSide(Protocol[Collected]):
    """What ``RLModule`` needs of an algorithm's experience side (see the module docstring)."""

    @property
    def started(self) -> bool:
        """Whether ``start`` ran since the last ``stop``."""
        ...

    @property
    def vector_steps(self) -> int:
        """Vector steps (of every sub-env at once) the last ``collect`` took."""
        ...

    def start(
        self, envs: gym.vector.VectorEnv, device: torch.device, seed: int, world_size: int, graphs: UpdateGraphs
    ) -> None:
        """Begin collecting from ``envs`` (this rank's), storage on ``device``, the first reset seeded
        with ``seed``; ``world_size`` ranks collect together; ``graphs``: the module's CUDA graphs."""
        ...

    def collect(self, policy: Any) -> Collected:
        """One rollout or collection phase with ``policy`` (what acting needs: a ``Policy`` for
        rollouts, an ``act(obs) -> actions`` function for replay)."""
        ...

    def stop(self) -> None:
        """Let go of the envs (they are closed or replaced); what was stored stays."""
        ...

    def pop_episode_stats(self, with_sub_envs: bool = False) -> tuple[np.ndarray, ...]:
        """Returns and lengths (and, ``with_sub_envs``, the sub-env of each) of the training episodes that
        ended since the last call."""
        ...

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of it (tensors and plain containers), or ``None`` for nothing."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (before or after ``start``)."""
        ...


class CollectorSide:
    """What both experience sides share around their collector (``RolloutCollector``, ``ReplayCollector``):
    started while they hold one, stopped by letting it go, the episode statistics its ``episodes`` log
    gathered. A subclass sets ``collector`` in ``start``."""

    collector: Any = None

    @property
    def started(self) -> bool:
        return self.collector is not None

    def stop(self) -> None:
        self.collector = None

    def pop_episode_stats(self, with_sub_envs: bool = False) -> tuple[np.ndarray, ...]:
        if self.collector is not None:
            return self.collector.episodes.pop(with_sub_envs)
        return EpisodeLog().pop(with_sub_envs)


def collect_from(module: Any, policy: Any, max_restarts: int) -> Any:
    """``RLModule.collect``: one ``collect(policy)`` of the module's experience side, started on the rank's
    envs at the first call (seeded with ``module.training_env_seed``), the env steps counted (all ranks). An
    exception inside is raised as a ``CollectionError`` naming the env and the env step; with
    ``env.restart_on_failure`` the envs are rebuilt (``remake_vector_env``) and the collection tried again,
    up to ``max_restarts`` times in a row, each restart starting new episodes."""
    side, config = module.experience, module.env_config
    for attempt in range(max_restarts + 1):
        try:
            with naming_env_faults("Experience collection", config.env_id, module.env_steps):
                if not side.started:
                    seed = module.training_env_seed  # new episodes after a restart
                    side.start(module.envs, module.device, seed, module.data_parallel_ranks, module.graphs)
                collected = side.collect(policy)
            break
        except CollectionError as e:
            if not config.restart_on_failure or attempt == max_restarts:
                raise
            rank_zero_warn(f"{e} Restarting the envs (env.restart_on_failure).")
            side.stop()
            module.env_restarts += 1
            module.envs = remake_vector_env(module.envs, config, module.device)
    module.env_steps += side.vector_steps * config.num_envs * module.data_parallel_ranks
    return collected
