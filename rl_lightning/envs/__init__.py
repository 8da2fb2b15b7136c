from rl_lightning.envs.backend import EnvBackend, episode_stats
from rl_lightning.envs.backends import BACKENDS
from rl_lightning.envs.make import EnvConfig, check_env_id, make_vector_env

__all__ = ["BACKENDS", "EnvBackend", "EnvConfig", "check_env_id", "episode_stats", "make_vector_env"]
