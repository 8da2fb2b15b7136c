"""rl_lightning: deep reinforcement learning as PyTorch Lightning modules."""

from rl_lightning.algorithms import DQN, PPO, RLModule
from rl_lightning.envs import EnvConfig, make_vector_env

__version__ = "0.1.0"
__all__ = ["DQN", "PPO", "EnvConfig", "RLModule", "make_vector_env"]
