from rl_lightning.data.dataset import StepPacer
from rl_lightning.data.experience import ExperienceSide
from rl_lightning.data.replay import (
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    ReplayCollector,
    n_step_return,
)
from rl_lightning.data.rollout import RolloutBatch, RolloutCollector, gae

__all__ = [
    "ExperienceSide",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplayCollector",
    "RolloutBatch",
    "RolloutCollector",
    "StepPacer",
    "gae",
    "n_step_return",
]
