"""REINFORCE: Monte-Carlo returns-to-go, the loss, dropping unfinished tails, a small learning run."""

import pytest
import torch

from rl_lightning import REINFORCE, EnvConfig
from rl_lightning.algorithms.reinforce import reinforce_loss
from rl_lightning.data.rollout import Rollout, episode_batch, returns_to_go
from tests.helpers import build, final_return


def hand_case():
    # T=5 steps, 3 sub-envs, gamma 0.5. next_values is 99 wherever it must be ignored.
    # env 0: terminates at t=1, is truncated at t=3 (V(final obs) = 10), t=4 is an unfinished tail.
    # env 1: no episode end: everything is an unfinished tail.
    # env 2: terminates at the last step: everything is complete.
    rewards = torch.tensor([[1.0, 1.0, 2.0], [1.0, 2.0, 2.0], [1.0, 3.0, 2.0], [1.0, 4.0, 2.0], [1.0, 5.0, 2.0]])
    next_values = torch.full((5, 3), 99.0)
    next_values[3, 0] = 10.0
    terminated = torch.zeros(5, 3, dtype=torch.bool)
    truncated = torch.zeros(5, 3, dtype=torch.bool)
    terminated[1, 0] = terminated[4, 2] = True
    truncated[3, 0] = True
    return rewards, next_values, terminated, truncated


def test_returns_to_go_matches_hand_computation_with_episode_ends():
    returns, complete = returns_to_go(*hand_case(), gamma=0.5)
    # env 0: G3 = 1 + 0.5 * 10 = 6 (bootstrapped truncation), G2 = 1 + 0.5 * 6 = 4,
    #        G1 = 1 (terminated), G0 = 1 + 0.5 * 1 = 1.5; t=4 unknown.
    torch.testing.assert_close(returns[:4, 0], torch.tensor([1.5, 1.0, 4.0, 6.0]))
    # env 2: G4 = 2, G3 = 3, G2 = 3.5, G1 = 3.75, G0 = 3.875
    torch.testing.assert_close(returns[:, 2], torch.tensor([3.875, 3.75, 3.5, 3.0, 2.0]))
    expected_complete = torch.tensor([[True, False, True]] * 4 + [[False, False, True]])
    assert torch.equal(complete, expected_complete)


def test_episode_batch_keeps_only_complete_steps_with_advantage_g_minus_v():
    rewards, next_values, terminated, truncated = hand_case()
    values = torch.arange(15.0).reshape(5, 3) / 10
    rollout = Rollout(
        obs=torch.arange(15.0).reshape(5, 3, 1),  # obs = flat index, to see which steps were kept
        actions=torch.zeros(5, 3, dtype=torch.long),
        logprobs=torch.zeros(5, 3),
        values=values,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        next_values=next_values,
    )
    batch = episode_batch(rollout, gamma=0.5)
    kept = batch.obs.squeeze(-1).long()
    assert kept.tolist() == [0, 2, 3, 5, 6, 8, 9, 11, 14]  # env 0 at t<4, env 2 always
    returns, _ = returns_to_go(rewards, next_values, terminated, truncated, 0.5)
    torch.testing.assert_close(batch.returns, returns.flatten()[kept])
    torch.testing.assert_close(batch.advantages, batch.returns - values.flatten()[kept])


def test_reinforce_loss_matches_direct_computation():
    g = torch.Generator().manual_seed(0)
    logp, w, v, ret = (torch.randn(32, generator=g) for _ in range(4))
    out = reinforce_loss(logp, w, v, ret, vf_coef=0.25)
    pg = sum(-float(w[i]) * float(logp[i]) for i in range(32)) / 32
    vl = sum((float(ret[i]) - float(v[i])) ** 2 for i in range(32)) / 32
    torch.testing.assert_close(out.policy_loss, torch.tensor(pg))
    torch.testing.assert_close(out.value_loss, torch.tensor(vl))
    torch.testing.assert_close(out.loss, torch.tensor(pg + 0.25 * vl))
    no_baseline = reinforce_loss(logp, w, None, ret, vf_coef=0.25)
    assert no_baseline.value_loss == 0 and no_baseline.loss == no_baseline.policy_loss


def test_empty_rollout_gives_a_zero_loss_that_still_backpropagates():
    logp = torch.zeros(0, requires_grad=True)
    out = reinforce_loss(logp, torch.zeros(0), None, torch.zeros(0), 0.5)
    out.loss.backward()
    assert out.loss == 0 and logp.grad is not None


def test_without_baseline_there_is_no_critic():
    model = build(REINFORCE, env=EnvConfig("CartPole-v1", num_envs=2, seed=0), total_env_steps=200, baseline=False)
    model.setup("fit")
    try:
        assert model.agent.critic is None
        assert torch.equal(model.agent.value(torch.zeros(3, 4)), torch.zeros(3))
    finally:
        model.teardown("fit")


def train_reinforce_cartpole(seed: int, total_env_steps: int, **kw) -> float:
    env = EnvConfig("CartPole-v1", num_envs=4)
    return final_return(REINFORCE, seed, env=env, total_env_steps=total_env_steps, **kw)


def test_reinforce_cartpole_beats_random_on_a_small_budget():
    # A random policy averages about 22 (configs/reinforce/cartpole.yaml = defaults + 4 envs; the
    # learning rate is not annealed here: over so short a budget annealing would slow it down).
    assert train_reinforce_cartpole(seed=0, total_env_steps=30_000, anneal_lr=False) > 100


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reinforce_cartpole_reaches_400_within_500k_steps(seed):
    assert train_reinforce_cartpole(seed, 500_000) >= 400
