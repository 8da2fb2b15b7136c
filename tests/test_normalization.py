"""Observation / reward normalization: statistics, checkpoints, frozen evaluation."""

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import PPO, EnvConfig
from rl_lightning.envs.normalize import RunningMeanStd
from tests.helpers import build, quick_trainer


def test_running_mean_std_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(100, 4)).astype(np.float32)
    rms = RunningMeanStd((4,), epsilon=0.0 + 1e-12)
    for chunk in np.split(data, [7, 30, 31, 100]):
        if len(chunk):
            rms.update(torch.as_tensor(chunk))
    torch.testing.assert_close(rms.mean, torch.as_tensor(data.mean(0)), atol=1e-5, rtol=0)
    torch.testing.assert_close(rms.var, torch.as_tensor(data.var(0)), atol=1e-4, rtol=1e-5)
    x = torch.as_tensor(data[:5])
    torch.testing.assert_close(rms.normalize(x), (x - rms.mean) / (rms.var + 1e-8).sqrt())


def normalized_ppo(**kw) -> PPO:
    args = dict(
        env=EnvConfig("test/BoundedAction-v0", num_envs=2, seed=0),
        total_env_steps=256,
        num_steps=32,
        num_minibatches=2,
        update_epochs=1,
        normalize_obs=True,
        normalize_reward=True,
        env_steps_per_epoch=128,
        eval_episodes=2,
    )
    args.update(kw)
    return build(PPO, **args)


def test_collected_observations_are_what_the_policy_acted_on():
    # The stored log-probs must be those of the stored (normalized) observations: statistics
    # change only between rollouts.
    model = normalized_ppo()
    model.trainer = quick_trainer()  # for world_size
    model.setup("fit")
    try:
        for _ in range(3):
            rollout = model.collect_rollout(model.agent)
            logp, _, values = model.agent.evaluate(rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1))
            torch.testing.assert_close(logp, rollout.logprobs.flatten())
            torch.testing.assert_close(values, rollout.values.flatten())
            assert rollout.obs.abs().max() <= 10.0
        assert model.obs_rms.mean[0] == pytest.approx(100.0, abs=3.0)  # the raw observations' scale
        assert model.return_rms.count > 190
    finally:
        model.teardown("fit")


def test_statistics_survive_a_checkpoint_and_are_frozen_in_evaluation(tmp_path):
    L.seed_everything(0)
    model = normalized_ppo()
    trainer = quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True)
    trainer.fit(model)
    stats = {k: v.clone() for k, v in model.state_dict().items() if "_rms." in k}
    assert set(stats) == {f"{n}_rms.{s}" for n in ("obs", "return") for s in ("mean", "var", "count")}
    assert stats["obs_rms.count"] > 256 and stats["obs_rms.mean"][0] == pytest.approx(100.0, abs=3.0)

    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=True)  # tensors, ints and floats only
    for k, v in stats.items():
        torch.testing.assert_close(ckpt["state_dict"][k], v, rtol=0, atol=0)

    loaded = PPO.load_from_checkpoint(tmp_path / "last.ckpt")
    for k, v in stats.items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)
    # Raw observations in, the training normalization applied: forward = agent(normalize(obs)).
    raw = torch.tensor([[100.0, -50.0, 3.0], [120.0, -49.0, 2.9]])
    torch.testing.assert_close(loaded(raw), loaded.agent(loaded.obs_rms.normalize(raw)))
    assert not torch.allclose(loaded(raw), loaded.agent(raw))

    quick_trainer().validate(loaded)  # evaluation episodes do not touch the statistics
    for k, v in stats.items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["gymnasium", "torch"])
def test_statistics_take_in_every_step_as_vecnormalize(backend):
    """SB3's ``VecNormalize``: each observation the env returns joins the statistics before the policy sees
    it, normalized by them, and each reward is scaled by the return statistics of its own step (the
    discounted return so far joins them first); not once per rollout, which would leave the first
    rollout's observations raw."""
    model = build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=3, seed=0, backend=backend),
        num_steps=40,
        num_minibatches=1,
        gamma=0.9,
        normalize_obs=True,
        normalize_reward=True,
    )
    model.trainer = quick_trainer()
    model.setup("fit")
    seen = []  # what the env returned, raw
    try:
        step = model.envs.step

        def recording_step(actions):
            out = step(actions)
            seen.append([torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x).clone() for x in out[:4]])
            return out

        model.envs.step = recording_step
        rollout = model.collect_rollout(model.agent)
    finally:
        model.teardown("fit")
    obs_stats, return_stats = RunningMeanStd((4,)), RunningMeanStd(())
    running = torch.zeros(3)
    for t, (next_obs, rewards, terminated, truncated) in enumerate(seen):
        obs_stats.update(next_obs.float())
        if t + 1 < len(seen):
            torch.testing.assert_close(rollout.obs[t + 1], obs_stats.normalize(next_obs), rtol=0, atol=1e-5)
        running = running * 0.9 + rewards.float()
        return_stats.update(running)
        torch.testing.assert_close(rollout.rewards[t], return_stats.scale(rewards), rtol=0, atol=1e-5)
        running[terminated | truncated] = 0.0
    assert (terminated | truncated).any() or any((s[2] | s[3]).any() for s in seen), "episodes must end"
    torch.testing.assert_close(model.obs_rms.mean, obs_stats.mean)
