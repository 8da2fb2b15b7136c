"""Replay buffers, n-step returns and the off-policy collector."""

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import DDPG, DQN, SAC, TD3, ReplayConfig, RunConfig
from rl_lightning.data.buffers import PrioritizedReplayBuffer, ReplayBuffer, SumTree, n_step_return
from rl_lightning.data.replay import ReplayCollector
from rl_lightning.envs.make import EnvConfig, make_vector_env
from rl_lightning.envs.torch import make_torch_env
from tests.helpers import quick_trainer

SCALAR = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)


def add(buf, obs, action, reward, next_obs, terminated=False, truncated=False):
    """One step of a one-env buffer with scalar observations."""
    buf.add(
        torch.tensor([[float(obs)]]),
        torch.tensor([action]),
        np.array([reward], np.float32),
        torch.tensor([[float(next_obs)]]),
        np.array([terminated]),
        np.array([truncated]),
    )


def all_transitions(buf, draws=4000):
    """Every distinct sampled transition, keyed by its observation."""
    seen = {}
    for _ in range(draws // 64):
        b = buf.sample(64)
        for i in range(64):
            seen[float(b.obs[i, 0])] = (
                int(b.actions[i]),
                float(b.rewards[i]),
                float(b.next_obs[i, 0]),
                float(b.terminated[i]),
                float(b.discounts[i]),
            )
    return seen


def test_ring_wraparound_keeps_the_newest_transitions():
    buf = ReplayBuffer(10, 1, SCALAR, gym.spaces.Discrete(3), gamma=0.9, seed=0)
    for t in range(25):
        add(buf, t, t % 3, 10 * t, t + 1)
    seen = all_transitions(buf)
    # 10 rows: observations 16..25, the newest (25) being the head, not yet acted on.
    assert sorted(seen) == list(range(16, 25))
    for t, (action, reward, next_obs, terminated, discount) in seen.items():
        assert (action, reward, next_obs, terminated) == (t % 3, 10 * t, t + 1, 0.0)
        assert discount == pytest.approx(0.9)


def test_episode_ends_use_the_final_observation_and_bootstrap_only_on_truncation():
    buf = ReplayBuffer(100, 1, SCALAR, gym.spaces.Discrete(2), gamma=0.5, seed=0)
    add(buf, 0, 0, 1.0, 1)
    add(buf, 1, 0, 1.0, 2, terminated=True)  # final obs 2; the env auto-resets to obs 100
    add(buf, 100, 1, 1.0, 101)
    add(buf, 101, 1, 1.0, 102, truncated=True)  # time limit: bootstrap from 102
    add(buf, 200, 0, 1.0, 201)
    seen = all_transitions(buf)
    assert sorted(seen) == [0, 1, 100, 101, 200]
    assert seen[1][2:4] == (2.0, 1.0)  # next obs is the final one, terminated
    assert seen[101][2:] == (102.0, 0.0, 0.5)  # truncated: not terminated, discounted bootstrap
    assert seen[100][2] == 101.0 and seen[200][2] == 201.0


def test_n_step_return_hand_computed():
    gamma = 0.5
    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    dones = torch.tensor([[False, False, False], [False, True, False], [True, False, False], [False, False, False]])
    terminated = torch.tensor([[False, False, False], [False, True, False], [False, False, False], [False] * 3])
    available = torch.tensor([[True, True, True], [True, True, True], [True, True, True], [True, True, False]])
    ret, disc, term, steps = n_step_return(rewards, dones, terminated, available, gamma)
    torch.testing.assert_close(ret, torch.tensor([1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 * 2, 1.0, 1 + 0.5 * 2]))
    torch.testing.assert_close(disc, torch.tensor([0.125, 0.25, 0.5, 0.25]))
    torch.testing.assert_close(term, torch.tensor([0.0, 1.0, 0.0, 0.0]))  # row 2 ends truncated
    assert steps.tolist() == [3, 2, 1, 2]


def test_n_step_returns_in_the_buffer_stop_at_episode_ends_and_the_newest_step():
    gamma = 0.5
    buf = ReplayBuffer(100, 1, SCALAR, gym.spaces.Discrete(2), n_step=3, gamma=gamma, seed=0)
    r = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    add(buf, 0, 0, r[0], 1)
    add(buf, 1, 0, r[1], 2)
    add(buf, 2, 0, r[2], 3, terminated=True)  # episode 1 ends (final obs 3)
    add(buf, 10, 0, r[3], 11)
    add(buf, 11, 0, r[4], 12, truncated=True)  # episode 2 is cut by a time limit (final obs 12)
    add(buf, 20, 0, r[5], 21)  # episode 3 is still running: obs 21 is the newest
    seen = {t: v[1:] for t, v in all_transitions(buf).items()}
    expected = {  # (n-step return, bootstrap obs, terminated, gamma^m)
        0: (1 + 0.5 * 2 + 0.25 * 4, 3.0, 1.0, 0.125),
        1: (2 + 0.5 * 4, 3.0, 1.0, 0.25),
        2: (4.0, 3.0, 1.0, 0.5),
        10: (8 + 0.5 * 16, 12.0, 0.0, 0.25),
        11: (16.0, 12.0, 0.0, 0.5),
        20: (32.0, 21.0, 0.0, 0.5),
    }
    assert seen == expected  # exact: powers of two


class FrameEnv(gym.Env):
    """2x2 uint8 frames encoding (episode, step); episodes end after 1-6 steps, by termination or
    by truncation."""

    observation_space = gym.spaces.Box(0, 255, (2, 2), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode = getattr(self, "episode", -1) + 1
        self.t, self.length = 0, int(self.np_random.integers(1, 7))
        return self._frame(), {}

    def _frame(self):
        return np.array([[self.episode % 256, self.t], [self.length, 0]], np.uint8)

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        terminated = end and self.length % 2 == 0
        return self._frame(), float(self.t), terminated, end and not terminated, {}


if "test/Frames-v0" not in gym.envs.registry:
    gym.register("test/Frames-v0", entry_point=FrameEnv)
    gym.register(
        "test/StackedFrames-v0",
        entry_point=lambda: gym.wrappers.FrameStackObservation(FrameEnv(), 4),
    )


def expected_stack(episode, t, length):
    # FrameStackObservation(padding_type="reset") repeats the first frame before the episode start.
    return np.stack([[[episode % 256, max(t - 3 + j, 0)], [length, 0]] for j in range(4)]).astype(np.uint8)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize("frame_stack", [1, 4])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_transitions_are_exact_across_episode_ends_and_wraparound(num_envs, frame_stack, cls):
    env_id = "test/StackedFrames-v0" if frame_stack > 1 else "test/Frames-v0"
    envs = make_vector_env(EnvConfig(env_id, num_envs=num_envs))
    spaces = (envs.single_observation_space, envs.single_action_space)
    buf = cls(60, num_envs, *spaces, frame_stack=frame_stack, seed=0)
    assert buf.frames.shape == (num_envs, 60 // num_envs, 2, 2)  # one frame per row, not four
    collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
    collector.collect(collector.random_actions, 200)
    for _ in range(20):
        b = buf.sample(64)
        for i in range(64):
            obs, nxt = b.obs[i].numpy(), b.next_obs[i].numpy()
            if frame_stack == 1:
                obs, nxt = obs[None], nxt[None]
            ep, t, length = int(obs[-1, 0, 0]), int(obs[-1, 0, 1]), int(obs[-1, 1, 0])
            stack = expected_stack(ep, t, length)[4 - frame_stack :]
            np.testing.assert_array_equal(obs, stack)
            np.testing.assert_array_equal(nxt, expected_stack(ep, t + 1, length)[4 - frame_stack :])  # one step on
            assert float(b.rewards[i]) == t + 1
            assert float(b.terminated[i]) == float(t + 1 == length and length % 2 == 0)
    envs.close()


@pytest.mark.parametrize("frame_stack", [1, 4])
def test_a_buffer_written_with_torch_ops_holds_what_the_numpy_views_write(frame_stack):
    # On CPU add() writes frames and actions through numpy views of the tensors; on an accelerator with
    # index_copy_. Forced here onto the tensor path, the same steps must leave the same buffer.
    env_id = "test/StackedFrames-v0" if frame_stack > 1 else "test/Frames-v0"
    states = []
    for tensor_path in (False, True):
        envs = make_vector_env(EnvConfig(env_id, num_envs=3))
        buf = ReplayBuffer(
            60, 3, envs.single_observation_space, envs.single_action_space, frame_stack=frame_stack, seed=0
        )
        if tensor_path:
            buf._frames_np = buf._actions_np = None
        torch.manual_seed(0)
        collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
        collector.collect(collector.random_actions, 50)  # wraps around the 20 rows per sub-env twice
        states.append(buf.state_dict())
        envs.close()
    numpy_path, tensor_path = states
    assert numpy_path.keys() == tensor_path.keys()
    for key in numpy_path:
        if isinstance(numpy_path[key], torch.Tensor):
            assert torch.equal(numpy_path[key], tensor_path[key]), key
        else:
            assert numpy_path[key] == tensor_path[key], key


def test_actions_of_any_float_dtype_are_stored_as_the_buffers():
    # An actor under bf16 autocast may return bfloat16 actions, which have no numpy dtype: add() casts them.
    space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    buf = ReplayBuffer(16, 1, gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32), space, seed=0)
    actions = torch.tensor([[0.5, -0.25]], dtype=torch.bfloat16)
    buf.add(torch.zeros(1, 3), actions, np.zeros(1), torch.ones(1, 3), np.zeros(1, bool), np.zeros(1, bool))
    assert buf.actions.dtype == torch.float32 and torch.equal(buf.actions[0, 0], actions[0].float())


def test_collector_handles_continuous_actions():
    envs = make_vector_env(EnvConfig("Pendulum-v1", num_envs=2))
    buf = ReplayBuffer(1000, 2, envs.single_observation_space, envs.single_action_space, seed=0)
    collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
    collector.collect(collector.random_actions, 210)  # Pendulum truncates at 200 steps
    b = buf.sample(32)
    assert b.actions.shape == (32, 1) and b.actions.dtype == torch.float32
    assert b.obs.shape == b.next_obs.shape == (32, 3)
    assert (b.actions.abs() <= 2.0).all() and b.terminated.sum() == 0  # only truncations in Pendulum
    returns, lengths = collector.episodes.pop()
    assert lengths.tolist() == [200, 200] and collector.episodes.pop()[0].size == 0
    envs.close()


def test_end_episodes_cuts_the_running_episode_as_a_truncation():
    buf = ReplayBuffer(100, 1, SCALAR, gym.spaces.Discrete(2), gamma=0.5, seed=0)
    add(buf, 0, 0, 1.0, 1)
    add(buf, 1, 0, 1.0, 2)
    buf.end_episodes()  # e.g. resuming: the env is reset, obs 50 starts a new episode
    add(buf, 50, 0, 1.0, 51)
    seen = all_transitions(buf)
    assert sorted(seen) == [0, 1, 50]
    assert seen[1][2:] == (2.0, 0.0, 0.5)  # bootstraps from its true next obs, not from 50


def test_sum_tree_samples_in_proportion_to_priorities():
    tree = SumTree(6)
    priorities = np.array([1.0, 0.0, 2.0, 3.0, 0.5, 3.5])
    tree.update(np.arange(6), priorities)
    assert tree.total == pytest.approx(10.0)
    rng = np.random.default_rng(0)
    leaves = tree.find(rng.random(200_000) * tree.total)
    freq = np.bincount(leaves, minlength=6) / 200_000
    np.testing.assert_allclose(freq, priorities / 10.0, atol=4e-3)  # ~4 standard errors
    tree.update(np.array([3]), np.array([0.0]))
    assert 3 not in tree.find(rng.random(10_000) * tree.total)


def test_sum_tree_walks_and_levels_build_the_same_tree():
    """``update`` walks few leaves up one by one and many level by level: bit for bit the same sums."""
    walked, levelled, rng = SumTree(1000), SumTree(1000), np.random.default_rng(0)
    for _ in range(300):
        idx = rng.integers(0, 1000, rng.integers(1, 7))  # repeated leaves included: the last value wins
        values = np.where(rng.random(len(idx)) < 0.2, 0.0, rng.random(len(idx)) ** 3)
        walked._walk_up(idx + walked.capacity, values)
        levelled._by_levels(idx + levelled.capacity, values)
        assert np.array_equal(walked.tree, levelled.tree)
    inner = np.arange(1, walked.capacity)
    assert np.array_equal(walked.tree[inner], walked.tree[2 * inner] + walked.tree[2 * inner + 1])


def test_prioritized_replay_priorities_and_importance_weights():
    buf = PrioritizedReplayBuffer(100, 1, SCALAR, gym.spaces.Discrete(2), alpha=1.0, seed=0)
    for t in range(4):
        add(buf, t, 0, 0.0, t + 1)
    b = buf.sample(8)
    assert torch.all(b.weights == 1.0)  # new transitions share the max priority
    # Priorities 1, 2, 3, 4 for obs 0..3 (alpha = 1): P = p / 10.
    rows = torch.arange(4)
    buf.update_priorities(rows, torch.tensor([1.0, 2.0, 3.0, 4.0]) - buf.eps)
    counts = np.zeros(4)
    for _ in range(300):
        b = buf.sample(40, beta=0.5)
        obs = b.obs[:, 0].long()
        counts += np.bincount(obs.numpy(), minlength=4)
        # w_i = (N P(i))^-beta / max_j (N P(j))^-beta
        p = (obs + 1).double() / 10
        expected = (p / p.min()) ** -0.5
        torch.testing.assert_close(b.weights.double(), expected)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_state_dict_round_trips_through_a_weights_only_checkpoint(cls):
    envs = make_vector_env(EnvConfig("CartPole-v1", num_envs=2))
    spaces = (envs.single_observation_space, envs.single_action_space)
    buf = cls(1000, 2, *spaces, n_step=2, seed=0)
    collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
    collector.collect(collector.random_actions, 100)
    stream = io.BytesIO()
    torch.save(buf.state_dict(), stream)
    stream.seek(0)
    restored = cls(1000, 2, *spaces, n_step=2, seed=0)
    restored.load_state_dict(torch.load(stream, weights_only=True))
    filled = int(buf.rows_written.max()) + 1  # rows never written are not saved
    for name in ("frames", "actions", "rewards", "terminated", "dones", "valid", "ep_steps"):
        a, b = getattr(buf, name)[:, :filled], getattr(restored, name)[:, :filled]
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
    for name in ("pos", "rows_written", "cur_ep_step", "num_adds"):
        assert np.array_equal(getattr(buf, name), getattr(restored, name)), name
    buf.rng, restored.rng = np.random.default_rng(1), np.random.default_rng(1)
    for x, y in zip(buf.sample(16), restored.sample(16), strict=True):
        torch.testing.assert_close(x, y)
    envs.close()


def test_atari_sized_buffer_stays_under_8_gb_for_a_million_transitions():
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    buf = ReplayBuffer(1_000_000, 1, frames, gym.spaces.Discrete(18), device="meta", frame_stack=4)
    per_transition = buf.nbytes / 1_000_000
    assert buf.frames.dtype == torch.uint8
    assert 84 * 84 <= per_transition < 84 * 84 + 32  # one uint8 frame plus a few bytes of bookkeeping
    assert buf.nbytes < 8e9


def test_bad_sizes_fail_clearly():
    with pytest.raises(ValueError, match="buffer_size=8 gives 4 rows per sub-env"):
        ReplayBuffer(8, 2, SCALAR, gym.spaces.Discrete(2), n_step=3)
    with pytest.raises(RuntimeError, match="empty"):
        ReplayBuffer(100, 1, SCALAR, gym.spaces.Discrete(2)).sample(4)


# ------------------------------------------------------------------- torch envs (env.backend: torch)
def count_host_copies(monkeypatch) -> list[str]:
    """The names of the tensor methods that leave torch or the device, as they are called."""
    calls: list[str] = []
    for name in ("numpy", "cpu", "item", "tolist", "__array__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return calls


def test_collector_on_a_torch_env_never_leaves_torch(monkeypatch):
    """Actions go to the env as tensors, and the buffer gets tensors only: one copy of the phase's
    rewards and done flags to the host per phase, whatever its length, and no numpy at all."""
    envs = make_torch_env("CartPole-v1", 4, max_episode_steps=5)
    buf = ReplayBuffer(400, 4, envs.single_observation_space, envs.single_action_space, seed=0)
    collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
    assert collector.on_device
    added, stepped = [], []
    monkeypatch.setattr(buf, "add", lambda *args: added.append(args))
    step = envs.step
    monkeypatch.setattr(envs, "step", lambda actions: stepped.append(actions) or step(actions))
    calls = count_host_copies(monkeypatch)
    for steps in (3, 12):
        added.clear()
        calls.clear()
        collector.collect(collector.random_actions, steps)
        assert calls == ["cpu"] and len(added) == steps
    assert all(isinstance(a, torch.Tensor) for a in stepped)
    assert all(isinstance(x, torch.Tensor) for args in added for x in args)
    obs, actions, rewards, next_obs, terminated, truncated = (torch.stack(x) for x in zip(*added, strict=True))
    assert truncated.any() and rewards.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool


def test_a_torch_env_fills_the_buffer_as_the_gymnasium_env_with_the_same_states():
    """Same dynamics, same start states, same actions: the same transitions in the buffer, the time-limit
    cut included (its final observation stored, the episode truncated, not terminated)."""
    limit, n = 5, 2
    gym_envs = make_vector_env(EnvConfig("Pendulum-v1", num_envs=n, env_kwargs={"max_episode_steps": limit}))
    torch_envs = make_torch_env("Pendulum-v1", n, dtype=torch.float64, max_episode_steps=limit)
    spaces = gym_envs.single_observation_space, gym_envs.single_action_space
    buffers = [ReplayBuffer(100, n, *spaces, seed=0) for _ in range(2)]
    collectors = [
        ReplayCollector(envs, buf, torch.device("cpu"), seed=0, normalized_actions=True)
        for envs, buf in zip((gym_envs, torch_envs), buffers, strict=True)
    ]
    start = np.stack([env.unwrapped.state for env in gym_envs.envs])
    torch_envs.state.copy_(torch.as_tensor(start))
    collectors[1].obs = torch_envs.observe(torch_envs.state).float()
    for collector in collectors:
        actions = iter(torch.linspace(-1.0, 1.0, 2 * limit).reshape(limit, n, 1))
        collector.collect(lambda obs, actions=actions: next(actions), limit)
    ours, ref = buffers[1], buffers[0]
    torch.testing.assert_close(ours.frames[:, : limit + 1], ref.frames[:, : limit + 1])  # final obs in row 5
    torch.testing.assert_close(ours.actions[:, :limit], ref.actions[:, :limit])
    np.testing.assert_allclose(ours.rewards[:, :limit], ref.rewards[:, :limit], rtol=1e-6)
    for name in ("terminated", "dones", "valid", "pos"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(ref, name))
    assert ref.dones[:, limit - 1].all() and not ref.terminated.any()
    gym_envs.close()


@pytest.mark.parametrize(
    ("cls", "env_id", "kwargs"),
    [
        (DQN, "CartPole-v1", {}),
        (SAC, "Pendulum-v1", {}),
        (TD3, "Pendulum-v1", {"noise_type": "ornstein_uhlenbeck"}),  # reset per episode from a device mask
        (DDPG, "Pendulum-v1", {}),
    ],
)
def test_off_policy_algorithms_train_on_torch_envs_without_numpy(monkeypatch, cls, env_id, kwargs):
    def numpy_path(*args):
        raise AssertionError("the numpy path of ReplayCollector ran on a torch env")

    monkeypatch.setattr(ReplayCollector, "_to_env", numpy_path)
    on_device_steps = []
    run_on_device = ReplayCollector._run_on_device
    monkeypatch.setattr(
        ReplayCollector, "_run_on_device", lambda self, act, n: on_device_steps.append(n) or run_on_device(self, act, n)
    )
    model = cls(
        env=EnvConfig(env_id, num_envs=2, seed=0, backend="torch"),
        run=RunConfig(total_env_steps=256, env_steps_per_epoch=256, eval_episodes=1),
        replay=ReplayConfig(buffer_size=1000, batch_size=16, learning_starts=64),
        hidden_sizes=(16,),
        **kwargs,
    )
    quick_trainer().fit(model)
    assert sum(on_device_steps) == model.replay.buffer.num_adds == 128 and model.env_steps == 256
    assert model.trainer.global_step > 0


def test_random_play_on_torch_cartpole_ends_episodes_as_gymnasium_does():
    """The same dynamics, resets and time limit in distribution: episode lengths of uniformly random play
    collected into a replay buffer agree in mean (within 4 standard errors) between the backends."""
    lengths = {}
    for backend in ("gymnasium", "torch"):
        envs = make_vector_env(EnvConfig("CartPole-v1", num_envs=32, backend=backend))
        buf = ReplayBuffer(20_000, 32, envs.single_observation_space, envs.single_action_space, seed=0)
        collector = ReplayCollector(envs, buf, torch.device("cpu"), seed=0)
        collector.collect(collector.random_actions, 300)
        lengths[backend] = collector.episodes.pop()[1].astype(float)
        assert int(buf.dones.sum()) == len(lengths[backend])  # every episode end is stored as one
        envs.close()
    ref, ours = lengths["gymnasium"], lengths["torch"]
    assert len(ref) > 300 and len(ours) > 300
    stderr = np.sqrt(ref.var() / len(ref) + ours.var() / len(ours))
    assert abs(ref.mean() - ours.mean()) < 4 * stderr, (ref.mean(), ours.mean(), stderr)
