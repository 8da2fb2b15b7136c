"""Resuming from a checkpoint continues the run exactly, where the environment allows it.

A checkpoint holds every piece of learner state: weights, optimizer, env-step counter (which drives
the schedules), RNG states. What it cannot hold is the inside of a gymnasium env mid-episode (the
state of arbitrary simulators is not serializable as tensors): a resumed run restarts its envs with
fresh seeds, so the first episodes after a resume differ, at most ``num_envs`` episodes per rank.
To prove everything else is exact, these tests use an env whose reset is deterministic and whose
episodes end exactly at the checkpoint: there, interrupted and uninterrupted runs match bit for bit.
"""

import lightning as L
import pytest
import torch

from rl_lightning import C51, DQN, PPO, QRDQN, SAC, TQC, CrossQ, EnvConfig
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.checkpointing import ReplaySideFileIO
from tests.helpers import build, quick_trainer


def ppo(total: int) -> PPO:
    return build(
        PPO,
        env=EnvConfig("test/Corridor-v0", num_envs=4, seed=0),
        total_env_steps=total,
        num_steps=16,
        num_minibatches=4,
        update_epochs=3,
        env_steps_per_epoch=256,
        eval_episodes=2,
        learning_rate=1e-2,
    )


def test_ppo_resume_is_bit_exact_when_episodes_end_at_the_checkpoint(tmp_path):
    L.seed_everything(0)
    straight = ppo(1024)
    quick_trainer().fit(straight)

    L.seed_everything(0)
    interrupted = ppo(1024)  # same budget (it drives the lr schedule), stopped after 2 of 4 epochs
    cb = LastCheckpoint(dirpath=tmp_path)
    quick_trainer(max_epochs=2, callbacks=[cb], enable_checkpointing=True).fit(interrupted)
    assert interrupted.env_steps == 512
    torch.manual_seed(123)  # whatever happens in between must not matter: RNG states come from the checkpoint
    resumed = ppo(1024)
    trainer = quick_trainer()
    trainer.fit(resumed, ckpt_path=tmp_path / "last.ckpt")

    assert resumed.env_steps == straight.env_steps == 1024
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt_a = straight.trainer.optimizers[0].state_dict()["state"]
    opt_b = trainer.optimizers[0].state_dict()["state"]
    for k in opt_a:
        torch.testing.assert_close(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"], rtol=0, atol=0)


# The distributional variants with noise (its buffers and draws must resume too) and the other options.
OPTIONS = {
    C51: dict(noisy=True, prioritized_replay=True, n_step=3, n_atoms=11),
    QRDQN: dict(noisy=True, double_q=True, dueling=True, n_quantiles=5),
    CrossQ: dict(critic_hidden_sizes=(16,), batch_renorm_warmup_steps=100),
}


def off_policy(cls: type, total: int) -> DQN | SAC:
    # 2 envs: the 32-vector-step warm-up plus epochs of 128 vector steps end every 16-step episode at
    # an epoch end, where the checkpoint is written.
    env_id = "test/Corridor-v0" if issubclass(cls, DQN) else "test/SlidingCorridor-v0"
    return build(
        cls,
        env=EnvConfig(env_id, num_envs=2, seed=0),
        total_env_steps=total,
        buffer_size=2000,
        batch_size=16,
        learning_starts=64,
        train_freq=4,
        gradient_steps=2,
        hidden_sizes=(16,),
        env_steps_per_epoch=256,
        eval_episodes=2,
        save_replay_buffer=True,
        **OPTIONS.get(cls, {}),
    )


@pytest.mark.parametrize(
    "cls, side_file",
    [(DQN, False), (DQN, True), (SAC, False), (SAC, True), (C51, False), (QRDQN, False), (TQC, False), (CrossQ, False)],
    ids=lambda v: v.__name__ if isinstance(v, type) else ("side-file" if v else "inline"),
)  # side files: any one algorithm's
def test_off_policy_resume_with_replay_buffer_is_bit_exact(cls, side_file, tmp_path, monkeypatch):
    # A buffer of at least ReplaySideFileIO.min_bytes goes to a file next to the checkpoint.
    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 0 if side_file else 2**62)
    L.seed_everything(0)
    straight = off_policy(cls, 1024)
    quick_trainer().fit(straight)

    L.seed_everything(0)
    interrupted = off_policy(cls, 1024)
    cb = LastCheckpoint(dirpath=tmp_path)
    quick_trainer(max_epochs=2, callbacks=[cb], enable_checkpointing=True).fit(interrupted)
    assert interrupted.env_steps == 576  # 64 warm-up + 2 x 256: episodes end here
    state = torch.load(tmp_path / "last.ckpt", weights_only=True)["rl_lightning"]
    sides = [p.name for p in tmp_path.glob("*.replay-*.pt")]
    if side_file:  # only the newest step's file is left, and the checkpoint names it
        assert "replay_buffer" not in state and sides == [state["replay_buffer_file"]]
        assert sides == ["last.ckpt.replay-000000000576.pt"]
    else:
        assert "replay_buffer" in state and not sides
    torch.manual_seed(123)
    resumed = off_policy(cls, 1024)
    quick_trainer().fit(resumed, ckpt_path=tmp_path / "last.ckpt")

    assert resumed.env_steps == straight.env_steps == 1024
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # The same transitions were collected after the resume (valid rows: those sampling reads).
    valid = torch.from_numpy(straight.replay.buffer.valid)
    assert torch.equal(valid, torch.from_numpy(resumed.replay.buffer.valid))
    assert torch.equal(straight.replay.buffer.frames[valid], resumed.replay.buffer.frames[valid])
    assert torch.equal(straight.replay.buffer.actions[valid], resumed.replay.buffer.actions[valid])
