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
