"""NoisyNet layers (factorized Gaussian noise) and DQN's ``noisy`` option: the noise's statistics and
rank-one structure, when it changes, deterministic eval mode, epsilon 0 by default."""

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rl_lightning import DQN, EnvConfig
from rl_lightning.networks.noisy import NoisyLinear, make_noisy, reset_noise
from rl_lightning.networks.q_networks import QNetwork
from tests.helpers import build, quick_trainer


def test_initialization_follows_the_paper():
    layer = NoisyLinear(16, 4, sigma0=0.5)
    assert layer.weight_mu.abs().max() <= 1 / 4 and layer.bias_mu.abs().max() <= 1 / 4
    assert torch.all(layer.weight_sigma == 0.5 / 4) and torch.all(layer.bias_sigma == 0.5 / 4)


def test_noise_is_f_of_standard_normals_with_mean_zero():
    torch.manual_seed(0)
    layer = NoisyLinear(200_000, 1)
    eps = layer.epsilon_in
    # f(x) = sign(x) sqrt(|x|) of x ~ N(0, 1): mean 0, E[f^2] = E|x| = sqrt(2 / pi).
    assert abs(eps.mean().item()) < 0.01
    assert eps.pow(2).mean().item() == pytest.approx(np.sqrt(2 / np.pi), abs=0.01)


def test_weight_noise_is_the_outer_product_of_two_vectors():
    torch.manual_seed(0)
    layer = NoisyLinear(6, 5)
    with torch.no_grad():
        layer.weight_sigma.fill_(1.0)
        layer.bias_sigma.fill_(0.0)
    eye = torch.eye(6)
    noise = layer(eye) - F.linear(eye, layer.weight_mu, layer.bias_mu)  # row k: the noise of input k's weights
    assert torch.linalg.matrix_rank(noise).item() == 1
    torch.testing.assert_close(noise, torch.outer(layer.epsilon_in, layer.epsilon_out))


def test_reset_changes_the_noise_and_nothing_else_does():
    torch.manual_seed(0)
    layer = NoisyLinear(3, 2)
    x = torch.randn(4, 3)
    first = layer(x)
    torch.testing.assert_close(layer(x), first, rtol=0, atol=0)  # same noise until reset
    layer.reset_noise()
    assert not torch.allclose(layer(x), first)


def test_eval_mode_uses_the_mean_weights():
    torch.manual_seed(0)
    layer = NoisyLinear(3, 2).eval()
    x = torch.randn(4, 3)
    first = layer(x)
    layer.reset_noise()
    torch.testing.assert_close(layer(x), first, rtol=0, atol=0)
    torch.testing.assert_close(first, F.linear(x, layer.weight_mu, layer.bias_mu))


def test_make_noisy_replaces_every_linear_layer_of_a_q_network():
    space, actions = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3)
    net = QNetwork(space, actions, (8, 8), dueling=True, noisy=True)
    assert not any(isinstance(m, nn.Linear) for m in net.modules())
    assert sum(isinstance(m, NoisyLinear) for m in net.modules()) == 4  # 2 hidden, advantage, value
    images = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cnn = QNetwork(images, actions, noisy=True)
    assert sum(isinstance(m, NoisyLinear) for m in cnn.modules()) == 2  # the 512-unit layer and the head
    plain = make_noisy(nn.Sequential(nn.Conv2d(1, 1, 1), nn.Sequential(nn.Linear(2, 2))))
    assert isinstance(plain[0], nn.Conv2d) and isinstance(plain[1][0], NoisyLinear)
    before = [b.clone() for b in net.buffers()]
    reset_noise(net)
    assert all(not torch.equal(a, b) for a, b in zip(before, net.buffers(), strict=True))


def test_noisy_dqn_explores_by_noise_not_epsilon():
    assert DQN(noisy=True).epsilon == 0.0 and DQN(noisy=True).end_e == 0.0
    assert DQN(noisy=True, start_e=0.5).epsilon == 0.5  # given: kept
    assert (DQN().start_e, DQN().end_e) == (1.0, 0.05)


def test_noisy_dqn_draws_new_noise_each_collection_step_and_update():
    L.seed_everything(0)
    model = build(
        DQN,
        env=EnvConfig("CartPole-v1", num_envs=1, seed=0),
        total_env_steps=120,
        env_steps_per_epoch=120,
        eval_episodes=1,
        learning_starts=100,
        train_freq=4,
        gradient_steps=3,
        hidden_sizes=(8,),
        noisy=True,
    )
    draws = {"online": 0, "target": 0}
    trainer = quick_trainer()
    model.setup("fit")  # networks built; count each network's calls to reset_noise from here
    for name, net in (("online", model.q_net), ("target", model.q_target)):
        original = net.reset_noise

        def counting(name=name, original=original):
            draws[name] += 1
            original()

        net.reset_noise = counting
    model.setup = lambda stage: None
    trainer.fit(model)
    # 5 phases of 4 vector steps (the warm-up acts at random), each followed by 3 updates.
    assert draws == {"online": 5 * 4 + 5 * 3, "target": 5 * 3}
    assert model.epsilon == 0.0
