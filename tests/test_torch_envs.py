"""The torch-native classic-control envs against gymnasium's own: one step from thousands of random
states, whole trajectories through the vector-env machinery (autoreset, final observations,
episode statistics, time limits), reset distributions, seeding, gymnasium's env checker."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from rl_lightning.envs import EnvConfig, make_vector_env
from rl_lightning.envs.torch import TORCH_ENVS, TorchVectorEnv, make_torch_env

ENV_IDS = list(TORCH_ENVS)
N_STATES = 4000


def random_states(env_id: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """States covering (and beyond) what episodes visit, and random actions (continuous ones beyond
    the action bounds, to exercise the clipping). States are float32 numbers, so both dtypes start
    from exactly the same state."""
    pi = math.pi
    if env_id == "CartPole-v1":
        s, a = rng.uniform([-2.4, -3, -0.21, -3.5], [2.4, 3, 0.21, 3.5], (n, 4)), rng.integers(0, 2, n)
    elif env_id == "Pendulum-v1":
        s, a = rng.uniform([-3 * pi, -8], [3 * pi, 8], (n, 2)), rng.uniform(-3, 3, (n, 1))
    elif env_id == "Acrobot-v1":
        s = rng.uniform([-pi, -pi, -4 * pi, -9 * pi], [pi, pi, 4 * pi, 9 * pi], (n, 4))
        a = rng.integers(0, 3, n)
    elif env_id == "MountainCar-v0":
        s, a = rng.uniform([-1.2, -0.07], [0.6, 0.07], (n, 2)), rng.integers(0, 3, n)
    else:
        s, a = rng.uniform([-1.2, -0.07], [0.6, 0.07], (n, 2)), rng.uniform(-1.5, 1.5, (n, 1))
    return s.astype(np.float32).astype(np.float64), a.astype(np.float32) if a.ndim == 2 else a


def gym_action(a: np.ndarray):
    return int(a) if a.ndim == 0 else a


def gymnasium_one_step(env_id: str, states: np.ndarray, actions: np.ndarray):
    """gymnasium's step from each state: (obs, rewards, terminated, next states)."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    out = []
    for s, a in zip(states, actions, strict=True):
        env.state = s.copy()
        env.steps_beyond_terminated = None  # CartPole: a fresh episode, not a step after termination
        obs, r, term, trunc, _ = env.step(gym_action(a))
        assert not trunc
        out.append((obs, r, term, np.asarray(env.state, dtype=np.float64)))
    obs, r, term, s = (np.array(x) for x in zip(*out, strict=True))
    return obs, r, term, s


def torch_one_step(env_id: str, states: np.ndarray, actions: np.ndarray, dtype: torch.dtype):
    env = make_torch_env(env_id, len(states), dtype=dtype)
    env.reset(seed=0)
    env.state.copy_(torch.as_tensor(states, dtype=dtype))  # the env steps its own state tensor in place
    _, r, term, trunc, infos = env.step(torch.as_tensor(actions))
    assert not trunc.any()
    return infos["final_obs"].numpy(), r.double().numpy(), term.numpy()


# float64 vs gymnasium: observations agree up to their float32 rounding (rtol: 2 float32 ulps);
# atol 1e-9 because gymnasium itself computes a few terms in float32 (numpy promotes the float32
# action: Pendulum's torque cost, MountainCarContinuous's acceleration; numpy's float32 `u**2` is
# not even correctly rounded), which moves rewards and observations by up to ~5e-10 (measured).
FLOAT64_OBS_TOL, FLOAT64_REWARD_TOL = dict(rtol=2.4e-7, atol=1e-9), dict(rtol=1e-12, atol=1e-9)
# float32 vs gymnasium's float64: observation tolerances (rtol, atol). Acrobot's RK4 step is
# ill-conditioned at high joint speeds: in float64, moving the state by one float32 ulp already
# moves dtheta2 by up to 2e-2 (measured over these states), so float32 arithmetic differs by up to
# ~2e-3 there (measured); the other envs stay within a few float32 ulps (measured <= 5e-7).
FLOAT32_TOL = {env_id: (1e-5, 1e-5) for env_id in ENV_IDS} | {"Acrobot-v1": (1e-3, 5e-3)}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_one_step_matches_gymnasium_from_random_states(env_id):
    rng = np.random.default_rng(ENV_IDS.index(env_id))
    states, actions = random_states(env_id, N_STATES, rng)
    ref_obs, ref_r, ref_term, ref_next = gymnasium_one_step(env_id, states, actions)

    # float64 reproduces gymnasium's arithmetic: observations equal up to their float32 rounding.
    obs, r, term = torch_one_step(env_id, states, actions, torch.float64)
    np.testing.assert_allclose(obs, ref_obs, **FLOAT64_OBS_TOL)
    np.testing.assert_allclose(r, ref_r, **FLOAT64_REWARD_TOL)
    np.testing.assert_array_equal(term, ref_term)

    # float32, the default: the same to float32 arithmetic's precision.
    obs, r, term = torch_one_step(env_id, states, actions, torch.float32)
    rtol, atol = FLOAT32_TOL[env_id]
    np.testing.assert_allclose(obs, ref_obs, rtol=rtol, atol=atol)
    np.testing.assert_allclose(r, ref_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(term, ref_term)

    # The sampled states reach every branch of the dynamics.
    if env_id in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"):
        assert 0.01 < ref_term.mean() < 0.99
    if env_id.startswith("MountainCar"):
        # (MountainCarContinuous stores its state as float32)
        assert (np.isclose(ref_next[:, 0], -1.2, atol=1e-7) & (ref_next[:, 1] == 0)).sum() > 10  # inelastic wall
        assert np.isclose(np.abs(ref_next[:, 1]), 0.07, atol=1e-8).sum() > 10  # speed clipping
    if env_id == "Pendulum-v1":
        assert (np.abs(ref_next[:, 1]) == 8).sum() > 10  # speed clipping
    if env_id == "Acrobot-v1":
        assert (np.abs(ref_next[:, 3]) == 9 * math.pi).sum() > 10  # velocity bounds


TRAJECTORY_CASES = [
    ("CartPole-v1", {"max_episode_steps": 20}),  # random play never reaches 500: also truncate
    ("CartPole-v1", {}),
    ("Pendulum-v1", {}),
    ("Acrobot-v1", {}),
    ("MountainCar-v0", {}),
    ("MountainCarContinuous-v0", {}),
]


@pytest.mark.parametrize(("env_id", "env_kwargs"), TRAJECTORY_CASES)
def test_vector_steps_match_gymnasium_vector_env(env_id, env_kwargs):
    """Whole episodes through both vector envs (make_vector_env's SAME_STEP SyncVectorEnv with
    RecordEpisodeStatistics, and the torch env in float64): before each step the torch env takes
    the gymnasium sub-envs' states, then both step with the same actions, so every step compares
    termination, truncation at the time limit, autoreset, final observations and episode stats."""
    n, steps = 16, 1000
    config = EnvConfig(env_id, num_envs=n, env_kwargs=env_kwargs)
    ref = make_vector_env(config)
    ours = make_torch_env(env_id, n, dtype=torch.float64, **env_kwargs)
    limit = env_kwargs.get("max_episode_steps", gym.spec(env_id).max_episode_steps)
    assert ours.max_episode_steps == limit
    ref.reset(seed=0)
    ours.reset(seed=0)
    ref.action_space.seed(0)
    counts = np.zeros(3, dtype=int)  # terminated, truncated, both
    for _ in range(steps):
        ours.state = torch.as_tensor(np.stack([np.asarray(e.unwrapped.state, np.float64) for e in ref.envs]))
        actions = ref.action_space.sample()
        r_obs, r_rew, r_term, r_trunc, r_inf = ref.step(actions)
        obs, rew, term, trunc, inf = ours.step(torch.as_tensor(actions))
        np.testing.assert_array_equal(term.numpy(), r_term)
        np.testing.assert_array_equal(trunc.numpy(), r_trunc)
        np.testing.assert_allclose(rew.numpy(), r_rew, **FLOAT64_REWARD_TOL)
        done = r_term | r_trunc
        np.testing.assert_array_equal(inf["_final_obs"].numpy(), done)
        np.testing.assert_allclose(obs.numpy()[~done], r_obs[~done], **FLOAT64_OBS_TOL)
        np.testing.assert_allclose(inf["final_obs"].numpy()[~done], r_obs[~done], **FLOAT64_OBS_TOL)
        if done.any():
            final_obs = np.stack(r_inf["final_obs"][done])
            np.testing.assert_allclose(inf["final_obs"].numpy()[done], final_obs, **FLOAT64_OBS_TOL)
            ep, r_ep = inf["final_info"]["episode"], r_inf["final_info"]["episode"]
            np.testing.assert_array_equal(inf["final_info"]["_episode"].numpy(), r_inf["final_info"]["_episode"])
            np.testing.assert_array_equal(ep["l"].numpy()[done], r_ep["l"][done])
            np.testing.assert_allclose(ep["r"].numpy()[done], r_ep["r"][done], rtol=1e-9)
            counts += [(r_term & ~r_trunc).sum(), (r_trunc & ~r_term).sum(), (r_term & r_trunc).sum()]
    # Each case ends episodes, and reaches the time limit unless random play never can.
    assert counts.sum() > 0
    if env_id != "CartPole-v1" or env_kwargs:
        assert counts[1] > 0


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_and_time_limit_are_gymnasiums(env_id):
    env = make_torch_env(env_id, 3)
    ref = gym.make(env_id)
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    assert env.max_episode_steps == ref.spec.max_episode_steps
    assert env.observation_space == gym.vector.utils.batch_space(ref.observation_space, 3)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP


# Per state dimension: gymnasium's reset distribution, U(low, high) (low == high: a constant).
RESET_BOUNDS = {
    "CartPole-v1": ([-0.05] * 4, [0.05] * 4),
    "Pendulum-v1": ([-math.pi, -1.0], [math.pi, 1.0]),
    "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
    "MountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "MountainCarContinuous-v0": ([-0.6, 0.0], [-0.4, 0.0]),
}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_distribution_is_gymnasiums(env_id):
    env = make_torch_env(env_id, 20_000, dtype=torch.float64)
    obs, _ = env.reset(seed=1)
    s = env.state.numpy()
    low, high = (np.array(b) for b in RESET_BOUNDS[env_id])
    span = high - low
    assert (s >= low).all() and (s <= high).all()
    # Uniform over the whole range: min and max near the ends, mean near the middle.
    np.testing.assert_allclose(s.min(0), low, atol=0.001 * span.max())
    np.testing.assert_allclose(s.max(0), high, atol=0.001 * span.max())
    np.testing.assert_allclose(s.mean(0), (low + high) / 2, atol=0.01 * span.max())
    assert obs.dtype == torch.float32 and all(env.single_observation_space.contains(o) for o in obs[:100].numpy())
    if env_id == "Acrobot-v1":  # gymnasium draws it in float64 and stores it as float32
        np.testing.assert_array_equal(s, s.astype(np.float32))


def test_autoreset_final_obs_and_episode_stats():
    env = make_torch_env("CartPole-v1", 4)
    env.reset(seed=0)
    push_right = torch.ones(4, dtype=torch.long)
    term, t = torch.zeros(4, dtype=torch.bool), 0
    while not term.any():
        obs, rew, term, trunc, infos = env.step(push_right)
        t += 1
    assert t < 20 and not trunc.any()  # pushed one way, the pole falls within a few steps
    done, final = term, infos["final_obs"]
    assert torch.equal(infos["_final_obs"], done) and torch.equal(infos["final_info"]["_episode"], done)
    assert ((final[done, 0].abs() > 2.4) | (final[done, 2].abs() > 12 * 2 * math.pi / 360)).all()
    assert (obs[done].abs() <= 0.05).all()  # the next episode's first observation
    torch.testing.assert_close(final[~done], obs[~done])
    ep = infos["final_info"]["episode"]
    assert (ep["l"][done] == t).all() and (ep["r"][done] == t).all()  # +1 per step, the last one too
    torch.testing.assert_close(env.state.float(), obs)
    assert (env.episode_steps[done] == 0).all() and (env.episode_returns[done] == 0).all()
    assert (env.episode_steps[~done] == t).all()
    obs, *_, infos = env.step(push_right)
    assert (env.episode_steps[done] == 1).all()


def test_truncation_at_the_time_limit_also_when_terminating():
    # gymnasium's TimeLimit truncates at the limit whether or not the step also terminated.
    env = make_torch_env("CartPole-v1", 2, max_episode_steps=3)
    env.reset(seed=0)
    left = torch.zeros(2, dtype=torch.long)
    for _ in range(2):
        _, _, term, trunc, _ = env.step(left)
        assert not (term | trunc).any()
    env.state = torch.stack([env.state[0], torch.tensor([2.39, 5.0, 0.0, 0.0])])  # x leaves 2.4 next step
    _, _, term, trunc, infos = env.step(left)
    assert term.tolist() == [False, True] and trunc.tolist() == [True, True]
    assert infos["final_info"]["episode"]["l"].tolist() == [3, 3]
    assert (env.episode_steps == 0).all()


def test_seeding_is_deterministic():
    def rollout(seed):
        env = make_torch_env("Acrobot-v1", 64, max_episode_steps=10)
        obs = [env.reset(seed=seed)[0]]
        g = torch.Generator().manual_seed(0)
        for _ in range(25):  # two autoresets
            obs.append(env.step(torch.randint(0, 3, (64,), generator=g))[0])
        return torch.stack(obs)

    assert torch.equal(rollout(3), rollout(3))
    assert not torch.equal(rollout(3), rollout(4))
    env = make_torch_env("Pendulum-v1", 8)
    first, _ = env.reset(seed=5)
    env.step(torch.zeros(8, 1))
    assert torch.equal(env.reset(seed=5)[0], first)
    torch.manual_seed(0)  # unseeded envs take their seed from torch's RNG
    a = make_torch_env("Pendulum-v1", 8).reset()[0]
    torch.manual_seed(0)
    assert torch.equal(make_torch_env("Pendulum-v1", 8).reset()[0], a)


class SingleEnvView(gym.Env):
    """A torch vector env of one sub-env seen as a gymnasium ``Env`` (numpy in and out), for
    gymnasium's env checker. Where the episode ends it returns the true last observation."""

    def __init__(self, env_id: str) -> None:
        self.envs = make_torch_env(env_id, 1, dtype=torch.float64)
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, _ = self.envs.reset(seed=seed)
        return obs[0].numpy(), {}

    def step(self, action):
        obs, rew, term, trunc, infos = self.envs.step(np.asarray(action)[None])
        obs = infos["final_obs"] if bool(infos["_final_obs"][0]) else obs
        return obs[0].numpy(), float(rew[0]), bool(term[0]), bool(trunc[0]), {}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_env_checker_passes_on_a_single_env_view(env_id):
    check_env(SingleEnvView(env_id), skip_render_check=True)


def test_make_vector_env_selects_the_backend():
    envs = make_vector_env(EnvConfig("Pendulum-v1", num_envs=5, backend="torch", env_kwargs={"g": 9.81}))
    assert isinstance(envs, TorchVectorEnv) and envs.num_envs == 5 and envs.g == 9.81
    obs, _ = envs.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.shape == (5, 3) and obs.device.type == "cpu"
    assert isinstance(make_vector_env(EnvConfig("Pendulum-v1", num_envs=2)), gym.vector.SyncVectorEnv)
    with pytest.raises(ValueError, match=r"'FrozenLake-v1'.*supported: CartPole-v1, Pendulum-v1, Acrobot-v1"):
        make_vector_env(EnvConfig("FrozenLake-v1", backend="torch"))
    with pytest.raises(ValueError, match="does not render"):
        make_vector_env(EnvConfig("CartPole-v1", backend="torch"), render_mode="rgb_array")
