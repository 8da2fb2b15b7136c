from rl_lightning.algorithms.a2c import A2C
from rl_lightning.algorithms.base import RLModule
from rl_lightning.algorithms.c51 import C51
from rl_lightning.algorithms.crossq import CrossQ
from rl_lightning.algorithms.ddpg import DDPG
from rl_lightning.algorithms.dqn import DQN
from rl_lightning.algorithms.ppo import PPO
from rl_lightning.algorithms.pqn import PQN
from rl_lightning.algorithms.qrdqn import QRDQN
from rl_lightning.algorithms.recurrent_ppo import RecurrentPPO
from rl_lightning.algorithms.reinforce import REINFORCE
from rl_lightning.algorithms.sac import SAC
from rl_lightning.algorithms.td3 import TD3
from rl_lightning.algorithms.tqc import TQC

__all__ = [
    "A2C",
    "C51",
    "DDPG",
    "DQN",
    "PPO",
    "PQN",
    "QRDQN",
    "REINFORCE",
    "RecurrentPPO",
    "SAC",
    "TD3",
    "TQC",
    "CrossQ",
    "RLModule",
]
