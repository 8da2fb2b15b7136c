"""SAC: the tanh-Gaussian log-probability, the losses (pure functions), alpha tuning, the twin critics,
action bounds, checkpoints, bad input, and learning on Pendulum."""

import math
import time

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning import SAC, EnvConfig
from rl_lightning.algorithms.sac import alpha_loss, sac_actor_loss, soft_q_target
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.errors import ConfigError
from rl_lightning.networks.continuous import QEnsemble, q_loss, tanh_gaussian_sample, to_env_units
from rl_lightning.networks.utils import polyak_update
from tests.helpers import RecordingBox, build, quick_trainer, tiny_sac


# ------------------------------------------------------------------------------- tanh-Gaussian
def test_tanh_gaussian_log_prob_matches_the_change_of_variables():
    torch.manual_seed(0)
    mean, log_std = torch.randn(1000, 3) * 2, torch.randn(1000, 3).clamp(-3, 1)
    eps = torch.randn(1000, 3)
    actions, logp = tanh_gaussian_sample(mean, log_std, eps)
    # torch.distributions: Normal pushed through tanh, log|d tanh/du| = log(1 - tanh(u)^2).
    u = mean + log_std.exp() * eps
    reference = torch.distributions.Normal(mean.double(), log_std.exp().double()).log_prob(u.double())
    reference = (reference - torch.log1p(-torch.tanh(u.double()).pow(2))).sum(-1)
    finite = torch.isfinite(reference)  # float64 1 - tanh^2 underflows for |u| > ~19
    assert finite.float().mean() > 0.99
    torch.testing.assert_close(logp.double()[finite], reference[finite], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(actions, torch.tanh(u))


def test_tanh_gaussian_density_matches_a_monte_carlo_histogram():
    # 1-D: the density exp(log pi(a)) must match the histogram of a million samples.
    torch.manual_seed(0)
    mean, log_std = torch.tensor([[0.7]]), torch.tensor([[math.log(0.9)]])
    eps = torch.randn(1_000_000, 1)
    actions, _ = tanh_gaussian_sample(mean.expand(-1, 1), log_std, eps)
    counts, edges = np.histogram(actions.numpy().ravel(), bins=40, range=(-0.95, 0.95))
    empirical = counts / (len(eps) * (edges[1] - edges[0]))
    centres = torch.tensor((edges[:-1] + edges[1:]) / 2, dtype=torch.float32).unsqueeze(-1)
    u = torch.atanh(centres)
    _, logp = tanh_gaussian_sample(mean, log_std, (u - mean) / log_std.exp())  # eps that yields a = centre
    np.testing.assert_allclose(empirical, logp.exp().numpy(), rtol=0.05, atol=0.01)


def test_tanh_gaussian_log_prob_stays_finite_when_tanh_saturates():
    mean = torch.tensor([[20.0, -30.0]], requires_grad=True)
    actions, logp = tanh_gaussian_sample(mean, torch.zeros(1, 2), torch.zeros(1, 2))
    assert torch.equal(actions.abs(), torch.ones(1, 2))  # tanh rounds to +-1 in float32
    # log(1 - tanh(u)^2) = 2 (log 2 - |u| - softplus(-2|u|)) ~ 2 log 2 - 2|u| for large |u|
    expected = -math.log(2 * math.pi) - (4 * math.log(2) - 2 * 50.0)
    assert logp.item() == pytest.approx(expected, rel=1e-5)
    logp.sum().backward()
    assert torch.isfinite(mean.grad).all()


# ------------------------------------------------------------------------------------- losses
def test_soft_q_target_hand_computed():
    rewards, discounts, terminated = torch.tensor([1.0, -2.0]), torch.tensor([0.99, 0.99]), torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[3.0, 5.0], [4.0, 1.0]])  # [n critics, B]: min = [3, 1]
    next_logp, alpha = torch.tensor([-0.5, 2.0]), torch.tensor(0.2)
    y = soft_q_target(rewards, discounts, terminated, next_q, next_logp, alpha)
    # 1 + 0.99 * (3 - 0.2 * -0.5); terminated: just the reward
    torch.testing.assert_close(y, torch.tensor([1 + 0.99 * 3.1, -2.0]))


def test_actor_critic_and_alpha_losses_hand_computed():
    q_pi = torch.tensor([[1.0, 4.0], [2.0, 3.0]])  # min over critics: [1, 3]
    logp, alpha = torch.tensor([0.5, -1.0]), torch.tensor(0.1)
    torch.testing.assert_close(sac_actor_loss(q_pi, logp, alpha), torch.tensor(((0.05 - 1) + (-0.1 - 3)) / 2))
    q, target = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([2.0, 0.0])
    torch.testing.assert_close(q_loss(q, target), torch.tensor((1 + 4) / 2 + (4 + 0) / 2))
    log_alpha = torch.tensor(math.log(0.5))
    # -mean(log alpha * (logp + target_entropy)) with target -1: -(log 0.5) * ((-0.5) + (-2)) / 2
    torch.testing.assert_close(alpha_loss(log_alpha, logp, -1.0), torch.tensor(math.log(0.5) * 2.5 / 2))


@pytest.mark.parametrize(("entropy", "direction"), [(-3.0, 1.0), (3.0, -1.0)], ids=["too-certain", "too-random"])
def test_alpha_tuning_moves_alpha_towards_the_target_entropy(entropy, direction):
    # Entropy -log pi below the target (-1) -> raise alpha (more exploration); above -> lower it.
    log_alpha = nn.Parameter(torch.tensor(0.0))
    opt = torch.optim.Adam([log_alpha], lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        alpha_loss(log_alpha, torch.full((8,), -entropy), target_entropy=-1.0).backward()
        opt.step()
    assert np.sign(log_alpha.item()) == direction


def test_alpha_rises_during_training_when_the_policy_is_less_random_than_the_target():
    # A target entropy far above what a squashed Gaussian reaches: tuning must raise alpha.
    model = tiny_sac(target_entropy=5.0, learning_rate=0.01)
    quick_trainer().fit(model)
    assert model.log_alpha.exp().item() > 1.0
    fixed = tiny_sac(ent_coef=0.3)
    quick_trainer().fit(fixed)
    assert fixed.log_alpha.exp().item() == pytest.approx(0.3) and len(fixed.trainer.optimizers) == 2


# ------------------------------------------------------------------------------------ critics
def test_critics_are_independent_and_first_selects_q1():
    torch.manual_seed(0)
    ens = QEnsemble(3, 2, (8, 5), n=2)
    obs, actions = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1
    q = ens(obs, actions)
    assert q.shape == (2, 6) and not torch.equal(q[0], q[1])  # independently initialized
    torch.testing.assert_close(ens(obs, actions, first=1), q[:1])
    # nn.Linear's default initialization (SB3, CleanRL): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert ens.layers[0].weight.abs().max() <= 1 / math.sqrt(5)


def test_polyak_update_moves_targets_by_tau():
    online, target = QEnsemble(2, 1, (4,)), QEnsemble(2, 1, (4,))
    before = [p.clone() for p in target.parameters()]
    polyak_update(online, target, 0.005)
    for t, b, o in zip(target.parameters(), before, online.parameters(), strict=True):
        torch.testing.assert_close(t, 0.995 * b + 0.005 * o)
    polyak_update(online, target, 1.0)  # a hard copy
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters(), strict=True))


def test_bf16_mixed_precision_trains_with_float32_q_values_and_log_probs():
    model = tiny_sac()
    quick_trainer(precision="bf16-mixed").fit(model)
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
    obs, actions = torch.randn(4, 3), torch.rand(4, 1) * 2 - 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, (a, logp) = model.critic(obs, actions), model.actor.sample(obs)
        hidden = model.actor.trunk(obs)
    assert hidden.dtype == torch.bfloat16 and q.dtype == a.dtype == logp.dtype == torch.float32
    torch.testing.assert_close(q, model.critic(obs, actions), atol=0.05, rtol=0.02)


# ------------------------------------------------------------------------------------- bounds
def test_actions_sent_to_the_env_are_always_within_its_asymmetric_bounds():
    RecordingBox.received.clear()
    model = tiny_sac(env=EnvConfig("test/RecordingBox-v0", num_envs=2, seed=0), learning_rate=0.05)
    quick_trainer().fit(model)
    sent = np.stack(RecordingBox.received)  # training (warm-up and policy) and evaluation actions
    low, high = RecordingBox.action_space.low, RecordingBox.action_space.high
    assert len(sent) > 300 and (sent >= low).all() and (sent <= high).all()
    # the whole range is used: the warm-up is uniform over the bounds, not over [-1, 1]
    assert (sent.min(0) < low + 0.1 * (high - low)).all() and (sent.max(0) > high - 0.1 * (high - low)).all()
    # forward maps [-1, 1] onto the bounds, even for extreme network outputs
    with torch.no_grad():
        for p in model.actor.mean.parameters():
            p.mul_(1e4)
        acts = torch.cat([model(torch.randn(256, 3) * 10, deterministic=d) for d in (True, False)])
    assert (acts >= torch.from_numpy(low)).all() and (acts <= torch.from_numpy(high)).all()
    torch.testing.assert_close(
        to_env_units(torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]]), torch.tensor(low), torch.tensor(high)),
        torch.tensor([[-2.0, 0.0], [3.0, 0.5], [0.5, 0.25]]),
    )


# ------------------------------------------------------------------------------ checkpoints
def test_checkpoint_round_trips_networks_alpha_counter_and_replay_buffer(tmp_path):
    L.seed_everything(0)
    model = tiny_sac(save_replay_buffer=True)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=True)  # tensors and plain containers only
    assert ckpt["rl_lightning"]["num_updates"] == model.num_updates > 0
    assert "replay_buffer" in ckpt["rl_lightning"] and "log_alpha" in ckpt["state_dict"]
    loaded = SAC.load_from_checkpoint(tmp_path / "last.ckpt")
    for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=k)
    assert loaded.num_updates == model.num_updates and loaded.log_alpha.item() != 0.0
    obs = torch.randn(5, 3)
    torch.testing.assert_close(model(obs), loaded(obs))
    # resuming continues with the saved buffer (no new warm-up) and the counter
    resumed = tiny_sac(save_replay_buffer=True, total_env_steps=450)
    trainer = quick_trainer()
    trainer.fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.replay.buffer.num_adds > model.replay.buffer.num_adds and resumed.num_updates > model.num_updates
    assert resumed.env_steps == model.env_steps + 152  # one epoch of 19 phases x 4 steps x 2 envs


def test_replay_buffer_is_left_out_of_checkpoints_by_default(tmp_path):
    model = tiny_sac(total_env_steps=150)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    assert "replay_buffer" not in torch.load(tmp_path / "last.ckpt", weights_only=True)["rl_lightning"]


# ---------------------------------------------------------------------------------- bad input
def test_discrete_actions_fail_at_once_naming_the_space():
    model = tiny_sac(env=EnvConfig("CartPole-v1", num_envs=1, seed=0))
    with pytest.raises(ConfigError, match=r"SAC cannot handle the action space Discrete\(2\) of 'CartPole-v1'"):
        quick_trainer().fit(model)
    assert model.env_steps == 0


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(batch_size=64, buffer_size=32), "replay.buffer_size=32 must be >= replay.batch_size=64"),
        (dict(tau=0.0), r"tau must be in \(0, 1\], got 0.0"),
        (dict(tau=1.5), r"tau must be in \(0, 1\], got 1.5"),
        (dict(learning_starts=1000), r"replay.learning_starts must be in \[0, total_env_steps=300\], got 1000"),
        (dict(ent_coef=-0.1), "ent_coef must be 'auto' or a number > 0, got -0.1"),
        (dict(gradient_steps=0), "gradient_steps must be >= 1, got 0"),
        (dict(activation="sigmoidd"), "activation must be 'tanh', 'relu', 'elu' or 'silu', got 'sigmoidd'"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        tiny_sac(**kw)


# ----------------------------------------------------------------------------------- learning
def sac_pendulum(seed: int, total: int, **kw) -> SAC:
    """configs/sac/pendulum.yaml (zoo: learning_rate 1e-3, SB3 defaults otherwise)."""
    args = dict(
        env=EnvConfig("Pendulum-v1", num_envs=1, seed=seed),
        total_env_steps=total,
        learning_rate=1e-3,
        env_steps_per_epoch=total // 2,
        eval_episodes=20,
    )
    args.update(kw)
    return build(SAC, **args)


def test_sac_learns_pendulum_quickly():
    # Random play scores about -1200. Small networks keep this under a minute (seed 0: -158), and 10 phases per
    # training step (the config's) the Lightning loop's share small: the same transitions and updates as one.
    L.seed_everything(0)
    model = sac_pendulum(0, 4000, hidden_sizes=(64, 64), env_steps_per_epoch=4000, phases_per_step=10)
    trainer = quick_trainer()
    trainer.fit(model)
    assert trainer.callback_metrics["val/episode_return"] > -600


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_pendulum_acceptance(seed):
    # Acceptance: eval mean return >= -200 over 20 deterministic episodes within 20k env steps.
    L.seed_everything(seed)
    model = sac_pendulum(seed, 20_000, env_steps_per_epoch=2000)
    trainer = quick_trainer()
    start = time.perf_counter()
    trainer.fit(model)
    ret = float(trainer.callback_metrics["val/episode_return"])
    print(f"SAC Pendulum seed {seed}: eval return {ret:.1f} at 20k env steps, {time.perf_counter() - start:.0f} s")
    assert ret >= -200
