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

Who builds the envs is the config's ``backend``, looked up in the registry
``rl_lightning.envs.backends.BACKENDS`` (each backend one module implementing
``rl_lightning.envs.backend.EnvBackend``): ``gymnasium`` (``gymnasium_backend``, all of the above),
``torch`` (``torch_backend``: ``rl_lightning.envs.torch``'s batched, pure-torch ports of the
classic-control envs, tensors on a device) and ``envpool`` (``envpool_backend``: envpool's C++ vector
env for the same id), all with the same API and info keys. Nothing here names a backend: what differs
between them (ids, building, the evaluation env, where step tensors live, closing after a fault) is
asked of the backend.

Atari ids (registered by ale-py, the ``atari`` extra) get the standard preprocessing of
``rl_lightning.envs.atari``; its training-only wrappers (episodic life, reward clipping) are left out
when ``training=False`` (evaluation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.envs.backend import Build, episode_stats
from rl_lightning.envs.backends import BACKENDS, DEFAULT_BACKEND, backend_of
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
    backend: str = DEFAULT_BACKEND
    wrappers: list[str | dict[str, Any]] = field(default_factory=list)
    restart_on_failure: bool = False

    def check(self) -> None:
        """``ConfigError`` naming the field and its value (the env id is checked in ``setup``: ``check_env_id``)."""
        at_least("env.num_envs", self.num_envs, 1)
        one_of("env.vectorization", self.vectorization, ("sync", "async"))
        one_of("env.backend", self.backend, tuple(BACKENDS))


def check_env_id(env_id: str, backend: str = DEFAULT_BACKEND) -> None:
    """Fail at once, with close matches, on an id ``backend`` cannot build (gymnasium's: an id gymnasium
    does not know; ``module:Name`` imports the module first, ``module:EnvClass`` is a ``gymnasium.Env``
    subclass)."""
    one_of("env.backend", backend, tuple(BACKENDS))
    BACKENDS[backend].check_env_id(env_id)


def make_vector_env(
    config: EnvConfig,
    num_envs: int | None = None,
    render_mode: str | None = None,
    device: torch.device | str = "cpu",
    training: bool = True,
) -> gym.vector.VectorEnv:
    """Build ``num_envs`` (default ``config.num_envs``) copies of ``config.env_id``, unseeded.

    Seeding happens at the first ``reset(seed=...)``, done by the caller who knows its rank.
    ``device`` places an env whose steps stay on a device (the torch backend; others live on the
    host). ``training=False`` (evaluation) leaves out training-only wrappers (Atari: episodic life,
    reward clipping), so returns are the true game scores. The vector env's
    ``structured_observation_space`` is the sub-envs' observation space before flattening
    (``single_observation_space`` after); its ``env_backend`` names the backend that built it.
    """
    check_env_id(config.env_id, config.backend)
    n = config.num_envs if num_envs is None else num_envs
    envs = BACKENDS[config.backend].make(config, Build(n, render_mode, device, training))
    envs.env_backend = config.backend
    return envs


def backend_tag(backend: str | None) -> str:
    """A backend's part of a run's name: none for the default (gymnasium), else ``_torch``, ``_envpool``."""
    return f"_{backend}" if backend not in (None, EnvConfig.backend) else ""


def seeds_each_sub_env(envs: gym.vector.VectorEnv) -> bool:
    """Whether ``envs.reset`` takes one seed per sub-env (not the torch backend's one generator)."""
    return backend_of(envs).seeds_each_sub_env


def steps_on_device(envs: gym.vector.VectorEnv) -> bool:
    """Whether ``envs`` take and return tensors on their device (the torch backend): a collector then
    keeps everything there, with no host copy per step."""
    return backend_of(envs).steps_on_device


def env_device(envs: gym.vector.VectorEnv) -> torch.device:
    """Where the tensors of ``envs``' steps live (the host for numpy envs)."""
    return backend_of(envs).device(envs)


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
    """Close ``envs`` after a failure, as their backend closes them then, and make them anew
    (``env.restart_on_failure``)."""
    backend_of(envs).close_after_failure(envs)
    return make_vector_env(config, num_envs=envs.num_envs, device=device)  # a population's: all its members' sub-envs


def eval_env_config(config: EnvConfig, render_mode: str | None) -> EnvConfig:
    """The env config evaluation plays: the one the training backend names (``evaluation_backend``: the
    torch backend's evaluation plays gymnasium's reference implementation; envpool's renders with
    gymnasium's)."""
    return dataclasses.replace(config, backend=BACKENDS[config.backend].evaluation_backend(render_mode))


class EpisodeLog:
    """Returns and lengths of the training episodes that ended, gathered per vector step and taken
    out once per log step, with the sub-env each ended in (a population's member is its sub-env's).
    Each step's statistics are kept as the env returns them (numpy arrays, or tensors on the env's
    device) and masked when taken out, so recording never syncs with a device."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, Any, Any, np.ndarray]] = []

    def record(self, infos: dict[str, Any]) -> None:
        """Keep the episodes that ended in a vector step (``infos`` as ``step`` returns it)."""
        if (stats := episode_stats(infos)) is not None:
            self.steps.append((*stats, np.arange(len(stats[0]))))

    def add(self, returns: np.ndarray, lengths: np.ndarray, sub_envs: np.ndarray | None = None) -> None:
        """Keep the returns and lengths of episodes that ended (in ``sub_envs``, if known)."""
        where = np.zeros(len(returns), dtype=np.int64) if sub_envs is None else np.asarray(sub_envs)
        self.steps.append((np.ones(len(returns), dtype=bool), returns, lengths, where))

    def pop(self, with_sub_envs: bool = False) -> tuple[np.ndarray, ...]:
        """Returns and lengths (and, ``with_sub_envs``, the sub-env of each) of the episodes recorded since
        the last call."""
        returns, lengths, sub_envs = np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
        if self.steps:
            ended, returns, lengths = (_host_concat(column) for column in list(zip(*self.steps, strict=True))[:3])
            sub_envs = np.concatenate([step[3] for step in self.steps])
            returns, lengths, sub_envs = returns[ended], lengths[ended], sub_envs[ended]
        self.steps.clear()
        return (returns, lengths, sub_envs) if with_sub_envs else (returns, lengths)


def _host_concat(arrays: Any) -> np.ndarray:
    """One numpy array from a step's arrays or tensors: on a device, one copy for all of them."""
    if isinstance(arrays[0], torch.Tensor):
        return torch.cat([torch.as_tensor(a) for a in arrays]).cpu().numpy()
    return np.concatenate(arrays)
