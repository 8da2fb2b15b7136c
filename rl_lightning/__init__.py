"""rl_lightning: deep reinforcement learning as PyTorch Lightning modules."""

from rl_lightning.algorithms import A2C, DDPG, DQN, PPO, REINFORCE, SAC, TD3, RLModule
from rl_lightning.envs import EnvConfig, make_vector_env

__version__ = "0.1.0"
__all__ = ["A2C", "DDPG", "DQN", "PPO", "REINFORCE", "SAC", "TD3", "EnvConfig", "RLModule", "make_vector_env"]
