"""``TorchVectorEnv``: the batched, pure-torch vector env the classic-control ports share.

A subclass describes one sub-env as functions of a batch of states (``initial_state``,
``dynamics``, ``observe``); this base class adds what gymnasium's wrappers add around a
``SyncVectorEnv``: the time limit (``TimeLimit``), episode statistics (``RecordEpisodeStatistics``)
and ``SAME_STEP`` autoreset, all as tensor operations on ``device``.

Semantics, as in ``make_vector_env``'s gymnasium envs:

- ``step`` returns, for a sub-env whose episode ended, the first observation of the next episode;
  the true last observation is in ``infos["final_obs"]`` and the episode's return and length in
  ``infos["final_info"]["episode"]["r"/"l"]``, valid where ``infos["_final_obs"]`` (and
  ``infos["final_info"]["_episode"]``) are True.
- ``truncated`` is True when an episode reaches ``max_episode_steps`` (the registered time limit),
  whether or not it also terminated, exactly as ``TimeLimit`` does.

Differences from the gymnasium vector envs, all for speed on an accelerator:

- Everything is a torch tensor on ``device``: observations (float32), rewards (``dtype``),
  ``terminated``/``truncated`` (bool), and the infos. Actions may be tensors or numpy arrays.
- The infos keys are present on every step (with all-False masks when no episode ended), so that
  no step needs a device-to-host sync to decide which keys to add. ``infos["final_obs"]`` holds the
  observation before the autoreset for every sub-env (equal to the returned one where none ended).
- Fresh initial states are drawn for all sub-envs on every step and kept where an episode ended
  (``torch.where``), so the random stream never depends on which episodes ended, and no step has a
  data-dependent shape.
- Seeding: one ``torch.Generator`` on ``device`` for the whole batch. ``reset(seed=s)`` seeds it with
  ``s``; the states differ from gymnasium's for the same seed (numpy's RNG is not reproduced).
- No rendering, no reset ``options``, no per-sub-env seeds, no action validation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from torch import Tensor


class TorchVectorEnv(gym.vector.VectorEnv):
    """Base class of the torch-native vector envs; see the module docstring.

    Subclasses set ``env_id`` (the gymnasium id they reproduce, whose registered
    ``max_episode_steps`` is the default time limit) and implement ``make_observation_space``,
    ``make_action_space``, ``initial_state``, ``dynamics`` and ``observe``. The gymnasium env's own
    keyword arguments (``sutton_barto_reward``, ``g``, ...) are keyword-only arguments of the
    subclass's ``__init__``, set as attributes before this one runs.

    Args:
        num_envs: Sub-environments stepped together.
        device: Where the state lives and every returned tensor is.
        dtype: Dtype of the physical state and of the rewards (``torch.float64`` reproduces
            gymnasium's float64 arithmetic; observations are float32 either way).
        max_episode_steps: Time limit; ``None`` takes the one gymnasium registers for ``env_id``.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    env_backend = "torch"  # its steps stay on ``device`` (``rl_lightning.envs.backends``)
    env_id: str

    def __init__(
        self,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self.num_envs = num_envs
        self.single_observation_space = self.make_observation_space()
        self.single_action_space = self.make_action_space()
        self.device = torch.device(device)
        self.dtype = dtype
        registered = gym.spec(self.env_id)
        self.max_episode_steps = registered.max_episode_steps if max_episode_steps is None else max_episode_steps
        self.spec = dataclasses.replace(registered, max_episode_steps=self.max_episode_steps)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.generator = torch.Generator(device=self.device)
        # Unseeded envs draw their seed from torch's RNG, so seed_everything makes them reproducible.
        self.generator.manual_seed(int(torch.randint(0, 2**62, ())))
        self.state = self.initial_state()
        self.episode_steps = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self.episode_returns = torch.zeros(num_envs, dtype=dtype, device=self.device)
        self._needs_reset = True

    # ---------------------------------------------------------------- what a subclass describes
    def make_observation_space(self) -> gym.spaces.Box:
        """One sub-env's observation space, as gymnasium's env has it."""
        raise NotImplementedError

    def make_action_space(self) -> gym.Space:
        """One sub-env's action space, as gymnasium's env has it."""
        raise NotImplementedError

    def initial_state(self) -> Tensor:
        """Fresh initial states ``[num_envs, state_dim]`` drawn from ``self.generator``."""
        raise NotImplementedError

    def dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of every sub-env: ``(next_state, reward, terminated)``."""
        raise NotImplementedError

    def observe(self, state: Tensor) -> Tensor:
        """Observations ``[num_envs, *obs_shape]`` of states."""
        raise NotImplementedError

    def uniform(self, low: float, high: float, *shape: int) -> Tensor:
        """``low + (high - low) * U[0, 1)``, as numpy's ``Generator.uniform`` draws it."""
        u = torch.rand(self.num_envs, *shape, generator=self.generator, dtype=self.dtype, device=self.device)
        return low + (high - low) * u

    # ------------------------------------------------------------------------ vector env API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Tensor, dict]:
        """Start a new episode in every sub-env. ``seed`` (an int) seeds the batch's generator."""
        if options:
            raise ValueError(f"{type(self).__name__}.reset does not take options, got {options}.")
        if seed is not None:
            if not isinstance(seed, int | np.integer):
                raise TypeError(f"{type(self).__name__}.reset takes one int seed for the batch, got {seed!r}.")
            self.generator.manual_seed(int(seed))
            super().reset(seed=int(seed))  # also seeds self.np_random, as gymnasium's envs do
        # In place: a CUDA graph that captured step() keeps reading these very tensors.
        self.state.copy_(self.initial_state())
        self.episode_steps.zero_()
        self.episode_returns.zero_()
        self._needs_reset = False
        return self.observe(self.state).float().clone(), {}  # a copy: never the env's own state

    def step(self, actions: Tensor | np.ndarray) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError(f"Call {type(self).__name__}.reset before step.")
        next_state, rewards, terminated = self.dynamics(self.state, self._as_actions(actions))
        steps = self.episode_steps + 1
        returns = self.episode_returns + rewards
        truncated = steps >= self.max_episode_steps  # TimeLimit: whether or not it also terminated
        done = terminated | truncated
        final_obs = self.observe(next_state).float()
        # SAME_STEP autoreset: ended sub-envs start their next episode in this very step. In place,
        # so that a CUDA graph of the step replays on the env's own state.
        self.state.copy_(torch.where(done.unsqueeze(-1), self.initial_state(), next_state))
        self.episode_steps.copy_(torch.where(done, 0, steps))
        self.episode_returns.copy_(torch.where(done, 0.0, returns))
        obs = torch.where(done.unsqueeze(-1), self.observe(self.state).float(), final_obs)
        infos = {
            "final_obs": final_obs,
            "_final_obs": done,
            "final_info": {"episode": {"r": returns, "l": steps, "_r": done, "_l": done}, "_episode": done},
            "_final_info": done,
        }
        return obs, rewards, terminated, truncated, infos

    def _as_actions(self, actions: Tensor | np.ndarray) -> Tensor:
        if isinstance(self.single_action_space, gym.spaces.Discrete):
            return torch.as_tensor(actions, device=self.device).reshape(self.num_envs)
        # float32, the action space's dtype, whatever the state's: gymnasium gets float32 actions
        # too, and torch's type promotion then rounds the same terms to float32 as numpy's does.
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        return actions.reshape(self.num_envs, *self.single_action_space.shape)

    def to(self, device: torch.device | str) -> TorchVectorEnv:
        """Move the env to ``device`` (in place; returns ``self``). The generator is replaced by one
        on ``device`` seeded from the old one, so a seeded env stays deterministic."""
        device = torch.device(device)
        if device == self.device:
            return self
        seed = int(torch.randint(0, 2**62, (), generator=self.generator, device=self.device))
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.state = self.state.to(device)
        self.episode_steps = self.episode_steps.to(device)
        self.episode_returns = self.episode_returns.to(device)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, device={self.device})"
