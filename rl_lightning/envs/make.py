"""Vector environments from a small typed config.

Every env rl_lightning trains on is a gymnasium vector env in ``SAME_STEP`` autoreset mode: when a
sub-env's episode ends, ``step`` returns the first observation of the next episode and puts the true
last observation in ``info["final_obs"]``. That keeps one transition per step (no dummy reset steps in
a rollout) and gives the observation needed to bootstrap a truncated episode.

Episode statistics come from gymnasium's own ``RecordEpisodeStatistics``, wrapped around each
sub-env innermost, so returns are the env's true returns whatever the later wrappers (reward
clipping, episodic life) do; they arrive in ``info["final_info"]["episode"]``.

Observation spaces other than ``Box`` (``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Dict``,
``Tuple``) are flattened per sub-env by gymnasium's ``FlattenObservation`` (one-hot for discrete
parts), so every algorithm stores one flat tensor per observation; the structured space is kept on
the vector env (``structured_observation_space``) for the networks, which read the flat tensor
through it (``rl_lightning.networks.encoders``).

User envs: ``env_id`` is a registered id, gymnasium's ``"module:EnvId"`` (the module is imported and
registers the id) or ``"module.path:EnvClass"`` (a ``gymnasium.Env`` subclass, made directly);
``env.wrappers`` lists gymnasium wrappers (class path and keyword arguments) applied to every
sub-env, in training and evaluation alike.

With ``backend="torch"`` the env is one of ``rl_lightning.envs.torch``'s batched, pure-torch
ports of the classic-control envs instead: same API and info keys, tensors on a device. With
``backend="envpool"`` it is envpool's C++ vector env for the same id (``rl_lightning.envs.envpool_backend``:
Atari, MuJoCo, classic control), with the same semantics.

Atari ids (registered by ale-py, the ``atari`` extra) get the standard preprocessing of
``rl_lightning.envs.atari``; its training-only wrappers (episodic life, reward clipping) are left out
when ``training=False`` (evaluation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.envs.atari import FRAME_STACK, is_atari, make_atari_env, register_ale
from rl_lightning.envs.envpool_backend import EnvpoolVectorEnv, envpool_task
from rl_lightning.envs.torch import TorchVectorEnv, make_torch_env
from rl_lightning.errors import ConfigError
from rl_lightning.validation import at_least, one_of


@dataclass
class EnvConfig:
    """What to build: which env, how many copies, how they run.

    Args:
        env_id: A registered gymnasium id, e.g. ``CartPole-v1``.
        num_envs: Sub-environments stepped together on each rank.
        seed: Seed of the first sub-env (the others get ``seed + i``; each rank is offset by
            ``rank * num_envs``). ``None`` draws it from torch's RNG, so ``seed_everything`` fixes it.
        vectorization: ``sync`` steps the sub-envs in this process (fastest for cheap envs such as
            classic control); ``async`` gives each its own process (for expensive envs).
        env_kwargs: Extra keyword arguments for ``gymnasium.make`` (the torch envs take the same ones).
        backend: ``gymnasium`` builds gymnasium's envs in a vector env (any registered id);
            ``torch`` builds the batched pure-torch implementation (``rl_lightning.envs.torch``:
            CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0) on the
            module's device, so whole rollouts stay there (``vectorization`` is then ignored).
            Evaluation plays gymnasium's env. ``envpool`` builds envpool's C++ thread-pool vector
            env for the same id (the ``envpool`` extra; Atari, MuJoCo, classic control; threads:
            ``env_kwargs: {num_threads: N}``, ``vectorization`` ignored); evaluation plays
            envpool's env too.
        wrappers: gymnasium wrappers applied to every sub-env, in training and evaluation, innermost
            first, each a class path (``gymnasium.wrappers.FlattenObservation``) or ``{class_path: ...,
            init_args: {...}}`` (``{class_path: gymnasium.wrappers.FrameStackObservation, init_args:
            {stack_size: 4}}``). They wrap the env after the episode statistics, so logged returns stay
            the env's own.
        restart_on_failure: When stepping the envs fails (a sub-env process killed by the OOM killer,
            a simulator that crashed), close them, build them anew and collect again, up to 3 times in
            a row; the restarts are logged as ``rollout/env_restarts``. The interrupted rollout or
            phase is dropped (a phase's transitions already in the replay buffer stay, their episodes
            cut as truncations). Off: the run stops with the error and a checkpoint to resume from.

    Atari ids (``ALE/Pong-v5``, ...) are preprocessed automatically (``rl_lightning.envs.atari``).
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 8
    seed: int | None = None
    vectorization: Literal["sync", "async"] = "sync"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    backend: Literal["gymnasium", "torch", "envpool"] = "gymnasium"
    wrappers: list[str | dict[str, Any]] = field(default_factory=list)
    restart_on_failure: bool = False

    def check(self) -> None:
        """``ConfigError`` naming the field and its value (the env id is checked in ``setup``: ``check_env_id``)."""
        at_least("env.num_envs", self.num_envs, 1)
        one_of("env.vectorization", self.vectorization, ("sync", "async"))
        one_of("env.backend", self.backend, ("gymnasium", "torch", "envpool"))


def check_env_id(env_id: str, backend: str = "gymnasium") -> None:
    """Fail at once, with close matches, on an id gymnasium does not know. ``module:Name`` imports the
    module first (gymnasium's form for envs a package registers on import); ``module:EnvClass`` is a
    ``gymnasium.Env`` subclass. The envpool backend takes only the ids envpool provides."""
    if backend == "envpool":
        envpool_task(env_id)
        return
    if ":" in env_id:
        _env_entry_point(env_id)
        return
    if env_id in gym.envs.registry:
        return
    has_ale = register_ale()  # ale-py's ids exist only once it is imported
    if env_id in gym.envs.registry:
        return
    if env_id.startswith("ALE/") and not has_ale:
        raise ConfigError(f"{env_id!r} needs ale-py: pip install 'rl-lightning[atari]'.")
    close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"Unknown environment id {env_id!r}: it is not registered with gymnasium.{hint} Your own env: "
        "'my_package.envs:MyEnv-v0' (a module that registers it when imported) or 'my_package.envs:MyEnvClass'."
    )


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
    flattened when its observations are not a ``Box``."""
    if is_atari(config.env_id):
        env = make_atari_env(config.env_id, config.env_kwargs, render_mode, training)
    else:
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
    if not isinstance(env.observation_space, gym.spaces.Box):
        env = _flattened(env, config.env_id)
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
    try:
        return gym.wrappers.FlattenObservation(env)
    except NotImplementedError as e:
        raise ConfigError(
            f"{env_id!r} has observations of {env.observation_space}, which cannot be flattened into tensors. "
            "Add a wrapper (env.wrappers) that turns them into a Box, Discrete, Dict or Tuple space."
        ) from e


def make_vector_env(
    config: EnvConfig,
    num_envs: int | None = None,
    render_mode: str | None = None,
    device: torch.device | str = "cpu",
    training: bool = True,
) -> gym.vector.VectorEnv:
    """Build ``num_envs`` (default ``config.num_envs``) copies of ``config.env_id``, unseeded.

    Seeding happens at the first ``reset(seed=...)``, done by the caller who knows its rank.
    ``device`` places a torch-backend env (gymnasium envs live on the host). ``training=False``
    (evaluation) leaves out training-only wrappers (Atari: episodic life, reward clipping), so returns
    are the true game scores. The vector env's ``structured_observation_space`` is the sub-envs'
    observation space before flattening (``single_observation_space`` after).
    """
    check_env_id(config.env_id, config.backend)
    n = config.num_envs if num_envs is None else num_envs
    if config.backend == "envpool":
        if render_mode is not None or config.wrappers:
            raise ConfigError(
                "The envpool backend neither renders nor takes env.wrappers (its envs are C++); use "
                "env.backend=gymnasium for videos and wrappers."
            )
        envs = EnvpoolVectorEnv(config.env_id, n, config.env_kwargs, training=training)
        envs.structured_observation_space = envs.single_observation_space
        envs.frame_stack = FRAME_STACK if envs.atari else 1  # envpool stacks Atari frames itself
        return envs
    if config.backend == "torch":
        if render_mode is not None:
            raise ConfigError("The torch backend does not render; use env.backend=gymnasium to record videos.")
        envs = make_torch_env(config.env_id, n, device=device, **config.env_kwargs)
        envs.structured_observation_space = envs.single_observation_space
        envs.frame_stack = 1
        return envs
    make = functools.partial(_make_env, config, render_mode, training)
    probe = make()  # the errors of a bad config here, in this process; and the space before flattening
    structured = probe.env.observation_space if isinstance(probe, gym.wrappers.FlattenObservation) else None
    frame_stack = _frame_stack(probe)
    probe.close()
    mode = gym.vector.AutoresetMode.SAME_STEP
    if config.vectorization == "async":
        envs = gym.vector.AsyncVectorEnv([make] * n, autoreset_mode=mode)
    else:
        envs = gym.vector.SyncVectorEnv([make] * n, autoreset_mode=mode)
    envs.structured_observation_space = structured or envs.single_observation_space
    envs.frame_stack = frame_stack
    return envs


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


def backend_tag(backend: str | None) -> str:
    """A backend's part of a run's name: none for the default (gymnasium), else ``_torch``, ``_envpool``."""
    return f"_{backend}" if backend not in (None, EnvConfig.backend) else ""


def steps_on_device(envs: gym.vector.VectorEnv) -> bool:
    """Whether ``envs`` take and return tensors on their device (the torch backend): a collector then
    keeps everything there, with no host copy per step."""
    return isinstance(envs, TorchVectorEnv)


def env_spaces(config: EnvConfig) -> tuple[gym.Space, gym.Space]:
    """The observation space (structured, before flattening) and action space of one sub-env, read from
    an env made once for it."""
    envs = make_vector_env(config, num_envs=1)
    try:
        return envs.structured_observation_space, envs.single_action_space
    finally:
        envs.close()


def remake_vector_env(
    envs: gym.vector.VectorEnv, config: EnvConfig, device: torch.device | str
) -> gym.vector.VectorEnv:
    """Close ``envs`` after a failure (a dead async worker's pipe fails to close cleanly: its workers are
    terminated) and make them anew (``env.restart_on_failure``)."""
    with contextlib.suppress(Exception):
        envs.close(terminate=True) if isinstance(envs, gym.vector.AsyncVectorEnv) else envs.close()
    return make_vector_env(config, device=device)


def eval_env_config(config: EnvConfig, render_mode: str | None) -> EnvConfig:
    """The env config evaluation plays: the training env's backend, or gymnasium's env when training on the
    torch backend (its evaluation plays the reference implementation) or to render (envpool does not)."""
    backend = "gymnasium" if config.backend == "torch" or render_mode else config.backend
    return dataclasses.replace(config, backend=backend)


def episode_stats(infos: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(ended, returns, lengths)`` over all sub-envs for the episodes that ended in this vector
    step (``ended`` is the mask of valid entries), or None when none ended: numpy arrays from
    gymnasium envs; tensors from torch envs, which always return them (all-False ``ended`` when no
    episode ended), so that no step has to sync with the device."""
    final = infos.get("final_info")
    if not final or "episode" not in final:
        return None
    return final["_episode"], final["episode"]["r"], final["episode"]["l"]


class EpisodeLog:
    """Returns and lengths of the training episodes that ended, gathered per vector step and taken
    out once per log step."""

    def __init__(self) -> None:
        self.returns: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []

    def record(self, infos: dict[str, Any]) -> None:
        """Keep the episodes that ended in a gymnasium vector step (``infos`` as ``step`` returns it)."""
        if (stats := episode_stats(infos)) is not None:
            ended, returns, lengths = stats
            self.add(returns[ended], lengths[ended])

    def add(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        self.returns.append(returns)
        self.lengths.append(lengths)

    def pop(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns and lengths of the episodes recorded since the last call."""
        returns = np.concatenate(self.returns) if self.returns else np.zeros(0)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0)
        self.returns.clear()
        self.lengths.clear()
        return returns, lengths
