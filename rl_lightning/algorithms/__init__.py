from rl_lightning.algorithms.a2c import A2C
from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.crossq import CrossQ
from rl_lightning.algorithms.ddpg import DDPG
from rl_lightning.algorithms.dqn import DQN
from rl_lightning.algorithms.ppo import PPO
from rl_lightning.algorithms.reinforce import REINFORCE
from rl_lightning.algorithms.sac import SAC
from rl_lightning.algorithms.td3 import TD3
from rl_lightning.algorithms.tqc import TQC

__all__ = ["A2C", "DDPG", "DQN", "PPO", "REINFORCE", "SAC", "TD3", "TQC", "CrossQ", "RLModule"]
