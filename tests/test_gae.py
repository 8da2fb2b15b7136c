import pytest
import torch

from rl_lightning.data.rollout import gae


def test_gae_matches_hand_computation_with_termination_and_truncation():
    # One env, 4 steps. Step 1 terminates (no bootstrap), step 2 is the first step of a new episode
    # that is truncated at step 2 (bootstrap from V(final obs) = 10), step 3 continues normally.
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    values = torch.tensor([[0.5], [1.5], [2.5], [3.5]])
    next_values = torch.tensor([[1.5], [99.0], [10.0], [6.0]])  # 99 must be ignored: terminated
    terminated = torch.tensor([[False], [True], [False], [False]])
    truncated = torch.tensor([[False], [False], [True], [False]])
    adv, ret = gae(rewards, values, next_values, terminated, terminated | truncated, gamma, lam)

    d3 = 4.0 + 0.9 * 6.0 - 3.5  # 5.9
    d2 = 3.0 + 0.9 * 10.0 - 2.5  # 9.5, bootstrapped from the final obs
    d1 = 2.0 + 0.0 - 1.5  # 0.5, terminated
    d0 = 1.0 + 0.9 * 1.5 - 0.5  # 1.85
    a3 = d3
    a2 = d2  # trace cut: step 3 belongs to a new episode
    a1 = d1  # trace cut
    a0 = d0 + gamma * lam * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_gae_lambda_one_gives_discounted_returns_minus_values():
    rewards = torch.ones(5, 2)
    values = torch.zeros(5, 2)
    next_values = torch.zeros(5, 2)
    done = torch.zeros(5, 2, dtype=torch.bool)
    done[-1] = True
    adv, _ = gae(rewards, values, next_values, done, done, 0.5, 1.0)
    # sum_k 0.5^k over the steps left in the episode
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.9375, 1.875, 1.75, 1.5, 1.0]))
    assert adv[0, 1].item() == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)
