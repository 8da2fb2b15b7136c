"""rl_lightning: deep reinforcement learning as PyTorch Lightning modules."""

from rl_lightning.algorithms import A2C, DQN, PPO, REINFORCE, RLModule
from rl_lightning.envs import EnvConfig, make_vector_env

__version__ = "0.1.0"
__all__ = ["A2C", "DQN", "PPO", "REINFORCE", "EnvConfig", "RLModule", "make_vector_env"]
