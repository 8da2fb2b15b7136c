from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.ppo import PPO

__all__ = ["PPO", "RLModule"]
