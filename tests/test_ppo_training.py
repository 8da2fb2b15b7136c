"""PPO end to end through the Lightning Trainer: batches, seeding, checkpoints, bad input."""

import lightning as L
import pytest
import torch

from rl_lightning import PPO, EnvConfig
from rl_lightning.data.rollout import Rollout
from tests.helpers import build, quick_trainer


def tiny_ppo(**kw) -> PPO:
    args = dict(
        env=EnvConfig("CartPole-v1", num_envs=4, seed=0),
        total_env_steps=1024,
        num_steps=16,
        num_minibatches=2,
        update_epochs=2,
        env_steps_per_epoch=256,
        eval_episodes=2,
    )
    args.update(kw)
    return build(PPO, **args)


def test_every_epoch_has_the_same_number_of_rollouts_and_budget_stops_training():
    model = tiny_ppo()
    per_step, epoch_ends = [], []
    trainer = quick_trainer()
    original = model.collect_rollout

    class Count(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            per_step.append(batch)  # what the data loader paces: rollouts per training step

        def on_train_epoch_end(self, trainer, module):
            epoch_ends.append(module.env_steps)

    def checked(policy):
        rollout = original(policy)
        assert isinstance(rollout, Rollout) and rollout.obs.shape == (16, 4, 4)
        return rollout

    model.collect_rollout = checked
    trainer.callbacks.append(Count())
    trainer.fit(model)
    assert per_step == [1] * 16 and epoch_ends == [256, 512, 768, 1024]  # 256 env steps / 64 per rollout
    assert model.env_steps == 1024
    assert trainer.global_step == 16 * 2 * 2  # rollouts x update_epochs x num_minibatches
    assert "val/episode_return" in trainer.callback_metrics


def first_rollout_and_update(seed: int):
    L.seed_everything(seed)
    model = tiny_ppo(env=EnvConfig("CartPole-v1", num_envs=4), total_env_steps=64, env_steps_per_epoch=64)
    seen = []
    original = model.collect_rollout

    def capture(policy):
        rollout = original(policy)
        seen.append(Rollout(*[t.clone() for t in rollout]))
        return rollout

    model.collect_rollout = capture
    quick_trainer().fit(model)
    return seen[0], [p.detach().clone() for p in model.parameters()]


def test_same_seed_gives_identical_first_rollout_and_update():
    (b1, p1), (b2, p2), (b3, _) = first_rollout_and_update(3), first_rollout_and_update(3), first_rollout_and_update(4)
    for x, y in zip(b1, b2, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    for x, y in zip(p1, p2, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert not torch.equal(b1.obs, b3.obs)


def test_checkpoint_resume_continues_global_step_and_env_steps(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    ckpt_cb = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = quick_trainer(callbacks=[ckpt_cb], enable_checkpointing=True)
    trainer.fit(tiny_ppo(total_env_steps=512))
    assert trainer.global_step == 8 * 4
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert ckpt["rl_lightning"]["env_steps"] == 512

    resumed = tiny_ppo(total_env_steps=1024)
    trainer2 = quick_trainer()
    trainer2.fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.env_steps == 1024
    assert trainer2.global_step == 16 * 4

    loaded = PPO.load_from_checkpoint(tmp_path / "last.ckpt")
    obs = torch.zeros(3, 4)
    assert loaded(obs).shape == (3,)


def test_unknown_env_id_names_it_and_suggests_close_ids():
    with pytest.raises(ValueError, match=r"CartPol-v1.*CartPole-v1"):
        quick_trainer().fit(tiny_ppo(env=EnvConfig("CartPol-v1")))


def test_unsupported_action_space_is_named():
    with pytest.raises(ValueError, match=r"PPO cannot handle the action space Dict\("):
        quick_trainer().fit(tiny_ppo(env=EnvConfig("test/DictAction-v0", num_envs=2)))


def test_minibatches_must_divide_the_rollout():
    with pytest.raises(ValueError, match=r"num_minibatches=3 .* 4 \* 16 = 64"):
        tiny_ppo(num_minibatches=3)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"total_env_steps": 0}, "total_env_steps"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_ppo(**kw)


def test_anneal_clip_coef_decays_the_clip_range_over_the_budget():
    seen = []
    model = tiny_ppo(total_env_steps=512, env_steps_per_epoch=512, clip_coef=0.2, anneal_clip_coef=True)
    original = model.minibatch_loss

    def recording(*args):
        seen.append((model.env_steps, model.clip_coef))
        return original(*args)

    model.minibatch_loss = recording
    quick_trainer().fit(model)
    # 8 rollouts of 64 env steps, each updated with 0.2 * (1 - env steps / 512) after its collection
    assert sorted(set(seen)) == [(64 * k, pytest.approx(0.2 * (1 - 64 * k / 512))) for k in range(1, 9)]
    with pytest.raises(Exception, match="anneal_clip_coef does not run as CUDA graphs"):
        model.enable_cuda_graphs()
    with pytest.raises(Exception, match="anneal_clip_coef does not run compiled"):
        model.compile_networks()
