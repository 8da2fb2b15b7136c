"""rl_lightning: deep reinforcement learning as PyTorch Lightning modules."""

import os

# Small RL networks gain nothing from intra-op thread pools but lose badly when cores are shared
# (envs, DDP ranks, other jobs): spin-waiting OpenMP/BLAS threads made PPO CartPole 10k env steps take
# 132 s instead of 7 s on 2 busy cores. Only effective if torch/numpy are not imported yet; set
# OMP_NUM_THREADS yourself to choose otherwise.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from rl_lightning.algorithms import (
    A2C,
    C51,
    DDPG,
    DQN,
    PPO,
    PQN,
    QRDQN,
    REINFORCE,
    SAC,
    TD3,
    TQC,
    CrossQ,
    RecurrentPPO,
    RLModule,
)
from rl_lightning.config import ReplayConfig, RunConfig
from rl_lightning.envs import EnvConfig, make_vector_env

__version__ = "0.1.0"
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
    "EnvConfig",
    "ReplayConfig",
    "RLModule",
    "RunConfig",
    "make_vector_env",
]
