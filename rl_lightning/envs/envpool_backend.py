"""The envpool backend (``env.backend: envpool``, the ``envpool`` extra): envpool's C++ thread-pool
vector envs behind the interface of the gymnasium path.

The ids are gymnasium's, so a config switches backend without changing its env: Atari
(``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``), MuJoCo (``HalfCheetah-v5``, ...) and classic control
(``CartPole-v1``, ...), wherever envpool has the same env. What stays the same as the gymnasium path:

- ``SAME_STEP`` autoreset: a sub-env whose episode ended is reset in the same ``step`` (envpool
  resets it on its next step instead), its last observation in ``info["final_obs"]``.
- Episode statistics in ``info["final_info"]["episode"]`` (``r``, ``l``, mask ``_episode``): true
  returns, counted here from the env's own rewards; for Atari, unclipped game scores at game over,
  lengths in emulator frames (agent steps x 4).
- Atari preprocessing as in ``rl_lightning.envs.atari``, by envpool's built-in options: no-ops at
  reset, action repeat 4 with a max over the last two frames, 84x84 grayscale, 4 stacked frames,
  FIRE at reset; in training only, a lost life ends the episode (the game goes on) and rewards are
  clipped to their sign, both done here so that episode statistics see the real game.
- Sticky actions as gymnasium registers the id: 0.25 for v5 ids, none for ``NoFrameskip-v4``.
- Seeds: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (a list: one seed each). envpool fixes
  seeds when it builds its pool, so a seeded reset builds a new one.

What differs, with reasons:

- envpool draws ``0 .. noop_max - 1`` no-ops at reset, gymnasium ``1 .. noop_max``; ``noop_max: 0``
  (no no-ops, for exact comparisons) is passed to envpool as 1, its own spelling of none.
- After a lost life the gymnasium path presses no-op and FIRE for the agent (games such as Breakout
  wait for it); envpool steps all sub-envs together, so here the agent presses FIRE itself, as in
  CleanRL's envpool runs. Pong has no lives: no difference there.
- envpool builds its own emulator and physics (the same ALE ROMs and MuJoCo models); episodes on a
  seed are not the same as gymnasium's on that seed.
- Only envpool's synchronous mode (every sub-env steps on every call, each call spread over the
  pool's threads): the collectors fill one row per vector step for all sub-envs. Its asynchronous
  mode (``batch_size < num_envs``, whichever sub-envs finish first) would pay where the envs are the
  bottleneck and their step times vary; on CPU the networks are (docs/benchmarks.md, "Env backends").

``env_kwargs`` go to ``envpool.make`` (Atari's ``frame_stack``, as on the gymnasium path, as its
``stack_num``): the env's options (``repeat_action_probability``,
``noop_max``, ``ctrl_cost_weight``, ...) and the pool's (``num_threads``: worker threads, default
one per sub-env up to the cores; ``thread_affinity_offset``).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rl_lightning.envs.atari import FRAME_STACK, atari_frame_stack, is_atari, register_ale
from rl_lightning.envs.backend import Build, EnvBackend
from rl_lightning.errors import ConfigError

if TYPE_CHECKING:
    from rl_lightning.envs.make import EnvConfig

ATARI_FRAME_SKIP = 4
STICKY_ACTIONS_V5 = 0.25  # gymnasium's ALE/*-v5 default (Machado et al. 2018)


@functools.cache
def envpool_ids() -> frozenset[str]:
    return frozenset(_envpool().list_all_envs())


def _envpool() -> Any:
    try:
        import envpool
    except ImportError as e:
        raise ConfigError("env.backend envpool needs envpool: pip install 'rl-lightning[envpool]' (Linux).") from e
    return envpool


def envpool_task(env_id: str) -> tuple[str, dict[str, Any]]:
    """envpool's task id and options for gymnasium's ``env_id``; a one-line ``ConfigError`` naming
    the ids this backend takes when envpool has no such env."""
    ids = envpool_ids()
    register_ale()
    if is_atari(env_id):
        spec = gym.spec(env_id)
        match = re.fullmatch(r"(?:ALE/)?(\w+?)(NoFrameskip-v4|-v5)", env_id)
        game = f"{match.group(1)}-v5" if match else None
        if game in ids and spec.kwargs.get("obs_type", "rgb") == "rgb":
            sticky = spec.kwargs.get("repeat_action_probability", STICKY_ACTIONS_V5)
            return game, {
                "repeat_action_probability": sticky,
                "max_episode_steps": spec.kwargs.get("max_num_frames_per_episode", 108_000) // ATARI_FRAME_SKIP,
                "frame_skip": ATARI_FRAME_SKIP,
                "stack_num": FRAME_STACK,
                "img_height": 84,
                "img_width": 84,
                "gray_scale": True,
                "noop_max": 30,
                "use_fire_reset": True,
                "episodic_life": False,  # done here: envpool's own restarts the game on a reset
                "reward_clip": False,  # done here: episode statistics count real scores
            }
    elif env_id in ids and env_id in gym.envs.registry:
        return env_id, {}
    close = difflib.get_close_matches(env_id, [i for i in ids if i in gym.envs.registry], n=3, cutoff=0.6)
    hint = f" Close: {', '.join(close)}." if close else ""
    raise ConfigError(
        f"env.backend envpool has no env {env_id!r}: it takes gymnasium's ids of the envs envpool provides, "
        f"Atari (ALE/<Game>-v5, <Game>NoFrameskip-v4), MuJoCo (HalfCheetah-v5, Hopper-v5, ...) and classic "
        f"control (CartPole-v1, Pendulum-v1, ...).{hint} Other envs: env.backend gymnasium."
    )


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """A gymnasium vector env (``SAME_STEP`` autoreset) over one envpool pool; see the module
    docstring for what it keeps and what differs."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    env_backend = "envpool"

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any], training: bool = True) -> None:
        self.env_id = env_id
        self.task_id, options = envpool_task(env_id)
        self.atari = "stack_num" in options
        env_kwargs = dict(env_kwargs)
        if self.atari:  # gymnasium's path's name for envpool's stack_num
            options["stack_num"] = atari_frame_stack(env_kwargs)
        self.options = {**options, **env_kwargs}
        if self.atari and self.options["noop_max"] == 0:
            self.options["noop_max"] = 1  # envpool's "none" (0 is not accepted)
        self.num_envs = num_envs
        self.training = training
        self.pool = self._make_pool(list(range(num_envs)))
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.lives = np.zeros(num_envs, dtype=np.int64)

    def _make_pool(self, seeds: list[int]) -> Any:
        kwargs = {"num_threads": min(self.num_envs, len(os.sched_getaffinity(0))), **self.options}
        try:
            with warnings.catch_warnings():  # envpool's float64 Box bounds, cast to float32 by gymnasium
                warnings.filterwarnings("ignore", ".*precision lowered by casting", UserWarning)
                pool = _envpool().make(
                    self.task_id, env_type="gymnasium", num_envs=self.num_envs, env_seed=seeds, **kwargs
                )
                _ = pool.observation_space, pool.action_space  # built (and warned about) here, once
                return pool
        except TypeError as e:  # an option the env does not take
            raise ConfigError(f"env.env_kwargs for {self.env_id!r} on envpool: {e}") from e

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else [int(s) for s in seed]
            self.pool.close()
            self.pool = self._make_pool(seeds)
        obs, info = self.pool.reset()
        self.returns[:] = 0.0
        self.lengths[:] = 0
        if self.atari:
            self.lives[:] = info["lives"]
        return np.array(obs), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, info = self.pool.step(np.asarray(actions))
        obs = np.array(obs)  # our own copy: envpool's buffers are reused
        self.returns += rewards
        self.lengths += ATARI_FRAME_SKIP if self.atari else 1
        game_over = terminated | truncated
        ended = game_over
        if self.atari and self.training:
            # Episodic life: a lost life ends the episode for learning; the game goes on from obs.
            lost_life = (info["lives"] < self.lives) & ~game_over
            self.lives[:] = info["lives"]
            terminated = terminated | lost_life
            ended = game_over | lost_life
            rewards = np.sign(rewards)
        infos: dict[str, Any] = {}
        if ended.any():
            infos["final_obs"], infos["_final_obs"] = obs.copy(), ended
        if game_over.any():
            idx = np.flatnonzero(game_over)
            episode = {"r": self.returns.copy(), "l": self.lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": game_over}
            infos["_final_info"] = game_over
            first_obs, first_info = self.pool.reset(idx.astype(np.int32))
            obs[idx] = first_obs
            self.returns[idx] = 0.0
            self.lengths[idx] = 0
            if self.atari:
                self.lives[idx] = first_info["lives"]
        return obs, rewards.astype(np.float64), terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


class EnvpoolBackend(EnvBackend):
    """envpool's envs (``EnvpoolVectorEnv``); see the module docstring."""

    name = "envpool"

    def check_env_id(self, env_id: str) -> None:
        envpool_task(env_id)

    def make(self, config: EnvConfig, build: Build) -> gym.vector.VectorEnv:
        if build.render_mode is not None or config.wrappers:
            raise ConfigError(
                "The envpool backend neither renders nor takes env.wrappers (its envs are C++); use "
                "env.backend=gymnasium for videos and wrappers."
            )
        envs = EnvpoolVectorEnv(config.env_id, build.num_envs, config.env_kwargs, training=build.training)
        envs.structured_observation_space = envs.single_observation_space
        envs.frame_stack = envs.options["stack_num"] if envs.atari else 1  # envpool stacks Atari frames itself
        envs.time_limit = envs.pool.spec.config.max_episode_steps
        return envs

    def evaluation_backend(self, render_mode: str | None) -> str:
        """envpool's env, or gymnasium's to render (envpool does not)."""
        return "gymnasium" if render_mode else self.name
