from rl_lightning.envs.make import EnvConfig, check_env_id, episode_stats, make_vector_env

__all__ = ["EnvConfig", "check_env_id", "episode_stats", "make_vector_env"]
