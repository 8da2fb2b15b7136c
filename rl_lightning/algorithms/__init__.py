from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.dqn import DQN
from rl_lightning.algorithms.ppo import PPO

__all__ = ["DQN", "PPO", "RLModule"]
