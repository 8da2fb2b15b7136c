from rl_lightning.algorithms.a2c import A2C
from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.dqn import DQN
from rl_lightning.algorithms.ppo import PPO
from rl_lightning.algorithms.reinforce import REINFORCE

__all__ = ["A2C", "DQN", "PPO", "REINFORCE", "RLModule"]
