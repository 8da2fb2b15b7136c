from rl_lightning.data.dataset import ExperienceDataset
from rl_lightning.data.replay import (
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    ReplayCollector,
    n_step_return,
)
from rl_lightning.data.rollout import RolloutBatch, RolloutCollector, gae

__all__ = [
    "ExperienceDataset",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplayCollector",
    "RolloutBatch",
    "RolloutCollector",
    "gae",
    "n_step_return",
]
