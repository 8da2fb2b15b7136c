"""C51 and QR-DQN: the projected categorical target and the quantile Huber loss against hand-computed
values, the distributional Q-network, and both algorithms through DQN's options."""

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import C51, DQN, QRDQN, EnvConfig
from rl_lightning.algorithms.c51 import categorical_loss, categorical_projection
from rl_lightning.algorithms.qrdqn import quantile_huber_loss
from rl_lightning.errors import ConfigError
from rl_lightning.networks.q_networks import QNetwork
from tests.helpers import build, quick_trainer

SUPPORT = torch.tensor([-1.0, 0.0, 1.0])  # 3 atoms, 1 apart
NEXT_PROBS = torch.tensor([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    "reward, discount, terminated, want",
    [
        # shifted atoms -0.5, 0.5, 1.5 -> clipped to 1: halves to the neighbours, the last all on z=1
        (0.5, 1.0, 0.0, [0.1, 0.25, 0.65]),
        # discounted: -0.5, 0, 0.5; the middle atom falls exactly on z=0 and keeps all its mass
        (0.0, 0.5, 0.0, [0.1, 0.65, 0.25]),
        # terminal: all mass at r = -0.25, split 1/4 : 3/4 between z=-1 and z=0
        (-0.25, 0.99, 1.0, [0.25, 0.75, 0.0]),
        # far below v_min: everything clipped onto the lowest atom
        (-5.0, 0.5, 0.0, [1.0, 0.0, 0.0]),
        # terminal above v_max: everything on the highest atom
        (2.0, 0.99, 1.0, [0.0, 0.0, 1.0]),
    ],
)
def test_categorical_projection_by_hand(reward, discount, terminated, want):
    got = categorical_projection(
        NEXT_PROBS[None], SUPPORT, torch.tensor([reward]), torch.tensor([discount]), torch.tensor([terminated])
    )
    torch.testing.assert_close(got, torch.tensor([want]))
    assert got.sum().item() == pytest.approx(1.0)


def test_categorical_projection_keeps_mass_and_mean_inside_the_support():
    torch.manual_seed(0)
    support = torch.linspace(-10, 10, 51)
    probs = torch.rand(64, 51).softmax(-1)
    rewards, discounts = torch.rand(64) * 2 - 1, torch.full((64,), 0.9)
    got = categorical_projection(probs, support, rewards, discounts, torch.zeros(64))
    torch.testing.assert_close(got.sum(-1), torch.ones(64))
    # No clipping happens here (|r + 0.9 z| <= 10), so the projection keeps the mean: r + 0.9 E[z].
    torch.testing.assert_close((got * support).sum(-1), rewards + 0.9 * (probs * support).sum(-1))


def test_categorical_loss_is_the_weighted_cross_entropy():
    logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, float(np.log(2.0)), 0.0]])  # uniform; 1/4, 1/2, 1/4
    target = torch.tensor([[0.1, 0.25, 0.65], [0.0, 1.0, 0.0]])
    loss, per_sample = categorical_loss(logits, target, torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(per_sample, torch.tensor([np.log(3.0), np.log(2.0)], dtype=torch.float32))
    assert loss.item() == pytest.approx((2 * np.log(3.0) + np.log(2.0)) / 2)


def test_quantile_huber_loss_by_hand():
    # taus 1/4, 3/4; u_ij = target_j - theta_i: [[0.5, 3], [-0.5, 2]]
    # weights |tau_i - 1{u<0}|: [[1/4, 1/4], [1/4, 3/4]]; huber: [[0.125, 2.5], [0.125, 1.5]]
    # summed over i: [0.0625, 1.75]; mean over j: 0.90625
    quantiles, target = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]])
    loss, per_sample = quantile_huber_loss(quantiles, target, torch.tensor([2.0]))
    assert per_sample.tolist() == [0.90625]
    assert loss.item() == 2 * 0.90625
    # bfloat16 quantiles (an autocast network's) against float32 targets: the same loss, in float32
    q16 = quantiles.bfloat16().requires_grad_()
    loss16, _ = quantile_huber_loss(q16, target, torch.tensor([2.0]))
    loss16.backward()
    assert loss16.item() == 2 * 0.90625 and q16.grad.dtype == torch.bfloat16


def test_quantile_huber_loss_matches_sb3_contrib():
    sb3_contrib_utils = pytest.importorskip("sb3_contrib.common.utils")
    torch.manual_seed(0)
    quantiles, target = torch.randn(16, 10) * 3, torch.randn(16, 10) * 3
    loss, _ = quantile_huber_loss(quantiles, target, torch.ones(16))
    torch.testing.assert_close(loss, sb3_contrib_utils.quantile_huber_loss(quantiles, target))


def test_distributional_q_network_shapes_and_dueling_per_atom():
    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    net = QNetwork(space, gym.spaces.Discrete(3), (8,), dueling=True, atoms=5)
    out = net(torch.randn(7, 4))
    assert out.shape == (7, 3, 5)
    # Dueling: the advantages average to zero over actions, atom by atom, so the mean over actions is V.
    features = net.torso(torch.zeros(1, 4))
    torch.testing.assert_close(net(torch.zeros(1, 4)).mean(-2), net.value(features))


def tiny(cls: type, **kw):
    args = dict(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=0),
        total_env_steps=400,
        env_steps_per_epoch=200,
        eval_episodes=1,
        learning_starts=100,
        train_freq=1,
        gradient_steps=2,
        hidden_sizes=(16,),
    )
    return build(cls, **{**args, **kw})


def test_q_values_are_the_means_of_the_distributions():
    c51 = C51(n_atoms=3, v_min=-1.0, v_max=1.0)
    logits = torch.log(torch.tensor([[[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]]))
    torch.testing.assert_close(c51.q_values(logits), torch.tensor([[0.3, -0.4]]))
    quantiles = torch.tensor([[[0.0, 1.0, 5.0], [2.0, 2.0, 2.0]]])
    torch.testing.assert_close(QRDQN(n_quantiles=3).q_values(quantiles), torch.tensor([[2.0, 2.0]]))


@pytest.mark.parametrize("cls", [C51, QRDQN])
@pytest.mark.parametrize(
    "options",
    [{}, dict(double_q=True, dueling=True, n_step=3, prioritized_replay=True, noisy=True)],
    ids=["plain", "all"],
)
def test_trains_with_dqn_options(cls, options):
    L.seed_everything(0)
    model = tiny(cls, **options, **({"n_quantiles": 10} if cls is QRDQN else {}))
    trainer = quick_trainer()
    trainer.fit(model)
    assert (model.env_steps, trainer.global_step) == (400, 2 * 150)  # 150 phases of 2 env steps
    assert all(torch.isfinite(p).all() for p in model.parameters())
    out = model.q_net(torch.zeros(1, 4))
    assert out.shape == (1, 2, model.atoms)


def test_defaults_follow_their_references():
    qr = QRDQN()
    assert (qr.adam_eps, qr.epsilon, qr.end_e, qr.hparams.max_grad_norm) == (0.01 / 32, 1.0, 0.01, None)
    assert qr.atoms == 200 and qr.hparams.learning_rate == 5e-5
    assert QRDQN(noisy=True).end_e == 0.0
    assert build(QRDQN, batch_size=64).adam_eps == 0.01 / 64
    c51 = C51()
    assert (c51.atoms, c51.support[0].item(), c51.support[-1].item()) == (51, -10.0, 10.0)
    assert isinstance(c51, DQN)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: C51(n_atoms=1), "n_atoms must be >= 2"),
        (lambda: C51(v_min=1.0, v_max=1.0), "v_min must be below v_max"),
        (lambda: QRDQN(n_quantiles=1), "n_quantiles must be >= 2"),
        (lambda: QRDQN(start_e=2.0), "start_e"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


@pytest.mark.parametrize("cls", [C51, QRDQN])
def test_continuous_actions_are_refused_before_any_training(cls):
    model = tiny(cls, env=EnvConfig("Pendulum-v1", num_envs=1))
    with pytest.raises(ConfigError, match=f"{cls.__name__} cannot handle the action space Box.*use A2C, CrossQ, DDPG"):
        quick_trainer().fit(model)
    assert model.env_steps == 0
