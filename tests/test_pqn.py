"""PQN: the Q(lambda) returns against hand-computed cases, acting, short fits on each env backend, and a
checkpoint and export round trip on MinAtar frames."""

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning import PQN, EnvConfig
from rl_lightning.data.rollout import gae
from rl_lightning.networks.q_networks import QNetwork
from tests.helpers import build, quick_trainer

MINATAR_FRAMES = gym.spaces.Box(0, 1, (10, 10, 4), bool)  # MinAtar Breakout's observations (10x10, 4 channels)


def tiny_pqn(env: EnvConfig, **kw) -> PQN:
    args = dict(
        env=env, total_env_steps=512, env_steps_per_epoch=256, eval_episodes=1, num_steps=32, hidden_sizes=(16, 16)
    )
    return build(PQN, **{**args, **kw})


# ------------------------------------------------------------------------------------ Q(lambda) returns
def test_q_lambda_returns_by_hand_inside_an_episode_at_termination_and_at_truncation():
    from rl_lightning.algorithms.pqn import q_lambda_returns

    # Three sub-envs (columns), three steps; gamma = lambda = 0.5. next_q_max[t] = max_a Q(s'_t, a).
    rewards = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    next_q_max = torch.tensor([[10.0, 10.0, 10.0], [20.0, 20.0, 20.0], [30.0, 30.0, 30.0]])
    terminated = torch.tensor([[False, False, False], [False, True, False], [False, False, False]])
    truncated = torch.tensor([[False, False, False], [False, False, True], [False, False, False]])
    returns = q_lambda_returns(rewards, next_q_max, terminated, terminated | truncated, 0.5, 0.5)
    # Column 0, one episode:   G2 = 3 + .5 * 30 = 18;  G1 = 2 + .5 * (.5 * 20 + .5 * 18) = 11.5;
    #                          G0 = 1 + .5 * (.5 * 10 + .5 * 11.5) = 6.375
    # Column 1, ends at t = 1: G1 = 2 (no bootstrap);   G0 = 1 + .5 * (.5 * 10 + .5 * 2) = 4
    # Column 2, cut at t = 1:  G1 = 2 + .5 * 20 = 12 (from Q of the final observation, not G2 of the next
    #                          episode);                G0 = 1 + .5 * (.5 * 10 + .5 * 12) = 6.5
    want = torch.tensor([[6.375, 4.0, 6.5], [11.5, 2.0, 12.0], [18.0, 18.0, 18.0]])
    torch.testing.assert_close(returns, want)


def test_q_lambda_returns_are_one_step_targets_at_lambda_0_and_monte_carlo_at_lambda_1():
    from rl_lightning.algorithms.pqn import q_lambda_returns

    rewards, next_q_max = torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[10.0], [20.0], [30.0]])
    no = torch.zeros(3, 1, dtype=torch.bool)
    torch.testing.assert_close(q_lambda_returns(rewards, next_q_max, no, no, 0.9, 0.0), rewards + 0.9 * next_q_max)
    # lambda = 1: discounted rewards to the end of the rollout, then the bootstrap from its last next state.
    mc = q_lambda_returns(rewards, next_q_max, no, no, 0.9, 1.0)
    torch.testing.assert_close(mc[0, 0], torch.tensor(1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 30))


def test_q_lambda_returns_equal_gaes_lambda_returns_of_the_max_q_values():
    """With the collector's values (``values[t + 1] = next_values[t]`` inside an episode) Peng's
    Q(lambda) return is GAE's TD(lambda) return of V = max_a Q."""
    from rl_lightning.algorithms.pqn import q_lambda_returns

    gen = torch.Generator().manual_seed(0)
    t, n = 20, 6
    values = torch.randn(t + 1, n, generator=gen)
    rewards = torch.randn(t, n, generator=gen)
    terminated = torch.rand(t, n, generator=gen) < 0.1
    truncated = (torch.rand(t, n, generator=gen) < 0.1) & ~terminated
    final_values = torch.randn(t, n, generator=gen)  # max Q of the final observations of truncated steps
    next_values = torch.where(truncated, final_values, values[1:])
    dones = terminated | truncated
    _, want = gae(rewards, values[:-1], next_values, terminated, dones, 0.97, 0.7)
    torch.testing.assert_close(q_lambda_returns(rewards, next_values, terminated, dones, 0.97, 0.7), want)


# ------------------------------------------------------------------------------------------- acting
def test_acting_is_epsilon_greedy_and_reports_the_max_q_value():
    model = tiny_pqn(EnvConfig("CartPole-v1", num_envs=2, seed=0))
    model.build_for_env()
    obs = torch.randn(1000, 4)
    q = model.q_net(obs)
    model.epsilon.fill_(0.0)
    actions, logprobs, values = model.act(obs)
    assert torch.equal(actions, q.argmax(-1)) and torch.equal(values, q.max(-1).values)
    assert torch.equal(logprobs, torch.zeros(1000)) and torch.equal(model.value(obs), values)
    model.epsilon.fill_(0.5)
    off_greedy = (model.act(obs)[0] != q.argmax(-1)).float().mean()
    assert 0.15 < off_greedy < 0.35  # half the actions random, half of those differ (2 actions)


def test_every_hidden_layer_is_layer_normalized_before_its_activation():
    model = tiny_pqn(EnvConfig("CartPole-v1", num_envs=2, seed=0), hidden_sizes=(32, 24))
    model.build_for_env()
    kinds = [type(m).__name__ for m in model.q_net.torso.net]
    assert kinds == ["Flatten", "Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm", "ReLU"]
    assert not any(isinstance(m, nn.LayerNorm) for m in QNetwork(MINATAR_FRAMES, gym.spaces.Discrete(3)).modules())


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"q_lambda": 1.5}, "q_lambda"),
        ({"num_minibatches": 3}, "does not divide"),
        ({"end_e": -0.1}, "end_e"),
        ({"update_epochs": 0}, "update_epochs"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_pqn(EnvConfig("CartPole-v1", num_envs=2), **kw)


# ------------------------------------------------------------------------------------------ fitting
def fit(model: PQN) -> tuple[PQN, dict]:
    trainer = quick_trainer()
    trainer.fit(model)
    return model, trainer


BACKENDS = ["gymnasium", "torch"] + (["envpool"] if importlib.util.find_spec("envpool") else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fits_on_each_backend_updating_the_q_network(backend):
    model = tiny_pqn(EnvConfig("CartPole-v1", num_envs=4, seed=0, backend=backend))
    model.build_for_env()
    before = [p.detach().clone() for p in model.q_net.parameters()]
    model, trainer = fit(model)
    assert model.env_steps == 512 and trainer.global_step == 4 * 4 * 4  # 4 rollouts of 4 epochs x 4 minibatches
    assert all(not torch.equal(b, p) for b, p in zip(before, model.q_net.parameters(), strict=True))
    assert float(model.epsilon) == pytest.approx(0.05)  # decayed over half the budget: done by the last rollout
    assert np.isfinite(float(trainer.callback_metrics["val/episode_return"]))


def test_checkpoint_restores_the_q_network_and_the_policy_exports_greedy(tmp_path):
    from rl_lightning.callbacks import LastCheckpoint

    model = tiny_pqn(EnvConfig("MinAtar/Breakout-v1", num_envs=4, seed=0))
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    restored = PQN.load_from_checkpoint(tmp_path / "last.ckpt")
    assert restored.env_steps == model.env_steps == 512
    frames = torch.rand(8, 10, 10, 4) < 0.3
    torch.testing.assert_close(restored.q_net(frames), model.q_net(frames))
    program = model.export_policy()
    assert torch.equal(program.module()(frames), model.q_net(frames).argmax(-1))
