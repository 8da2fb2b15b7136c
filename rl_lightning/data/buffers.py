"""Replay storage and sampling: replay buffers (uniform, prioritized) and n-step returns.

Shared by DQN, SAC, TD3 and DDPG through ``Replay`` (``rl_lightning.data.replay``). Actions may be
discrete (``long [N]``) or continuous (``float32 [N, act_dim]``).

Storage layout. Each sub-env writes its own stream of rows into its own ring (``[num_envs, rows]``).
A row holds an observation and, once acted on, the action, reward and done flags taken from it. The
next observation of row ``r`` is the observation of row ``r + 1``, so observations are stored once,
not twice. When an episode ends (terminated or truncated), row ``r + 1`` gets the true final
observation (``infos["final_obs"]`` under SAME_STEP autoreset) and the next episode starts at row
``r + 2``: such a final row is never sampled as a transition, so no transition crosses an episode
boundary, and a truncated transition bootstraps from its real final observation.

Frame stacks (Atari). With ``frame_stack = k > 1`` only the newest frame of each observation is
stored and stacks are rebuilt at sampling time from the ``k - 1`` rows before (repeating the
episode's first frame before its start, which is what gymnasium's ``FrameStackObservation`` does
with its default ``padding_type="reset"``). Atari then costs one 84x84 uint8 frame per transition:
about 7.1 kB, 7.1 GB for a million transitions, instead of 56 GB for stacked ``obs`` and
``next_obs`` (see ``ReplayBuffer.nbytes``).

N-step returns are computed at sampling time (``n_step_return``), stopping at the episode's end and
at the newest row: ``rewards`` is the discounted sum of the ``m <= n`` rewards used, ``discounts`` is
``gamma ** m``, so every algorithm's target is ``rewards + discounts * (1 - terminated) * V(next_obs)``.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor


class ReplayBatch(NamedTuple):
    """A sampled minibatch. ``terminated`` is 1.0 where the (n-step) window ended in a true
    termination (no bootstrap); ``discounts`` is ``gamma ** m`` for the ``m`` steps summed in
    ``rewards``; ``weights`` are the importance weights of prioritized replay (ones otherwise) and
    ``indices`` identify the samples for ``update_priorities``."""

    obs: Tensor
    actions: Tensor
    rewards: Tensor
    next_obs: Tensor
    terminated: Tensor
    discounts: Tensor
    weights: Tensor
    indices: Tensor


def n_step_return(
    rewards: Tensor, dones: Tensor, terminated: Tensor, available: Tensor, gamma: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Truncated n-step returns over windows ``[B, n]`` of consecutive steps of one sub-env.

    ``dones`` (terminated or truncated) ends the window after that step; ``available[:, i]`` is
    False where step ``i`` is not stored yet (the window also ends before it). With ``m`` the steps
    used (``1 <= m <= n``; ``available[:, 0]`` must be True):

        G = sum_{i < m} gamma^i r_i,   discount = gamma^m,   terminated = terminated_{m-1}

    Returns ``(G, discount, terminated, m)``; the bootstrap observation is the one ``m`` steps later.
    """
    n = rewards.shape[1]
    # alive_i: step i is inside the window: stored, and no episode end before it.
    not_done_before = torch.cat([torch.ones_like(dones[:, :1]), ~dones[:, :-1]], dim=1)
    alive = torch.cumprod((available & not_done_before).to(rewards.dtype), dim=1)
    steps = alive.sum(1).long()
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)
    returns = (alive * rewards * powers).sum(1)
    last_terminated = terminated.gather(1, (steps - 1).unsqueeze(1)).squeeze(1)
    discounts = gamma ** steps.to(rewards.dtype)
    return returns, discounts, last_terminated.to(rewards.dtype), steps


def torch_dtype(space: gym.spaces.Box) -> torch.dtype:
    """Storage dtype of a Box space: floats as float32, integers (Atari's uint8) as they are."""
    if np.issubdtype(space.dtype, np.floating):
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype


class ReplayBuffer:
    """Preallocated ring buffer over ``num_envs`` parallel streams; see the module docstring.

    Observations and actions are tensors on ``device`` (the bulk of the memory). Rewards, done
    flags and the bookkeeping (which rows are transitions, where each stream's head is) are small
    host numpy arrays: the env returns them on the host, so writing and sampling need no device
    round trip, and an ``add`` costs a few tensor ops whatever the number of fields.

    Args:
        buffer_size: Rows in all (split evenly over the sub-envs). Each episode end spends one extra
            row on its final observation.
        num_envs: Sub-envs that ``add`` receives one step of at a time.
        observation_space: A ``Box``; its dtype is kept (uint8 frames stay uint8).
        action_space: ``Discrete`` (stored as long) or ``Box`` (float32).
        device: Where observations and actions live (CPU, or the module's accelerator).
        n_step: Steps summed into each sampled return.
        gamma: Discount of the n-step returns.
        frame_stack: ``k > 1`` stores only the newest of the ``k`` stacked frames of each observation
            (the leading axis of the observation) and rebuilds stacks when sampling.
        seed: Seed of the sampling RNG; ``None`` draws it from torch's RNG (so ``seed_everything``
            fixes it).
        members: The streams belong to this many population members, member ``k``'s the ``num_envs /
            members`` from ``k * num_envs / members``: ``sample(b)`` draws ``b`` transitions from each
            member's own streams, member by member (``members * b`` rows). Uniform replay only.
    """

    def __init__(
        self,
        buffer_size: int,
        num_envs: int,
        observation_space: gym.spaces.Box,
        action_space: gym.Space,
        device: torch.device | str = "cpu",
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int = 1,
        seed: int | None = None,
        members: int = 1,
    ) -> None:
        self.num_envs, self.n_step, self.gamma, self.frame_stack = num_envs, n_step, gamma, frame_stack
        if num_envs % members:
            raise ValueError(f"{num_envs} sub-envs do not split into {members} members.")
        self.members = members
        self.rows = math.ceil(buffer_size / num_envs)
        if self.rows < frame_stack + n_step + 2:
            raise ValueError(
                f"buffer_size={buffer_size} gives {self.rows} rows per sub-env ({num_envs} sub-envs); "
                f"need at least frame_stack + n_step + 2 = {frame_stack + n_step + 2}."
            )
        self.device = torch.device(device)
        self.obs_shape = tuple(observation_space.shape)
        if frame_stack > 1 and self.obs_shape[0] != frame_stack:
            raise ValueError(f"frame_stack={frame_stack} but observations have shape {self.obs_shape}.")
        frame_shape = self.obs_shape[1:] if frame_stack > 1 else self.obs_shape
        shape, dev = (num_envs, self.rows), self.device
        self.obs_dtype = torch_dtype(observation_space)
        # Uninitialized: only rows marked valid are ever read, and untouched pages cost no memory.
        self.frames = torch.empty((*shape, *frame_shape), dtype=self.obs_dtype, device=dev)
        if isinstance(action_space, gym.spaces.Discrete):
            self.actions = torch.zeros(shape, dtype=torch.long, device=dev)
        elif isinstance(action_space, gym.spaces.Box):
            self.actions = torch.zeros((*shape, *action_space.shape), dtype=torch.float32, device=dev)
        else:
            raise ValueError(f"ReplayBuffer supports Discrete and Box action spaces, not {action_space}.")
        # Flat views: row (e, r) is e * rows + r.
        self._frames = self.frames.view(num_envs * self.rows, *frame_shape)
        self._actions = self.actions.view(num_envs * self.rows, *self.actions.shape[2:])
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.dones = np.zeros(shape, dtype=bool)  # terminated | truncated
        self.valid = np.zeros(shape, dtype=bool)  # the row starts a stored transition
        # Steps since the episode's first row, capped at frame_stack - 1 (all stack rebuilding needs).
        self.ep_steps = np.zeros(shape, dtype=np.uint8)
        # add() writes through flat numpy views (on CPU, of the tensors too): a torch op per field costs
        # several times a numpy one, and add runs once per env step.
        self._flat = {n: getattr(self, n).reshape(-1) for n in ("rewards", "terminated", "dones", "valid", "ep_steps")}
        on_cpu = self.device.type == "cpu"
        self._frames_np = self._frames.numpy() if on_cpu else None
        self._actions_np = self._actions.numpy() if on_cpu else None
        self.pos = np.zeros(num_envs, dtype=np.int64)  # each stream's head: the current obs row
        self.rows_written = np.zeros(num_envs, dtype=np.int64)
        self.cur_ep_step = np.zeros(num_envs, dtype=np.int64)
        self.num_adds = 0  # vector steps added
        self._envs = np.arange(num_envs)
        self._base = self._envs * self.rows
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        self.rng = np.random.default_rng(seed)

    # ---------------------------------------------------------------------------------- writing
    def _frame(self, obs: Tensor) -> Tensor:
        return obs[:, -1] if self.frame_stack > 1 else obs

    def add(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: np.ndarray | Tensor,
        next_obs: Tensor,
        terminated: np.ndarray | Tensor,
        truncated: np.ndarray | Tensor,
    ) -> None:
        """Store one vector step. ``obs``, ``next_obs`` and ``actions`` are ``[num_envs, ...]``
        tensors on the buffer's device; rewards and done flags are ``[num_envs]`` host arrays (numpy
        as a host env returns them, or CPU tensors). ``next_obs`` is the true next observation: the
        final one (``infos["final_obs"]``) where the episode ended. ``obs`` must be the previous call's
        ``next_obs`` except after an episode end."""
        terminated, truncated = np.asarray(terminated), np.asarray(truncated)
        p, k, flat = self.pos, self.frame_stack, self._flat
        done = terminated | truncated
        # Row p: this step. Row p + 1: the next observation; without an episode end it is also the
        # next head (the next add rewrites the same frame), after one it holds the final
        # observation, is never sampled, and the next episode starts at p + 2.
        p1 = (p + 1) % self.rows
        row, row1 = self._base + p, self._base + p1
        if self._frames_np is not None:
            self._frames_np[row] = self._frame(obs).numpy()
            self._frames_np[row1] = self._frame(next_obs).numpy()
            self._actions_np[row] = actions.to(self._actions.dtype).numpy()  # bfloat16 has no numpy dtype
        else:
            idx = torch.from_numpy(np.concatenate([row, row1])).to(self.device)
            self._frames.index_copy_(0, idx[: self.num_envs], self._frame(obs))
            self._frames.index_copy_(0, idx[self.num_envs :], self._frame(next_obs))
            self._actions.index_copy_(0, idx[: self.num_envs], actions.to(self.actions.dtype))
        flat["rewards"][row] = np.asarray(rewards)
        flat["terminated"][row] = terminated
        flat["dones"][row] = done
        if k > 1:  # without frame stacks ep_steps stays 0, its cap
            flat["ep_steps"][row] = np.minimum(self.cur_ep_step, k - 1)
            flat["ep_steps"][row1] = np.minimum(self.cur_ep_step + 1, k - 1)
        flat["valid"][row] = True
        flat["valid"][row1] = False  # a head or a final observation: not a transition
        self.cur_ep_step = np.where(done, 0, self.cur_ep_step + 1)
        self.num_adds += 1
        moved = self._advance(1 + done)
        self._rows_changed(np.concatenate([p[:, None], p1[:, None], moved], axis=1))

    def _advance(self, by: np.ndarray) -> np.ndarray:
        """Move the heads ``by`` rows, invalidate the rows the move overwrote and return them: the
        new head and, with frame stacks, the oldest rows just past it (their history is gone)."""
        new = (self.pos + by) % self.rows
        rows = (new[:, None] + np.arange(self.frame_stack)) % self.rows
        self._flat["valid"][self._base[:, None] + rows] = False
        self.rows_written += by
        self.pos = new
        return rows

    def _rows_changed(self, rows: np.ndarray) -> None:
        """Hook for subclasses (prioritized replay): ``rows[e]`` of stream ``e`` were written or
        invalidated."""

    def end_episodes(self) -> None:
        """Cut every stream's running episode as a truncation (it bootstraps from the stored next
        observation). Call it when the envs are reset behind the buffer's back, e.g. when a run
        resumes with a restored buffer, so no transition joins two unrelated episodes."""
        last = (self.pos - 1) % self.rows
        running = self.valid[self._envs, last] & ~self.dones[self._envs, last]
        self.dones[self._envs, last] |= running  # terminated stays False: a truncation
        self.cur_ep_step[:] = 0
        self._rows_changed(self._advance(running.astype(np.int64)))

    # --------------------------------------------------------------------------------- sampling
    @property
    def obs_nbytes(self) -> int:
        """Bytes of one sampled observation (a whole stack with frame stacks)."""
        return math.prod(self.obs_shape) * self.frames.element_size()

    def __len__(self) -> int:
        """Rows holding data (an upper bound on the transitions that can be sampled)."""
        return int(np.minimum(self.rows_written, self.rows).sum())

    def sample(self, batch_size: int) -> ReplayBatch:
        """Uniform over stored transitions (rows that are not final observations or heads); of a
        population's buffer (``members``), ``batch_size`` from each member's streams, member-major."""
        if self.num_adds == 0:
            raise RuntimeError("Cannot sample from an empty replay buffer.")
        filled = np.minimum(self.rows_written, self.rows)
        cum = filled.cumsum()
        ends = cum.reshape(self.members, -1)[:, -1]  # member k's filled rows are [ends[k - 1], ends[k])
        starts = ends - filled.reshape(self.members, -1).sum(1)
        envs, rows = [], []
        for start, end in zip(starts, ends, strict=True):
            # Rejection sampling: draw twice the rows needed, uniformly over filled rows, keep the first
            # valid ones (still i.i.d. uniform over valid rows). Few rows are not transitions (final
            # observations, heads): one round suffices unless episodes last a step or two.
            while True:
                flat = self.rng.integers(start, end, size=2 * batch_size)
                env = np.searchsorted(cum, flat, side="right")
                row = flat - cum[env] + filled[env]
                keep = np.flatnonzero(self.valid[env, row])[:batch_size]
                if len(keep) == batch_size:
                    envs.append(env[keep])
                    rows.append(row[keep])
                    break
        env, row = np.concatenate(envs), np.concatenate(rows)
        return self._gather(env, row, np.ones(len(row), dtype=np.float32))

    def _stack_rows(self, env: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Flat rows of each sample's observation: ``[B]``, or ``[B, k]`` frames oldest first."""
        if self.frame_stack == 1:
            return self._base[env] + row
        # Stack slot j is k - 1 - j rows back, but never before the episode's first row.
        back = np.minimum(np.arange(self.frame_stack - 1, -1, -1), self.ep_steps[env, row][:, None].astype(np.int64))
        return self._base[env][:, None] + (row[:, None] - back) % self.rows

    def _gather(self, env: np.ndarray, row: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        b = len(row)
        flat = self._base[env] + row
        floats = np.empty((4, b), dtype=np.float32)  # returns, discounts, terminated, weights
        if self.n_step == 1:  # the general path gives the same, with more small ops
            floats[0], floats[1], floats[2] = self.rewards.ravel()[flat], self.gamma, self.terminated.ravel()[flat]
            steps = 1
        else:
            window = (row[:, None] + np.arange(self.n_step)) % self.rows
            ew = env[:, None]
            out = n_step_return(
                *(torch.from_numpy(a[ew, window]) for a in (self.rewards, self.dones, self.terminated, self.valid)),
                self.gamma,
            )
            floats[0], floats[1], floats[2] = out[0], out[1], out[2]
            steps = out[3].numpy()
        floats[3] = weights
        obs_rows, next_rows = self._stack_rows(env, row), self._stack_rows(env, (row + steps) % self.rows)
        # One host-to-device copy of all indices and one of all scalars.
        idx = torch.from_numpy(np.concatenate([obs_rows.ravel(), next_rows.ravel(), flat])).to(self.device)
        obs = self._frames[idx[:-b]].view(2, b, *self.obs_shape)
        scalars = torch.from_numpy(floats).to(self.device)
        return ReplayBatch(
            obs=obs[0],
            actions=self._actions[idx[-b:]],
            rewards=scalars[0],
            next_obs=obs[1],
            terminated=scalars[2],
            discounts=scalars[1],
            weights=scalars[3],
            indices=torch.from_numpy(flat),  # on the host, where the priorities live
        )

    def update_priorities(self, indices: Tensor, priorities: Tensor) -> None:
        """No-op for uniform replay (so algorithms need no branch)."""

    # ------------------------------------------------------------------------------- bookkeeping
    @property
    def nbytes(self) -> int:
        """Bytes of storage, device and host (allocated, whether or not touched yet)."""
        return sum(int(t.nbytes) for t in self._arrays().values())

    def _arrays(self) -> dict[str, Tensor | np.ndarray]:
        names = ("frames", "actions", "rewards", "terminated", "dones", "valid", "ep_steps")
        return {name: getattr(self, name) for name in names}

    def state_dict(self) -> dict[str, Any]:
        """Tensors and ints only (``torch.load(weights_only=True)`` reads it); filled rows only."""
        filled = min(int(self.rows_written.max()) + 1, self.rows)
        state: dict[str, Any] = {k: torch.as_tensor(v[:, :filled]).clone() for k, v in self._arrays().items()}
        for name in ("pos", "rows_written", "cur_ep_step"):
            state[name] = torch.from_numpy(getattr(self, name).copy())
        state["num_adds"] = self.num_adds
        # The sampling RNG too, so a resumed run draws the same minibatches (JSON: a plain string).
        state["rng"] = json.dumps(self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in self._arrays().items():
            saved = tuple(state[name].shape)
            if saved[0] != value.shape[0] or saved[1] > value.shape[1] or saved[2:] != tuple(value.shape[2:]):
                raise ValueError(f"Replay state {name!r} has shape {saved}; this buffer's is {tuple(value.shape)}.")
            if isinstance(value, Tensor):
                value[:, : saved[1]] = state[name].to(self.device)
            else:
                value[:, : saved[1]] = state[name].numpy()
        for name in ("pos", "rows_written", "cur_ep_step"):
            getattr(self, name)[:] = state[name].numpy()
        self.num_adds = int(state["num_adds"])
        if "rng" in state:
            self.rng.bit_generator.state = json.loads(state["rng"])


class SumTree:
    """Binary sum tree over ``size`` leaves (float64): batched O(log n) updates and proportional
    sampling, vectorized over the batch with numpy."""

    def __init__(self, size: int) -> None:
        self.capacity = 1 << max(size - 1, 1).bit_length()
        self.depth = self.capacity.bit_length() - 1
        self.tree = np.zeros(2 * self.capacity)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def leaves(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[idx + self.capacity]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` to ``values`` (the last of repeated leaves wins) and every sum above them."""
        node = np.asarray(idx).ravel() + self.capacity
        values = np.asarray(values, dtype=np.float64).ravel()
        # A replay add's few rows (one call per env step) walk up on Python floats: a fraction of the cost of
        # depth rounds of numpy calls. Both sum the same two children into each node: the same tree.
        (self._walk_up if len(node) <= 4 else self._by_levels)(node, values)

    def _walk_up(self, node: np.ndarray, values: np.ndarray) -> None:
        cells = memoryview(self.tree)
        for n, value in zip(node.tolist(), values.tolist(), strict=True):
            cells[n] = value
            while n > 1:
                n >>= 1
                cells[n] = cells[2 * n] + cells[2 * n + 1]

    def _by_levels(self, node: np.ndarray, values: np.ndarray) -> None:
        self.tree[node] = values
        for _ in range(self.depth):
            node = node // 2
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """Leaf ``i`` with ``cumsum[i - 1] <= value < cumsum[i]`` for each value."""
        node = np.ones(len(values), dtype=np.int64)
        values = np.asarray(values, dtype=np.float64).copy()
        for _ in range(self.depth):
            left, right = self.tree[2 * node], self.tree[2 * node + 1]
            # Rounding guards: never descend into an empty subtree.
            go_right = ((values >= left) & (right > 0)) | (left <= 0)
            values = np.where(go_right, values - left, values)
            node = 2 * node + go_right
        return node - self.capacity


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    ``P(i) = p_i^alpha / sum_j p_j^alpha``; new transitions get the largest priority seen so far;
    ``update_priorities`` sets ``p_i = |delta_i| + eps``. Importance weights ``w_i = (N P(i))^-beta``
    are normalized by the batch's largest weight (so ``N`` cancels), as in Dopamine. Sampling is
    stratified: one draw from each of ``batch_size`` equal slices of the total priority.

    Args:
        alpha: Priority exponent (0 = uniform).
        eps: Added to ``|delta|`` so no stored transition gets probability zero.
        **kwargs: See ``ReplayBuffer``.
    """

    def __init__(self, *args: Any, alpha: float = 0.6, eps: float = 1e-6, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.members > 1:
            raise ValueError("Prioritized replay has no per-member sampling: a population replays uniformly.")
        self.alpha, self.eps = alpha, eps
        self.tree = SumTree(self.num_envs * self.rows)
        self.max_priority = 1.0

    def _rows_changed(self, rows: np.ndarray) -> None:
        # Newly stored transitions get the max priority; rows that are not transitions get zero.
        env = np.broadcast_to(self._envs[:, None], rows.shape)
        new = np.where(self.valid[env, rows], self.max_priority**self.alpha, 0.0)
        self.tree.update(self._base[env] + rows, new)

    def sample(self, batch_size: int, beta: float = 0.4) -> ReplayBatch:  # type: ignore[override]
        if self.num_adds == 0:
            raise RuntimeError("Cannot sample from an empty replay buffer.")
        total = self.tree.total
        u = (np.arange(batch_size) + self.rng.random(batch_size)) / batch_size
        idx = self.tree.find(np.minimum(u * total, total * (1 - 1e-12)))
        probs = self.tree.leaves(idx) / total
        weights = (probs / probs.min()) ** -beta  # = (N P(i))^-beta / max_j (N P(j))^-beta
        return self._gather(idx // self.rows, idx % self.rows, weights)

    def update_priorities(self, indices: Tensor, priorities: Tensor) -> None:
        """``priorities`` are ``|TD error|`` of the samples ``indices`` (``ReplayBatch.indices``)."""
        idx = indices.numpy()
        p = priorities.detach().abs().double().cpu().numpy() + self.eps
        self.max_priority = max(self.max_priority, float(p.max()))
        still_valid = self.valid.ravel()[idx]  # rows may have been overwritten since sampling
        self.tree.update(idx, np.where(still_valid, p**self.alpha, 0.0))

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.tree.tree.nbytes

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "tree": torch.from_numpy(self.tree.tree.copy()),
            "max_priority": self.max_priority,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.tree.tree[:] = state["tree"].numpy()
        self.max_priority = float(state["max_priority"])
