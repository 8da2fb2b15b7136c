"""``EnvBackend``: the one interface every env backend implements (``env.backend``).

A backend turns an ``EnvConfig`` into a gymnasium vector env that keeps the contract every collector
relies on, whatever runs the envs underneath:

- ``reset(seed=s)`` seeds the sub-envs (sub-env ``i`` with ``s + i``, or the batch's one generator);
- ``step`` autoresets in ``SAME_STEP`` mode: a sub-env whose episode ended returns the first
  observation of its next episode, its true last observation in ``infos["final_obs"]`` (valid where
  ``infos["_final_obs"]``);
- the episodes that ended are in ``infos["final_info"]["episode"]`` (``r``, ``l``, mask
  ``infos["final_info"]["_episode"]``), true returns whatever training-only wrappers do
  (``episode_stats`` reads them, the same for every backend);
- the vector env carries ``structured_observation_space`` (the space before flattening, for the
  networks), ``frame_stack`` (how many stacked frames an observation is, for the replay buffer) and
  ``env_backend`` (the backend's name in ``BACKENDS``).

What differs between backends is said here, once per backend, and read by ``rl_lightning.envs.make``
through the registry (``rl_lightning.envs.backends.BACKENDS``): which ids it takes, how it builds the
training and the evaluation env, where the tensors of its steps live, how it is closed after a fault.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch

if TYPE_CHECKING:
    from rl_lightning.envs.make import EnvConfig


@dataclass(frozen=True)
class Build:
    """How ``make_vector_env`` asks a backend for a vector env.

    Attributes:
        num_envs: Sub-envs.
        render_mode: gymnasium's render mode, or None (a backend that cannot render raises a ``ConfigError``).
        device: Where an env whose steps stay on a device puts its tensors (ignored by host envs).
        training: ``False`` (evaluation) leaves out training-only rules (Atari's episodic life and
            reward clipping), so returns are the true scores.
    """

    num_envs: int
    render_mode: str | None = None
    device: torch.device | str = "cpu"
    training: bool = True


class EnvBackend(abc.ABC):
    """One env backend: a stateless object, one per module, registered in ``BACKENDS`` by ``name``.

    Attributes:
        name: The ``env.backend`` value that selects it.
        steps_on_device: ``step`` takes and returns torch tensors on ``device(envs)`` (no host copy
            per step; its infos keys are present on every step, masks all-False where no episode ended,
            so that no step has to sync with the device). ``False``: numpy arrays on the host.
        seeds_each_sub_env: ``reset(seed=[...])`` takes one seed per sub-env. ``False``: one int seeds
            the batch's one generator.
    """

    name: ClassVar[str]
    steps_on_device: ClassVar[bool] = False
    seeds_each_sub_env: ClassVar[bool] = True

    @abc.abstractmethod
    def check_env_id(self, env_id: str) -> None:
        """Raise a ``ConfigError`` (with close matches where it can) on an id this backend cannot build."""

    @abc.abstractmethod
    def make(self, config: EnvConfig, build: Build) -> gym.vector.VectorEnv:
        """``build.num_envs`` unseeded sub-envs of ``config.env_id``, ``structured_observation_space`` and
        ``frame_stack`` set (see ``Build`` for the rest); ``time_limit`` too where the backend knows it
        (the sub-envs' ``max_episode_steps``, ``None`` for none)."""

    def evaluation_backend(self, render_mode: str | None) -> str:
        """The backend whose env evaluation plays (to render: ``render_mode``); this one by default."""
        return self.name

    def device(self, envs: gym.vector.VectorEnv) -> torch.device:
        """Where the tensors of ``envs``' steps live: the host for numpy envs."""
        return torch.device("cpu")

    def close_after_failure(self, envs: gym.vector.VectorEnv) -> None:
        """Close ``envs`` after a fault in them (``env.restart_on_failure``), as well as they still close."""
        envs.close()


def episode_stats(infos: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(ended, returns, lengths)`` over all sub-envs for the episodes that ended in this vector
    step (``ended`` is the mask of valid entries), or None when none ended: numpy arrays from host
    envs; tensors from envs whose steps stay on the device, which always return them (all-False
    ``ended`` when no episode ended), so that no step has to sync with the device."""
    final = infos.get("final_info")
    if not final or "episode" not in final:
        return None
    return final["_episode"], final["episode"]["r"], final["episode"]["l"]
