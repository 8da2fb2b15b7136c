from rl_lightning.data.dataset import ExperienceDataset
from rl_lightning.data.rollout import RolloutBatch, RolloutCollector, gae

__all__ = ["ExperienceDataset", "RolloutBatch", "RolloutCollector", "gae"]
