"""A2C: the loss, rollouts collected one update apart, a small learning run."""

import lightning as L
import pytest
import torch

from rl_lightning import A2C, EnvConfig
from rl_lightning.algorithms.a2c import a2c_loss
from tests.helpers import build, final_return, quick_trainer


def test_a2c_loss_matches_direct_computation():
    g = torch.Generator().manual_seed(0)
    n = 40
    logp, adv, v, ret = (torch.randn(n, generator=g) for _ in range(4))
    ent = torch.rand(n, generator=g)
    out = a2c_loss(logp, adv, v, ret, ent, ent_coef=0.01, vf_coef=0.5)
    pg = sum(-float(adv[i]) * float(logp[i]) for i in range(n)) / n
    vl = sum((float(ret[i]) - float(v[i])) ** 2 for i in range(n)) / n
    torch.testing.assert_close(out.policy_loss, torch.tensor(pg))
    torch.testing.assert_close(out.value_loss, torch.tensor(vl))
    torch.testing.assert_close(out.entropy, ent.mean())
    torch.testing.assert_close(out.loss, torch.tensor(pg - 0.01 * float(ent.mean()) + 0.5 * vl))


def tiny_a2c(**kw) -> A2C:
    args = dict(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=0),
        total_env_steps=96,
        num_steps=4,
        env_steps_per_epoch=48,
        eval_episodes=1,
    )
    args.update(kw)
    return build(A2C, **args)


def run_recording_collections(model: A2C):
    """Fit, recording the optimizer steps done before each rollout is collected."""
    steps_at_collection = []
    original = model.collect_rollout

    def recording(policy):
        steps_at_collection.append(model.trainer.global_step)
        return original(policy)

    model.collect_rollout = recording
    trainer = quick_trainer()
    trainer.fit(model)
    return steps_at_collection, trainer


def test_each_rollout_is_collected_after_the_previous_update():
    model = tiny_a2c(rollouts_per_step=4)
    steps_at_collection, trainer = run_recording_collections(model)
    # 96 env steps / 8 per rollout = 12 rollouts, 6 per epoch, in training steps of 4 and 2
    # rollouts (no overshoot of the epoch); rollout k is collected after k updates.
    assert steps_at_collection == list(range(12))
    assert trainer.global_step == 12 and model.env_steps == 96


def test_rollouts_per_step_changes_nothing_but_speed():
    params = []
    for k in (1, 4):
        L.seed_everything(0)
        model = tiny_a2c(rollouts_per_step=k)
        quick_trainer().fit(model)
        params.append([p.detach().clone() for p in model.agent.parameters()])
    for x, y in zip(*params, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_rmsprop_is_sb3s_and_steps_all_parameters_in_one_foreach_call():
    model = tiny_a2c()
    quick_trainer().fit(model)
    opt = model.optimizers().optimizer
    assert isinstance(opt, torch.optim.RMSprop)
    assert (opt.defaults["alpha"], opt.defaults["eps"], opt.defaults["foreach"]) == (0.99, 1e-5, True)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [({"optimizer": "sgd"}, "optimizer"), ({"rollouts_per_step": 0}, "rollouts_per_step"), ({"gae_lambda": 2}, "gae")],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_a2c(**kw)


def train_a2c_cartpole(seed: int, total_env_steps: int) -> float:
    env = EnvConfig("CartPole-v1", num_envs=8)
    return final_return(A2C, seed, env=env, total_env_steps=total_env_steps)  # SB3 zoo = defaults


def test_a2c_cartpole_beats_random_on_a_small_budget():
    # A random policy averages about 22.
    assert train_a2c_cartpole(seed=0, total_env_steps=30_000) > 150


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a2c_cartpole_solves_within_500k_steps(seed):
    assert train_a2c_cartpole(seed, 500_000) >= 475
