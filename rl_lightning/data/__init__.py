from rl_lightning.data.buffers import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer, n_step_return
from rl_lightning.data.dataset import StepPacer
from rl_lightning.data.experience import ExperienceSide
from rl_lightning.data.replay import Replay, ReplayCollector
from rl_lightning.data.rollout import RolloutBatch, RolloutCollector, Rollouts, gae

__all__ = [
    "ExperienceSide",
    "PrioritizedReplayBuffer",
    "Replay",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplayCollector",
    "RolloutBatch",
    "RolloutCollector",
    "Rollouts",
    "StepPacer",
    "gae",
    "n_step_return",
]
