"""The gymnasium backend (``env.backend: gymnasium``, the default): gymnasium's own envs, any registered
id or a user's ``module:Name``, in a ``SyncVectorEnv`` (``env.vectorization: sync``) or an
``AsyncVectorEnv`` (``async``, one process per sub-env), ``SAME_STEP`` autoreset.

Each sub-env is made, wrapped (gymnasium's ``RecordEpisodeStatistics`` innermost, so returns are the
env's own whatever later wrappers do; then the user's ``env.wrappers``) and flattened when its
observations are not a ``Box`` or its ``Box`` actions not a vector (a scalar observation becomes a
1-vector; a scalar or matrix of actions is given to the networks flat, reshaped on its way to the env).
Atari ids get ``rl_lightning.envs.atari``'s preprocessing. MinAtar's ids (``MinAtar/Breakout-v1``, ...;
Young & Tian 2019) are registered from the ``minatar`` package when first asked for; their 10x10 boolean
frames get the MinAtar CNN (``networks.encoders``). Its steps return numpy arrays on the host.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import logging
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from rl_lightning.envs.atari import is_atari, make_atari_env, register_ale
from rl_lightning.envs.backend import Build, EnvBackend
from rl_lightning.errors import ConfigError

if TYPE_CHECKING:
    from rl_lightning.envs.make import EnvConfig


class GymnasiumBackend(EnvBackend):
    """gymnasium's envs in a gymnasium vector env; see the module docstring."""

    name = "gymnasium"

    def check_env_id(self, env_id: str) -> None:
        """Fail at once, with close matches, on an id gymnasium does not know. ``module:Name`` imports the
        module first (gymnasium's form for envs a package registers on import); ``module:EnvClass`` is a
        ``gymnasium.Env`` subclass."""
        if ":" in env_id:
            _env_entry_point(env_id)
            return
        if env_id in gym.envs.registry:
            return
        has_ale = register_ale()  # ale-py's ids exist only once it is imported
        has_minatar = register_minatar()  # as MinAtar's once registered
        if env_id in gym.envs.registry:
            return
        if env_id.startswith("ALE/") and not has_ale:
            raise ConfigError(f"{env_id!r} needs ale-py: pip install 'rl-lightning[atari]'.")
        if env_id.startswith(MINATAR_PREFIX) and not has_minatar:
            raise ConfigError(f"{env_id!r} needs MinAtar: pip install minatar.")
        close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=5, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ConfigError(
            f"Unknown environment id {env_id!r}: it is not registered with gymnasium.{hint} Your own env: "
            "'my_package.envs:MyEnv-v0' (a module that registers it when imported) or 'my_package.envs:MyEnvClass'."
        )

    def make(self, config: EnvConfig, build: Build) -> gym.vector.VectorEnv:
        make = functools.partial(_make_env, config, build.render_mode, build.training)
        probe = make()  # the errors of a bad config here, in this process; and the space before flattening
        structured = probe.env.observation_space if isinstance(probe, gym.wrappers.FlattenObservation) else None
        frame_stack = _frame_stack(probe)
        time_limit = probe.spec.max_episode_steps if probe.spec is not None else None  # after the user's wrappers
        probe.close()
        mode = gym.vector.AutoresetMode.SAME_STEP
        if config.vectorization == "async":
            envs = gym.vector.AsyncVectorEnv([make] * build.num_envs, autoreset_mode=mode)
        else:
            envs = gym.vector.SyncVectorEnv([make] * build.num_envs, autoreset_mode=mode)
        envs.structured_observation_space = structured or envs.single_observation_space
        envs.frame_stack = frame_stack
        envs.time_limit = time_limit
        return envs

    def close_after_failure(self, envs: gym.vector.VectorEnv) -> None:
        """A dead async worker's pipe fails to close cleanly: its workers are terminated."""
        with contextlib.suppress(Exception):
            envs.close(terminate=True) if isinstance(envs, gym.vector.AsyncVectorEnv) else envs.close()


MINATAR_PREFIX = "MinAtar/"


def register_minatar() -> bool:
    """Register MinAtar's gymnasium ids (``MinAtar/<Game>-v0``: all 6 actions, ``-v1``: the game's minimal
    action set); False when minatar is not installed."""
    if any(env_id.startswith(MINATAR_PREFIX) for env_id in gym.envs.registry):
        return True
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # minatar warns on import that it cannot render without seaborn
    try:
        import minatar.gym
    except ImportError:
        return False
    finally:
        root.setLevel(level)
    minatar.gym.register_envs()
    return True


def _env_entry_point(env_id: str) -> gym.envs.registration.EnvSpec | str:
    """What ``gym.make`` takes for a ``module:Name`` id: the id itself when importing the module
    registered ``Name``, or a spec whose entry point is the class ``module.Name``."""
    module_name, _, name = env_id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"env_id {env_id!r}: cannot import {module_name!r} ({e}).") from e
    if name in gym.envs.registry:
        return env_id
    target = getattr(module, name, None)
    if isinstance(target, type) and issubclass(target, gym.Env):
        return gym.envs.registration.EnvSpec(id=name, entry_point=target)
    raise ConfigError(
        f"env_id {env_id!r}: importing {module_name!r} registered no env {name!r}, and it has no gymnasium.Env "
        f"class {name!r}."
    )


def _make_env(config: EnvConfig, render_mode: str | None, training: bool) -> gym.Env:
    """One sub-env: made, wrapped (episode statistics innermost, then the user's wrappers), and
    flattened when its observations are not a ``Box`` (a scalar ``Box`` becomes a 1-vector) or its ``Box``
    actions are not a vector."""
    if is_atari(config.env_id):
        env = make_atari_env(config.env_id, config.env_kwargs, render_mode, training)
    else:
        if config.env_id.startswith(MINATAR_PREFIX):
            register_minatar()  # also in AsyncVectorEnv's worker processes
        # render_mode only when asked: custom envs need not accept it.
        kwargs = config.env_kwargs if render_mode is None else {**config.env_kwargs, "render_mode": render_mode}
        target = _env_entry_point(config.env_id) if ":" in config.env_id else config.env_id
        try:
            env = gym.make(target, **kwargs)
        except TypeError as e:  # an argument the env does not take
            raise ConfigError(f"env.env_kwargs {config.env_kwargs} for {config.env_id!r}: {e}") from e
        env = gym.wrappers.RecordEpisodeStatistics(env)
    for i, wrapper in enumerate(config.wrappers):
        env = _apply_wrapper(env, wrapper, i)
    actions = env.action_space
    if isinstance(actions, gym.spaces.Box) and len(actions.shape) != 1:
        # The networks' actions are vectors: a scalar or matrix Box is given to them flat and reshaped on its way to
        # the env (as structured observations are flattened on theirs).
        unflatten = functools.partial(gym.spaces.utils.unflatten, actions)
        env = gym.wrappers.TransformAction(env, unflatten, gym.spaces.utils.flatten_space(actions))
    # Outermost, where make() looks for the structure of flattened observations.
    if not isinstance(env.observation_space, gym.spaces.Box):
        env = _flattened(env, config.env_id)
    elif env.observation_space.shape == ():  # a scalar: a batch of them is a [n, 1] tensor
        env = gym.wrappers.ReshapeObservation(env, (1,))
    return env


def _apply_wrapper(env: gym.Env, wrapper: str | dict[str, Any], index: int) -> gym.Env:
    spec = {"class_path": wrapper} if isinstance(wrapper, str) else dict(wrapper)
    path, init_args = spec.pop("class_path", None), spec.pop("init_args", {}) or {}
    where = f"env.wrappers[{index}]"
    if not isinstance(path, str) or spec:
        raise ConfigError(
            f"{where}: expected a class path or {{class_path: ..., init_args: {{...}}}}, got {wrapper!r}."
        )
    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{where}: no wrapper {path!r} ({e}).") from e
    # YAML has no tuples; gymnasium's wrappers take shapes as tuples (ResizeObservation).
    init_args = {k: tuple(v) if isinstance(v, list) else v for k, v in init_args.items()}
    try:
        return cls(env, **init_args)
    except (TypeError, ValueError, AssertionError) as e:
        raise ConfigError(f"{where} ({path}) with {init_args}: {e}") from e


def _flattened(env: gym.Env, env_id: str) -> gym.Env:
    space = env.observation_space
    try:
        env = gym.wrappers.FlattenObservation(env)
    except (NotImplementedError, ValueError):
        pass
    # gymnasium "flattens" a Graph or Sequence into itself: sizes that vary from one observation to the next.
    if not isinstance(env.observation_space, gym.spaces.Box):
        raise ConfigError(
            f"{env_id!r} has observations of {space}, which cannot be flattened into tensors of a fixed size. Add "
            "a wrapper (env.wrappers) that turns them into a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple "
            "space."
        )
    return env


def _frame_stack(env: gym.Env) -> int:
    """``k`` where the observations are ``k`` stacked frames, the newest last (gymnasium's
    ``FrameStackObservation`` outermost among the wrappers that change observations: Atari's, or one
    from ``env.wrappers``), else 1. A replay buffer then stores each frame once."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.FrameStackObservation):
            return int(env.stack_size)
        if isinstance(env, gym.ObservationWrapper):
            return 1
        env = env.env
    return 1
