"""TQC: the truncated-mixture target, the quantile Huber loss and the actor loss (pure functions,
hand-computed), the quantile critics, gSDE, checkpoints, bad input, learning on Pendulum."""

import lightning as L
import pytest
import torch

from rl_lightning import TQC, EnvConfig
from rl_lightning.algorithms.tqc import quantile_huber_loss, tqc_actor_loss, truncated_quantile_target
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.errors import ConfigError
from tests.helpers import build, quick_trainer, tiny_pendulum


def test_truncated_target_pools_sorts_and_drops_the_top_atoms_of_every_critic():
    # 2 critics x 3 quantiles; batch row 0 continues, row 1 terminates.
    next_q = torch.tensor([[[1.0, 5.0, 3.0], [0.0, 0.0, 0.0]], [[2.0, 6.0, 4.0], [9.0, 9.0, 9.0]]])
    rewards, discounts, terminated = torch.tensor([1.0, 7.0]), torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0])
    next_log_probs, alpha = torch.tensor([-2.0, -2.0]), torch.tensor(0.5)
    # row 0: pooled, sorted [1 2 3 4 5 6]; drop 1 per net -> [1 2 3 4]; 1 + 0.5 * (z + 0.5 * 2)
    target = truncated_quantile_target(rewards, discounts, terminated, next_q, next_log_probs, alpha, 1)
    torch.testing.assert_close(target, torch.tensor([[2.0, 2.5, 3.0, 3.5], [7.0, 7.0, 7.0, 7.0]]))
    # nothing dropped: all 6 atoms
    assert truncated_quantile_target(rewards, discounts, terminated, next_q, next_log_probs, alpha, 0).shape == (2, 6)


def test_quantile_huber_loss_hand_computed():
    # one critic, one row, quantiles [0, 3] at tau = [1/4, 3/4], one target atom 1:
    # delta = [1, -2]: huber [0.5, 1.5] (|delta| <= 1 quadratic, else linear), weights |tau - 1{delta<0}|
    # = [0.25, 0.25] -> mean(0.125, 0.375) = 0.25
    loss = quantile_huber_loss(torch.tensor([[[0.0, 3.0]]]), torch.tensor([[1.0]]))
    torch.testing.assert_close(loss, torch.tensor(0.25))
    # the gradient pulls the low quantile up with weight tau and the high one down with 1 - tau
    q = torch.tensor([[[0.0, 3.0]]], requires_grad=True)
    quantile_huber_loss(q, torch.tensor([[1.0]])).backward()
    torch.testing.assert_close(q.grad, torch.tensor([[[-0.125, 0.125]]]))


def test_quantile_huber_loss_of_bfloat16_quantiles_against_float32_targets():
    # an autocast critic's quantiles against float32 targets: computed in float32, gradients back in bfloat16
    q16 = torch.tensor([[[0.0, 3.0]]], dtype=torch.bfloat16, requires_grad=True)
    loss = quantile_huber_loss(q16, torch.tensor([[1.0]]))
    loss.backward()
    assert loss.dtype == torch.float32 and q16.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, torch.tensor(0.25))
    torch.testing.assert_close(q16.grad.float(), torch.tensor([[[-0.125, 0.125]]]))


def test_actor_loss_averages_every_quantile_of_every_critic():
    quantiles = torch.tensor([[[1.0, 3.0]], [[5.0, 7.0]]])  # [2 critics, 1 row, 2 quantiles]: mean 4
    torch.testing.assert_close(tqc_actor_loss(quantiles, torch.tensor([-1.0]), torch.tensor(0.5)), torch.tensor(-4.5))


def test_critics_give_n_quantiles_each_and_training_updates_them():
    model = tiny_pendulum(TQC, n_critics=3, n_quantiles=5, top_quantiles_to_drop_per_net=1)
    quick_trainer().fit(model)
    assert model.critic(torch.randn(4, 3), torch.rand(4, 1)).shape == (3, 4, 5)
    assert model.num_updates > 0 and all(torch.isfinite(p).all() for p in model.parameters())


def test_gsde_and_checkpoint_round_trip(tmp_path):
    model = tiny_pendulum(TQC, use_sde=True, n_quantiles=5)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    loaded = TQC.load_from_checkpoint(tmp_path / "last.ckpt")
    assert loaded.hparams.use_sde and loaded.num_updates == model.num_updates
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, loaded.state_dict()[k], msg=k)


def test_discrete_actions_fail_at_once_naming_the_space():
    model = tiny_pendulum(TQC, env=EnvConfig("CartPole-v1", num_envs=1, seed=0))
    with pytest.raises(ConfigError, match=r"TQC cannot handle the action space Discrete\(2\).*use "):
        quick_trainer().fit(model)
    assert model.env_steps == 0


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(n_quantiles=0), "n_quantiles must be >= 1"),
        (dict(n_quantiles=2, top_quantiles_to_drop_per_net=2), "must be below n_quantiles"),
        (dict(top_quantiles_to_drop_per_net=-1), "top_quantiles_to_drop_per_net must be >= 0"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        tiny_pendulum(TQC, **kw)


@pytest.mark.slow
def test_tqc_pendulum_reaches_minus_200():
    # configs/tqc/pendulum.yaml (RL Zoo): learning_rate 1e-3, 20k env steps.
    L.seed_everything(0)
    model = build(
        TQC,
        env=EnvConfig("Pendulum-v1", num_envs=1, seed=0),
        total_env_steps=20_000,
        env_steps_per_epoch=5000,
        eval_episodes=10,
        learning_rate=1e-3,
    )
    trainer = quick_trainer()
    trainer.fit(model)
    assert float(trainer.callback_metrics["val/episode_return"]) > -200
