"""RolloutCollector on a torch env: the rollout stays on the device and means what it means on a
gymnasium env (GAE, truncation bootstrapped from the final observation, episode statistics)."""

import torch

from rl_lightning.data.rollout import RolloutCollector, gae, gae_batch
from rl_lightning.envs.torch import make_torch_env


class Policy:
    """Deterministic: even sub-envs push towards the pole's lean (balance until the time limit),
    odd ones always push right (the pole falls); V(obs) = a fixed linear function."""

    w = torch.tensor([0.5, -1.0, 2.0, 0.25])

    def act(self, obs):
        lean = (obs[:, 2] > 0).long()
        actions = torch.where(torch.arange(len(obs)) % 2 == 0, lean, 1)
        return actions, torch.zeros(len(obs)), self.value(obs)

    def value(self, obs):
        return obs @ self.w + 3.0


def test_collector_on_a_torch_env_matches_a_hand_rollout():
    n, steps, gamma, lam, limit = 6, 30, 0.9, 0.8, 9
    policy = Policy()
    # Truncated (bootstrap) at 9 steps unless the pole fell (no bootstrap) first.
    envs = make_torch_env("CartPole-v1", n, max_episode_steps=limit)
    collector = RolloutCollector(envs, steps, torch.device("cpu"), 7)
    batch = gae_batch(collector.rollout(policy), gamma, lam)

    env = make_torch_env("CartPole-v1", n, max_episode_steps=limit)
    obs, _ = env.reset(seed=7)
    rows = []
    for _ in range(steps):
        actions = policy.act(obs)[0]
        next_obs, rew, term, trunc, infos = env.step(actions)
        rows.append((obs, actions, rew, term, trunc, infos["final_obs"]))
        obs = next_obs
    o, a, r, term, trunc, final = (torch.stack(x) for x in zip(*rows, strict=True))
    assert trunc.any() and term.any()
    # V of each transition's true next state: the final observation wherever the episode ended.
    values, next_values = policy.value(o), policy.value(final)
    adv, ret = gae(r, values, next_values, term, term | trunc, gamma, lam)
    torch.testing.assert_close(batch.obs, o.flatten(0, 1))
    torch.testing.assert_close(batch.actions, a.flatten(0, 1))
    torch.testing.assert_close(batch.advantages, adv.flatten(0, 1))
    torch.testing.assert_close(batch.returns, ret.flatten(0, 1))

    returns, lengths = collector.episodes.pop()
    ended = term | trunc
    assert len(lengths) == int(ended.sum()) and (lengths <= limit).all() and (returns == lengths).all()


def test_collection_never_leaves_the_device(monkeypatch):
    """No numpy conversion or host read per step: only the episode statistics go to the host, once
    per rollout, whatever its length."""
    calls = []
    for name in ("numpy", "cpu", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    policy = Policy()
    env = make_torch_env("CartPole-v1", 16, max_episode_steps=8)
    for steps in (4, 32):
        collector = RolloutCollector(env, steps, torch.device("cpu"), 0)
        calls.clear()
        gae_batch(collector.rollout(policy), 0.99, 0.95)
        assert sorted(calls) == ["cpu", "numpy"]  # episode returns, lengths and sub-envs: one copy
    assert isinstance(collector.rewards, torch.Tensor) and isinstance(collector.truncated, torch.Tensor)


def test_continuous_actions_are_clipped_for_the_env_and_kept_for_the_buffer():
    class Wild:
        def act(self, obs):
            return torch.full((len(obs), 1), 5.0), torch.zeros(len(obs)), torch.zeros(len(obs))

        def value(self, obs):
            return torch.zeros(len(obs))

    env = make_torch_env("MountainCarContinuous-v0", 4)
    collector = RolloutCollector(env, 3, torch.device("cpu"), 0)
    batch = gae_batch(collector.rollout(Wild()), 0.99, 0.95)
    assert (batch.actions == 5.0).all()
    # The env gets the clipped action: gymnasium's penalty 0.1 * a^2 of a = 1, not of 5.
    torch.testing.assert_close(collector.rewards, torch.full((3, 4), -0.1))
