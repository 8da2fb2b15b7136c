"""The envpool backend: the gymnasium path's semantics (SAME_STEP autoreset, true episode statistics,
Atari preprocessing, training-only episodic life and reward clipping) on envpool's C++ vector envs."""

import numpy as np
import pytest

from rl_lightning.envs import EnvConfig, make_vector_env
from rl_lightning.errors import ConfigError

pytest.importorskip("envpool")


def envs(env_id, num_envs=1, training=True, backend="envpool", **env_kwargs):
    config = EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend, env_kwargs=env_kwargs)
    return make_vector_env(config, training=training)


def play(vec, actions, seed=0):
    """Step ``vec`` through ``actions`` (one row per vector step): every step's outputs, and the
    (return, length) of each ended episode in order."""
    obs, _ = vec.reset(seed=seed)
    steps, episodes = [], []
    for a in actions:
        out = vec.step(a)
        steps.append(out)
        if "final_info" in (info := out[4]):
            f = info["final_info"]
            episodes += list(zip(f["episode"]["r"][f["_episode"]], f["episode"]["l"][f["_episode"]], strict=True))
    vec.close()
    return obs, steps, episodes


def test_an_id_envpool_lacks_is_refused_in_one_line_naming_what_it_takes():
    for env_id in ("Taxi-v3", "Pongg-v5", "Pong-v5"):  # Pong-v5 is envpool's name; ours is gymnasium's
        with pytest.raises(ConfigError, match="envpool has no env") as e:
            envs(env_id)
        assert "\n" not in str(e.value) and "ALE/<Game>-v5" in str(e.value) and "HalfCheetah-v5" in str(e.value)
    with pytest.raises(ConfigError, match="wrappers"):
        make_vector_env(EnvConfig(backend="envpool", wrappers=["gymnasium.wrappers.ClipReward"]))


def test_same_step_autoreset_final_obs_and_true_episode_statistics():
    # Always pushing left ends a CartPole episode in ~10 steps: many episode ends.
    obs, steps, episodes = play(envs("CartPole-v1", num_envs=3), np.zeros((200, 3), dtype=np.int64))
    since_reset = np.zeros(3, dtype=np.int64)
    ended_count = 0
    for obs, rewards, terminated, truncated, info in steps:
        since_reset += 1
        assert np.all(rewards == 1.0)
        for i in np.flatnonzero(terminated | truncated):
            final = info["final_obs"][i]
            assert abs(final[0]) > 2.4 or abs(final[2]) > 0.2095  # the terminal state...
            assert np.all(np.abs(obs[i]) <= 0.05)  # ...and, in the same step, a fresh episode's first
            assert info["final_info"]["_episode"][i]
            assert info["final_info"]["episode"]["l"][i] == info["final_info"]["episode"]["r"][i] == since_reset[i]
            since_reset[i] = 0
            ended_count += 1
    assert ended_count == len(episodes) > 30


def test_cartpole_episodes_match_gymnasiums_in_distribution():
    # Different simulators and seeds: the same scripted policy gives the same episode lengths on average.
    actions = np.zeros((400, 4), dtype=np.int64)
    mean_length = {
        b: np.mean([ln for _, ln in play(envs("CartPole-v1", 4, backend=b), actions)[2]])
        for b in ("envpool", "gymnasium")
    }
    assert mean_length["envpool"] == pytest.approx(mean_length["gymnasium"], abs=1.0), mean_length


def test_mujoco_time_limit_truncates_with_the_last_observation():
    vec = envs("HalfCheetah-v5", num_envs=2)
    assert vec.single_observation_space.shape == (17,) and vec.single_action_space.shape == (6,)
    obs, steps, episodes = play(vec, np.zeros((1000, 2, 6)))
    *_, terminated, truncated, info = steps[-1]
    assert truncated.all() and not terminated.any() and not any(s[3].any() for s in steps[:-1])
    assert not np.array_equal(info["final_obs"], steps[-1][0])  # last observation vs the new episode's first
    assert [ln for _, ln in episodes] == [1000, 1000]


def test_seeds_per_sub_env_as_gymnasium_deals_them():
    # reset(seed=s) gives sub-env i the seed s + i (ranks and evaluation seeds rely on it).
    actions = np.random.default_rng(0).integers(0, 2, (60, 2))
    _, two, _ = play(envs("CartPole-v1", 2), actions, seed=10)
    _, again, _ = play(envs("CartPole-v1", 2), actions, seed=10)
    _, second, _ = play(envs("CartPole-v1", 1), actions[:, 1:], seed=[11])
    _, other, _ = play(envs("CartPole-v1", 2), actions, seed=12)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(two, again, strict=True))
    assert all(np.array_equal(a[0][1], b[0][0]) for a, b in zip(two, second, strict=True))
    assert not np.array_equal(two[0][0], other[0][0])


def test_atari_frames_are_preprocessed_as_on_the_gymnasium_path():
    # No no-ops, no sticky actions, NOOP played: the screens agree while the game has not started
    # (after that, the two emulator builds drift apart by a few pixels of paddle).
    frames = {}
    for backend in ("gymnasium", "envpool"):
        vec = envs("PongNoFrameskip-v4", training=False, backend=backend, noop_max=0)
        obs, steps, _ = play(vec, np.zeros((10, 1), dtype=np.int64))
        frames[backend] = np.stack([s[0][0] for s in steps])
    assert frames["envpool"].shape == frames["gymnasium"].shape == (10, 4, 84, 84)
    assert frames["envpool"].dtype == np.uint8
    # The newest of the 4 stacked frames: 84x84 grayscale, max over the last two of 4 skipped frames.
    np.testing.assert_array_equal(frames["envpool"][5:, -1], frames["gymnasium"][5:, -1])
    assert frames["envpool"][5:, -1].std() > 10  # a real screen, not a blank one


@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_atari_frame_stack_is_an_env_kwarg_on_both_backends_and_bad_values_are_refused(backend):
    """``frame_stack: 1`` (a recurrent policy's single frames): observations (1, 84, 84), the newest frame
    of the default stack of 4; the replay side is told the stack it gets."""
    stacked, single = (envs("PongNoFrameskip-v4", backend=backend, noop_max=0, frame_stack=k) for k in (4, 1))
    assert single.single_observation_space.shape == (1, 84, 84) and single.frame_stack == 1
    assert stacked.frame_stack == 4
    for vec in (stacked, single):
        vec.reset(seed=0)
    for _ in range(5):
        a = np.zeros(1, dtype=np.int64)
        np.testing.assert_array_equal(single.step(a)[0][:, 0], stacked.step(a)[0][:, -1])
    for vec in (stacked, single):
        vec.close()
    with pytest.raises(ConfigError, match="frame_stack must be a positive int"):
        envs("PongNoFrameskip-v4", backend=backend, frame_stack=0)


@pytest.mark.slow  # ~20 s; the default suite is at its time budget
def test_a_pong_game_scores_and_lasts_alike_on_both_backends():
    actions = np.random.default_rng(0).integers(0, 6, (2500, 4))
    games = {
        b: play(envs("PongNoFrameskip-v4", 4, training=False, backend=b), actions)[2][:4]
        for b in ("gymnasium", "envpool")
    }
    for played in games.values():
        assert len(played) == 4 and all(-21 <= score <= -15 for score, _ in played)  # random play loses
    # Lengths in emulator frames on both (agent steps x 4); random games vary by a third.
    lengths = {b: np.mean([ln for _, ln in played]) for b, played in games.items()}
    assert 0.6 < lengths["envpool"] / lengths["gymnasium"] < 1.6, games


def test_atari_training_ends_episodes_at_lost_lives_and_clips_rewards_but_reports_true_games():
    # Same seeds and actions: the same emulator run with and without the training-only rules.
    actions = np.random.default_rng(1).integers(0, 4, (1500, 2))
    _, train, train_games = play(envs("BreakoutNoFrameskip-v4", 2, training=True), actions)
    _, evaluate, eval_games = play(envs("BreakoutNoFrameskip-v4", 2, training=False), actions)
    assert len(eval_games) >= 2 and train_games == eval_games  # true scores and frame counts
    lives_lost = 0
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, _) in zip(train, evaluate, strict=True):
        np.testing.assert_array_equal(o1, o2)  # the game goes on after a lost life
        np.testing.assert_array_equal(r1, np.sign(r2))
        assert np.all(te1 >= te2) and np.array_equal(tr1, tr2)
        lives_lost += int((te1 & ~te2).sum())
        for i in np.flatnonzero(te1 & ~te2):
            np.testing.assert_array_equal(i1["final_obs"][i], o1[i])  # the episode's last observation
    assert lives_lost >= 4 * len(eval_games)  # Breakout: 5 lives a game


def test_evaluation_plays_envpool_too_without_the_training_rules_and_videos_play_gymnasium():
    from rl_lightning.envs.envpool_backend import EnvpoolVectorEnv
    from rl_lightning.evaluation import make_eval_env

    config = EnvConfig(env_id="BreakoutNoFrameskip-v4", backend="envpool")
    evaluation = make_eval_env(config, num_envs=2)
    assert isinstance(evaluation, EnvpoolVectorEnv) and not evaluation.training
    evaluation.close()
    video = make_eval_env(config, num_envs=1, render_mode="rgb_array")
    assert not isinstance(video, EnvpoolVectorEnv) and video.render_mode == "rgb_array"
    video.close()


def test_without_envpool_the_error_names_the_extra(monkeypatch):
    import sys

    from rl_lightning.envs import envpool_backend

    monkeypatch.setitem(sys.modules, "envpool", None)
    envpool_backend.envpool_ids.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"pip install 'rl-lightning\[envpool\]'"):
            envs("CartPole-v1")
    finally:
        envpool_backend.envpool_ids.cache_clear()


def test_the_envpool_env_carries_its_time_limit():
    """Evaluation cuts episodes only in envs with no time limit (``time_limit`` None): envpool's have one."""
    vec = envs("CartPole-v1")
    assert vec.time_limit == 500
    vec.close()
