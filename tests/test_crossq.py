"""CrossQ: batch renormalization (hand-computed statistics in training and evaluation mode, per critic,
warm-up, checkpointed), the joint forward pass of (s, a) and (s', a'), the policy delay, Adam's betas,
no target networks, bad input, learning on Pendulum."""

import math

import lightning as L
import pytest
import torch

from rl_lightning import CrossQ, EnvConfig
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.errors import ConfigError
from rl_lightning.networks.batch_renorm import BatchRenorm
from tests.helpers import build, quick_trainer, tiny_pendulum

EPS = 1e-3


def tiny_crossq(**kw):
    return tiny_pendulum(CrossQ, **{"critic_hidden_sizes": (16, 16), "policy_delay": 2, **kw})


# ------------------------------------------------------------------------------ batch renorm
def test_batch_renorm_warmup_is_batch_norm_and_updates_running_statistics():
    layer = BatchRenorm(1, momentum=0.01, warmup_steps=10)
    x = torch.tensor([[1.0], [3.0]])  # batch mean 2, unbiased variance 2
    out = layer(x)
    torch.testing.assert_close(out, torch.tensor([[-1.0], [1.0]]) / math.sqrt(2 + EPS))
    # running <- running + 0.01 * (batch - running), from mean 0 and variance 1
    torch.testing.assert_close(layer.running_mean, torch.tensor([0.02]))
    torch.testing.assert_close(layer.running_var, torch.tensor([1.01]))
    assert layer.steps.item() == 1
    # evaluation mode: the running statistics, left alone
    layer.eval()
    torch.testing.assert_close(layer(x), (x - 0.02) / math.sqrt(1.01 + EPS))
    assert layer.steps.item() == 1 and layer.running_mean.item() == pytest.approx(0.02)


def test_batch_renorm_after_warmup_corrects_the_batch_statistics_towards_the_running_ones():
    layer = BatchRenorm(1, momentum=0.01, warmup_steps=0)
    x = torch.tensor([[1.0], [3.0]])
    layer(x)  # step 0: still batch norm (renormalization starts once steps > warmup_steps)
    out = layer(x)  # running mean 0.02, variance 1.01 before this call
    running_std, batch_std = math.sqrt(1.01 + EPS), math.sqrt(2 + EPS)
    r = batch_std / running_std  # within [1/3, 3]
    d = (2 - 0.02) / running_std  # within [-5, 5]
    mean, var = 2 - d * math.sqrt(2) / r, 2 / r**2
    torch.testing.assert_close(out, (x - mean) / math.sqrt(var + EPS))
    # the scale is clipped to 3: a batch 100x wider than the running statistics
    wide = BatchRenorm(1, warmup_steps=0)
    wide.steps.fill_(1)
    y = torch.tensor([[-100.0], [100.0]])  # mean 0, variance 20000: r = 3, d = 0
    torch.testing.assert_close(wide(y), y / math.sqrt(20000 / 3**2 + EPS))


def test_ensemble_batch_renorm_keeps_statistics_per_member():
    layer = BatchRenorm(2, n=2)
    x = torch.stack([torch.tensor([[0.0, 1.0], [2.0, 3.0]]), torch.tensor([[10.0, 0.0], [10.0, 4.0]])])  # [2, 2, 2]
    layer(x)
    torch.testing.assert_close(layer.running_mean, 0.01 * torch.tensor([[[1.0, 2.0]], [[10.0, 2.0]]]))
    torch.testing.assert_close(layer.running_var, 0.99 + 0.01 * torch.tensor([[[2.0, 2.0]], [[0.0, 8.0]]]))
    shared = BatchRenorm(2, n=3)  # [B, F] input, read by every member
    assert shared(x[0]).shape == (3, 2, 2)


# ------------------------------------------------------------------------------------ CrossQ
def test_no_targets_adam_betas_and_policy_delay():
    model = tiny_crossq(gradient_steps=3, phases_per_step=1)
    trainer = quick_trainer()
    trainer.fit(model)
    assert not any("target" in k for k in model.state_dict())
    actor_opt, critic_opt, alpha_opt = trainer.optimizers
    # the paper's code and sb3-contrib: b1 = 0.5 for the actor and the critics; the temperature keeps Adam's 0.9
    assert all(g["betas"] == (0.5, 0.999) for o in (actor_opt, critic_opt) for g in o.param_groups)
    assert all(g["betas"] == (0.9, 0.999) for g in alpha_opt.param_groups)
    steps = {name: {s["step"].item() for s in o.state.values()} for name, o in (("a", actor_opt), ("c", critic_opt))}
    assert steps["c"] == {model.num_updates} and steps["a"] == {model.num_updates // 2}
    # each critic renorm layer saw one training batch per critic update; the actor's one per actor update
    assert {n.steps.item() for n in model.critic.norms} == {model.num_updates}
    actor_norms = [m for m in model.actor.modules() if isinstance(m, BatchRenorm)]
    assert len(actor_norms) == 3 and {n.steps.item() for n in actor_norms} == {model.num_updates // 2}


def test_critics_see_current_and_next_pairs_in_one_batch():
    model = tiny_crossq()
    model.build_for_env()
    seen = []
    model.critic.norms[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape))
    obs, next_obs = torch.randn(8, 3), torch.randn(8, 3)

    class Stub:  # the optimizers, outside a Trainer
        def zero_grad(self):
            pass

        def step(self):
            pass

    model.optimizers = lambda: [Stub(), Stub(), Stub()]
    model.gradient_step = lambda opt, loss: None
    model.critic_update(obs, torch.rand(8, 1), torch.ones(8), torch.full((8,), 0.99), torch.zeros(8), next_obs)
    assert seen == [(16, 4)]  # 8 (s, a) and 8 (s', a') rows together, [s, a] features


def test_running_statistics_are_checkpointed_and_evaluation_uses_them(tmp_path):
    model = tiny_crossq()
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    state = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]
    assert {"critic.norms.1.running_mean", "critic.norms.1.running_var", "critic.norms.1.steps"} <= set(state)
    assert not torch.equal(state["critic.norms.1.running_var"], torch.ones_like(state["critic.norms.1.running_var"]))
    loaded = CrossQ.load_from_checkpoint(tmp_path / "last.ckpt")
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, loaded.state_dict()[k], msg=k)
    # evaluation mode: deterministic actions that do not depend on the rest of the batch
    loaded.eval()
    obs = torch.randn(5, 3)
    torch.testing.assert_close(loaded(obs)[:1], loaded(obs[:1]))


def test_discrete_actions_fail_at_once_naming_the_space():
    model = tiny_crossq(env=EnvConfig("CartPole-v1", num_envs=1, seed=0))
    with pytest.raises(ConfigError, match=r"CrossQ cannot handle the action space Discrete\(2\).*use "):
        quick_trainer().fit(model)
    assert model.env_steps == 0


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(policy_delay=0), "policy_delay must be >= 1"),
        (dict(critic_hidden_sizes=(0,)), "hidden_sizes must be positive"),
        (dict(batch_renorm_momentum=0.0), r"batch_renorm_momentum must be in \(0, 1\]"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        tiny_crossq(**kw)


@pytest.mark.slow
def test_crossq_pendulum_reaches_minus_200():
    # configs/crossq/pendulum.yaml (RL Zoo): policy_delay 2, [256, 256] networks, 20k env steps.
    L.seed_everything(0)
    model = build(
        CrossQ,
        env=EnvConfig("Pendulum-v1", num_envs=1, seed=0),
        total_env_steps=20_000,
        env_steps_per_epoch=5000,
        eval_episodes=10,
        policy_delay=2,
        critic_hidden_sizes=(256, 256),
    )
    trainer = quick_trainer()
    trainer.fit(model)
    assert float(trainer.callback_metrics["val/episode_return"]) > -200
