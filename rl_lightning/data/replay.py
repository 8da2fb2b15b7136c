"""The replay side of the off-policy algorithms (DQN, SAC, TD3, DDPG): ``Replay``, an ``ExperienceSide``
that owns the buffer (``rl_lightning.data.buffers``), fills it through ``ReplayCollector`` (random
warm-up, then collection phases with the policy) and samples minibatches from it. Its sizes and rhythm
are ``ReplayConfig`` (``rl_lightning.config``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from rl_lightning.config import ReplayConfig
from rl_lightning.cuda_graphs import UpdateGraphs
from rl_lightning.data.buffers import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer
from rl_lightning.data.experience import CollectorSide
from rl_lightning.envs.make import EpisodeLog, env_device, steps_on_device
from rl_lightning.envs.spaces import to_env_actions, to_env_actions_tensor


class ReplayCollector:
    """Steps a vector env with an acting function and writes every step into a replay buffer;
    keeps the env's current observation between calls and records finished episodes.

    With a gymnasium or envpool env the observations cross to ``device`` once per vector step and the
    actions back to the host as numpy arrays. With an env whose steps stay on the device (``env.backend:
    torch``) nothing leaves torch: actions go to the env as tensors, observations, rewards and done
    flags come back as tensors, the true next observations are the env's ``final_obs`` without any
    per-step test of which episodes ended, and the phase's rewards and done flags cross to the buffer's
    bookkeeping in one copy at the end of the phase (one device sync per phase, not one per step).

    Args:
        envs: The vector env (SAME_STEP autoreset, as ``make_vector_env`` builds it).
        buffer: Where transitions go.
        device: Device of the observations given to the acting function.
        seed: Seed of the first sub-env at the initial reset.
        normalized_actions: Box actions only: the acting function returns actions in ``[-1, 1]``,
            which are stored as they are and rescaled to the env's bounds on their way to the env
            (SAC, TD3, DDPG: networks and replay work in ``[-1, 1]``, as in SB3). Needs finite bounds.
        on_episode_end: Called after each vector step in which episodes ended, with the mask of the
            sub-envs whose episode ended (a stateful exploration process resets them).
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        buffer: ReplayBuffer,
        device: torch.device,
        seed: int,
        normalized_actions: bool = False,
        on_episode_end: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        self.envs, self.buffer, self.device = envs, buffer, device
        self.num_envs = envs.num_envs
        self.action_space = envs.single_action_space
        self.normalized_actions = normalized_actions
        self.on_episode_end = on_episode_end
        if normalized_actions and not (
            isinstance(self.action_space, gym.spaces.Box) and self.action_space.is_bounded("both")
        ):
            raise ValueError(f"normalized_actions needs a Box action space with finite bounds: {self.action_space}.")
        self.on_device = steps_on_device(envs)
        if self.on_device and isinstance(self.action_space, gym.spaces.Box):
            self.low, self.high = (
                torch.as_tensor(bound, device=env_device(envs))
                for bound in (self.action_space.low, self.action_space.high)
            )
        self.episodes = EpisodeLog()
        obs, _ = envs.reset(seed=seed)
        self.obs = self._to_tensor(obs)
        # A restored buffer's streams end here: the envs start new episodes.
        buffer.end_episodes()

    def _to_tensor(self, obs: np.ndarray | Tensor) -> Tensor:
        return torch.as_tensor(obs, device=self.device, dtype=self.buffer.obs_dtype)

    def _to_env(self, actions: Tensor) -> np.ndarray:
        """Actions as a host env takes them: numpy, rescaled (``normalized_actions``) and clipped to the bounds."""
        a = actions.cpu().numpy()
        if isinstance(self.action_space, gym.spaces.Discrete):
            return to_env_actions(self.action_space, a)
        low, high = self.action_space.low, self.action_space.high
        if self.normalized_actions:
            a = low + (a + 1.0) * 0.5 * (high - low)
        return np.clip(a, low, high)

    def _to_device_env(self, actions: Tensor) -> Tensor:
        """``_to_env`` for an env whose steps stay on the device: the same actions, as tensors there."""
        actions = actions.to(env_device(self.envs))
        if isinstance(self.action_space, gym.spaces.Discrete):
            return to_env_actions_tensor(self.action_space, actions)
        if self.normalized_actions:
            actions = self.low + (actions + 1.0) * 0.5 * (self.high - self.low)
        return torch.clamp(actions, self.low, self.high)

    def random_actions(self, obs: Tensor) -> Tensor:
        """Uniform random actions (for the warm-up before ``learning_starts``), from torch's RNG so
        ``seed_everything`` fixes them. Discrete actions are indices ``0..n-1``; normalized actions
        are uniform in ``[-1, 1]``."""
        n, space = obs.shape[0], self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(int(space.n), (n,), device=self.device)
        if self.normalized_actions:
            return torch.rand((n, *space.shape), device=self.device) * 2.0 - 1.0
        low = torch.as_tensor(space.low, device=self.device, dtype=torch.float32)
        high = torch.as_tensor(space.high, device=self.device, dtype=torch.float32)
        return low + torch.rand((n, *space.shape), device=self.device) * (high - low)

    @torch.no_grad()
    def collect(self, act: Callable[[Tensor], Tensor], num_steps: int, warmup_until: int = 0) -> int:
        """Store ``num_steps`` vector steps taken with ``act(obs) -> actions``, preceded, while the
        buffer holds fewer than ``warmup_until`` vector steps, by uniformly random ones up to that
        count (the warm-up before ``learning_starts``). Returns the vector steps taken."""
        warmup = max(warmup_until - self.buffer.num_adds, 0)
        self._run(self.random_actions, warmup)
        self._run(act, num_steps)
        return warmup + num_steps

    def _run(self, act: Callable[[Tensor], Tensor], num_steps: int) -> None:
        if self.on_device:
            self._run_on_device(act, num_steps)
            return
        for _ in range(num_steps):
            actions = act(self.obs)
            next_obs, rewards, terminated, truncated, infos = self.envs.step(self._to_env(actions))
            next_t = self._to_tensor(next_obs)
            real_next = next_t
            done = terminated | truncated
            if done.any():
                idx = np.flatnonzero(done)
                real_next = next_t.clone()
                real_next[torch.as_tensor(idx, device=self.device)] = self._to_tensor(np.stack(infos["final_obs"][idx]))
            self.buffer.add(self.obs, actions, rewards, real_next, terminated, truncated)
            self.obs = next_t
            self.episodes.record(infos)
            if self.on_episode_end is not None and done.any():
                self.on_episode_end(done)

    def _run_on_device(self, act: Callable[[Tensor], Tensor], num_steps: int) -> None:
        """``_run`` for an env whose steps stay on the device (see the class docstring). Its
        ``final_obs`` is the observation before any autoreset for every sub-env, the true next
        observation whether or not the episode ended."""
        steps = []
        for _ in range(num_steps):
            actions = act(self.obs)
            next_obs, rewards, terminated, truncated, infos = self.envs.step(self._to_device_env(actions))
            steps.append((self.obs, actions, self._to_tensor(infos["final_obs"]), rewards, terminated, truncated))
            self.obs = self._to_tensor(next_obs)
            self.episodes.record(infos)
            if self.on_episode_end is not None:
                self.on_episode_end(terminated | truncated)
        if steps:
            # [3, steps, num_envs]: the phase's rewards and done flags, to the host in one copy
            _, _, _, rewards, terminated, truncated = zip(*steps, strict=True)
            flags = torch.stack([torch.stack(x).float() for x in (rewards, terminated, truncated)]).cpu()
            rewards, dones = flags[0], flags[1:].bool()
            for t, (obs, actions, real_next, *_) in enumerate(steps):
                self.buffer.add(obs, actions, rewards[t], real_next, dones[0, t], dones[1, t])


class Replay(CollectorSide):
    """The replay side of DQN, SAC, TD3 and DDPG (an ``ExperienceSide``): the buffer, the warm-up with random actions,
    collection phases, sampling and the buffer's state in checkpoints.

    Built with the networks (no env needed). The first collection starts it on the rank's envs: the
    buffer is allocated then, on the module's device (or the host with ``buffer_on_cpu``), after a
    checkpoint has been restored, since its sampling RNG is seeded from the restored env step (a draw
    from torch's RNG would make a resumed run differ from an uninterrupted one). A buffer state loaded
    before that is put in when the buffer exists. The buffer outlives the envs (``stop``): a second fit
    of the same module goes on with it.

    Args:
        config: Sizes and rhythm (``ReplayConfig``).
        n_step: Steps summed into each sampled return.
        gamma: Discount of the n-step returns.
        frame_stack: Stacked frames of image observations (stored once each; see ``ReplayBuffer``);
            ``None``: as the envs stack them (``make_vector_env``'s ``frame_stack``).
        prioritized_alpha: Proportional prioritized replay with this exponent; ``None``: uniform.
        normalized_actions: Box actions in ``[-1, 1]`` inside, rescaled to the env's bounds on their way
            to it (see ``ReplayCollector``).
        on_episode_end: See ``ReplayCollector``.
        members: A population's members (``run.population``): the envs' sub-envs split into this many
            runs, member ``k``'s the ``num_envs`` from ``k * num_envs``; the buffer holds ``buffer_size``
            transitions per member, the warm-up is ``learning_starts`` env steps per member, and
            ``sample`` draws ``batch_size`` rows from each member's own transitions (member-major).
    """

    def __init__(
        self,
        config: ReplayConfig,
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int | None = None,
        prioritized_alpha: float | None = None,
        normalized_actions: bool = False,
        on_episode_end: Callable[[np.ndarray], None] | None = None,
        members: int = 1,
    ) -> None:
        self.config = config
        self.members = members
        self.on_episode_end = on_episode_end
        self.buffer_kwargs: dict[str, Any] = {"n_step": n_step, "gamma": gamma, "frame_stack": frame_stack}
        self.prioritized_alpha = prioritized_alpha
        self.normalized_actions = normalized_actions
        self.buffer: ReplayBuffer | None = None
        self.collector: ReplayCollector | None = None
        self.device = torch.device("cpu")  # where sampled batches go: the module's device
        self.warmup_until = 0  # vector steps of random actions before the first phase's own
        self.vector_steps = 0  # taken by the last phase
        self._pending_state: dict[str, Any] | None = None

    def start(
        self, envs: gym.vector.VectorEnv, device: torch.device, seed: int, world_size: int, graphs: UpdateGraphs
    ) -> None:
        self.device = device
        if self.buffer is None:
            self.buffer = self._make_buffer(envs, seed)
        self.collector = ReplayCollector(
            envs,
            self.buffer,
            self.buffer.device,
            seed,
            normalized_actions=self.normalized_actions,
            on_episode_end=self.on_episode_end,
        )
        member_envs = envs.num_envs // self.members
        self.warmup_until = math.ceil(self.config.learning_starts / (member_envs * world_size))

    def _make_buffer(self, envs: gym.vector.VectorEnv, seed: int) -> ReplayBuffer:
        cfg = self.config
        device = torch.device("cpu") if cfg.buffer_on_cpu else self.device
        spaces = envs.single_observation_space, envs.single_action_space  # as stored: flat where structured
        kwargs = dict(self.buffer_kwargs, device=device, seed=seed, members=self.members)
        if kwargs["frame_stack"] is None:
            kwargs["frame_stack"] = getattr(envs, "frame_stack", 1)
        size = cfg.buffer_size * self.members  # buffer_size transitions per member
        if self.prioritized_alpha is None:
            buffer = ReplayBuffer(size, envs.num_envs, *spaces, **kwargs)
        else:
            buffer = PrioritizedReplayBuffer(size, envs.num_envs, *spaces, alpha=self.prioritized_alpha, **kwargs)
        rank_zero_info(
            f"Replay buffer: {buffer.nbytes / 1e9:.2f} GB on {device} per rank "
            f"({buffer.nbytes / (buffer.rows * buffer.num_envs):.0f} bytes per transition)."
        )
        if self._pending_state is not None:
            buffer.load_state_dict(self._pending_state)
            self._pending_state = None
        return buffer

    def collect(self, act: Callable[[Tensor], Tensor]) -> None:
        """One phase into the buffer: ``train_freq`` vector steps with ``act(obs) -> actions`` (obs on the
        buffer's device), preceded by the random warm-up while the buffer holds fewer than
        ``learning_starts`` env steps (``vector_steps`` counts both)."""
        assert self.collector is not None, "start() first"
        self.vector_steps = self.collector.collect(act, self.config.train_freq, self.warmup_until)

    def sample(self, batch_size: int | None = None, beta: float = 0.4) -> ReplayBatch:
        """A minibatch (``batch_size`` rows, default the config's; a population's that many from each
        member, member-major) on the module's device; ``beta`` is prioritized replay's importance-sampling
        exponent."""
        assert self.buffer is not None, "start() first"
        size = batch_size or self.config.batch_size
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            batch = self.buffer.sample(size, beta)
        else:
            batch = self.buffer.sample(size)
        if self.buffer.device != self.device:  # indices stay on the host, with the priorities
            batch = batch._replace(**{k: getattr(batch, k).to(self.device) for k in batch._fields if k != "indices"})
        return batch

    def update_priorities(self, indices: Tensor, priorities: Tensor) -> None:
        self.buffer.update_priorities(indices, priorities)

    def state_dict(self) -> dict[str, Any] | None:
        """The buffer's state where checkpoints keep it (``save_replay_buffer``), else ``None``."""
        return self.buffer.state_dict() if self.buffer is not None and self.config.save_replay_buffer else None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.buffer is not None:
            self.buffer.load_state_dict(state)
        else:
            self._pending_state = state
