"""Network shapes that the algorithms rely on: the image actor-critic (PPO/A2C on Atari)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import PPO
from rl_lightning.errors import ConfigError
from rl_lightning.networks import ActorCritic, NatureCNN
from tests.helpers import build

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def test_image_actor_critic_shares_one_orthogonal_nature_cnn():
    agent = ActorCritic(FRAMES, gym.spaces.Discrete(6))
    assert isinstance(agent.encoder, NatureCNN)
    # Orthogonal with gain sqrt(2): the rows of the flattened first conv are orthogonal (32 rows <= 256 cols).
    w = agent.encoder.cnn[0].weight.flatten(1)
    assert torch.allclose(w @ w.T, 2 * torch.eye(32), atol=1e-4)
    # Two heads on the 512 features: policy (std 0.01) and value (std 1).
    assert agent.head.linear.in_features == 512 and agent.critic[0].in_features == 512
    assert math.isclose(agent.head.linear.weight.norm(dim=1).max().item(), 0.01, rel_tol=1e-3)

    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    actions, logprobs, values = agent.act(obs)
    assert actions.shape == logprobs.shape == values.shape == (5,)
    assert agent(obs).shape == (5,) and ((0 <= actions) & (actions < 6)).all()
    # Both losses train the shared encoder.
    for loss in (agent.evaluate(obs, actions)[0].sum(), agent.value(obs).sum()):
        agent.zero_grad()
        loss.backward()
        assert agent.encoder.cnn[0].weight.grad.abs().sum() > 0


def test_image_actor_critic_without_critic_has_zero_values():
    agent = ActorCritic(FRAMES, gym.spaces.Discrete(4), critic=False)
    assert torch.equal(agent.value(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)), torch.zeros(3))


def test_normalize_obs_on_images_is_refused():
    model = build(PPO, normalize_obs=True)
    with pytest.raises(ConfigError, match="normalize_obs is for vector observations"):
        model.build_networks(FRAMES, gym.spaces.Discrete(4))
