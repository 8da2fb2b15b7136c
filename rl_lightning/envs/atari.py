"""Atari preprocessing (Mnih et al. 2015; Machado et al. 2018), from gymnasium's own wrappers.

Applied automatically by ``make_vector_env`` to every id that ale-py registers (``ALE/Pong-v5``,
``PongNoFrameskip-v4``, ...). Inside out:

1. ``gym.make(id, frameskip=1)``: the emulator steps one frame; ``AtariPreprocessing`` skips frames.
2. ``RecordEpisodeStatistics``, innermost: episode returns are real, unclipped game scores at real
   game over (lengths count emulator frames, as in SB3 and CleanRL).
3. ``AtariPreprocessing``: up to 30 no-op actions at reset, action repeat 4 with a max over the last
   two frames, 84x84 grayscale.
4. Training only: ``EpisodicLifeEnv`` (a lost life ends the episode for learning, not the game).
5. ``FireResetEnv`` for games that wait for FIRE (Breakout): FIRE after each reset. In evaluation,
   where lives do not end episodes, it also presses FIRE after a lost life, as the agent saw in
   training; otherwise a greedy agent can wait forever for a ball that never comes.
6. Training only: rewards clipped to their sign (``TransformReward(np.sign)``).
7. ``FrameStackObservation(4)``: uint8 observations of shape (4, 84, 84).
   ``env_kwargs={"frame_stack": k}`` stacks ``k`` frames instead (1: single frames, shape (1, 84, 84), as
   for a recurrent policy that remembers the past itself; CleanRL's ``ppo_atari_lstm``).

v5 ids keep their defaults, including sticky actions (``repeat_action_probability=0.25``, Machado
et al. 2018); pass ``env_kwargs={"repeat_action_probability": 0.0}`` for the Nature setting.
``env_kwargs={"noop_max": N}`` changes the most no-ops at reset (0: none).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rl_lightning.errors import ConfigError

FRAME_STACK = 4
FIRE = 1  # the FIRE action's index in every game whose action meanings include it


def register_ale() -> bool:
    """Register ale-py's ids with gymnasium; False when ale-py is not installed."""
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


def atari_frame_stack(env_kwargs: dict[str, Any]) -> int:
    """Pops ``frame_stack`` (the frames an observation stacks, ``FRAME_STACK`` unless given) from
    ``env_kwargs``; one line for anything but a positive int."""
    k = env_kwargs.pop("frame_stack", FRAME_STACK)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"env.env_kwargs frame_stack must be a positive int (frames per observation), got {k!r}.")
    return k


def is_atari(env_id: str) -> bool:
    if env_id not in gym.envs.registry:
        return False
    entry = gym.envs.registry[env_id].entry_point
    return isinstance(entry, str) and entry.startswith("ale_py")


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life ends the episode (``terminated``) but the game goes on: ``reset`` then takes a
    no-op step instead of restarting, and restarts only after a real game over (Mnih et al. 2015;
    SB3's ``EpisodicLifeEnv``). For training only: the value of a state no longer counts the lives
    left, and episode returns stay those of whole games (``RecordEpisodeStatistics`` sits inside)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # no-op: carry on with the next life
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE after each reset (games such as Breakout wait for it; SB3's ``FireResetEnv``) and,
    with ``fire_on_life_loss``, after each lost life."""

    def __init__(self, env: gym.Env, fire_on_life_loss: bool = False) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if len(meanings) <= FIRE or meanings[FIRE] != "FIRE":
            raise ValueError(f"FireResetEnv needs FIRE as action {FIRE}; the game has {meanings}.")
        self.fire_on_life_loss = fire_on_life_loss
        self.lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(FIRE)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if self.fire_on_life_loss and lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(FIRE)
            reward += fire_reward
            lives = self.env.unwrapped.ale.lives()
        self.lives = lives
        return obs, reward, terminated, truncated, info


def make_atari_env(env_id: str, env_kwargs: dict[str, Any], render_mode: str | None, training: bool) -> gym.Env:
    """One preprocessed Atari env (see the module docstring)."""
    register_ale()  # also in AsyncVectorEnv's worker processes
    kwargs = {"frameskip": 1, **env_kwargs}
    noop_max = kwargs.pop("noop_max", 30)
    frame_stack = atari_frame_stack(kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(env_id, **kwargs)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=84, grayscale_obs=True)
    if training:
        env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env, fire_on_life_loss=not training)
    if training:
        env = gym.wrappers.TransformReward(env, np.sign)
    return gym.wrappers.FrameStackObservation(env, frame_stack)
