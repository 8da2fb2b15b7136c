"""rl_lightning: deep reinforcement learning as PyTorch Lightning modules."""

from rl_lightning.algorithms import DDPG, DQN, PPO, SAC, TD3, RLModule
from rl_lightning.envs import EnvConfig, make_vector_env

__version__ = "0.1.0"
__all__ = ["DDPG", "DQN", "PPO", "SAC", "TD3", "EnvConfig", "RLModule", "make_vector_env"]
