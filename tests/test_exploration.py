"""Exploration: the action noise processes of TD3 and DDPG (their statistics, their reset where an
episode ends, per sub-env, and their state in checkpoints) and gSDE for SAC and PPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DDPG, PPO, SAC, TD3, EnvConfig, ReplayConfig, RunConfig
from rl_lightning.errors import ConfigError
from rl_lightning.exploration import OrnsteinUhlenbeckNoise, PinkNoise, pink_sequences
from rl_lightning.networks.continuous import GSDEActor
from rl_lightning.networks.policies import GSDEHead
from tests.helpers import build, quick_trainer, tiny_sac


def test_ornstein_uhlenbeck_noise_is_correlated_with_the_stationary_std():
    torch.manual_seed(0)
    noise = OrnsteinUhlenbeckNoise(num_envs=2000, action_dim=1, sigma=0.5)
    xs = torch.stack([noise() for _ in range(3000)])[1000:, :, 0]  # past the transient
    assert xs.std().item() == pytest.approx(0.5 / math.sqrt(2 * 0.15), rel=0.05)
    lag1 = torch.corrcoef(torch.stack([xs[:-1].flatten(), xs[1:].flatten()]))[0, 1]
    assert lag1 > 0.99  # drifts: exp(-theta dt) = 0.9985 per step


def test_ornstein_uhlenbeck_noise_restarts_only_the_ended_sub_envs():
    noise = OrnsteinUhlenbeckNoise(num_envs=3, action_dim=2, sigma=1.0)
    for _ in range(10):
        noise()
    noise.reset(np.array([True, False, True]))
    assert (noise.state[[0, 2]] == 0).all() and (noise.state[1] != 0).all()


def test_pink_noise_has_unit_variance_and_a_one_over_f_spectrum():
    torch.manual_seed(0)
    x = pink_sequences((2000,), 1000)
    assert x.std().item() == pytest.approx(1.0, abs=0.03)
    power = torch.fft.rfft(x).abs().pow(2).mean(0)[1:200]
    freqs = torch.fft.rfftfreq(1000)[1:200]
    slope = np.polyfit(np.log(freqs.numpy()), np.log(power.numpy()), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.05)


def test_pink_noise_steps_through_its_sequences_and_redraws_ended_or_exhausted_ones():
    noise = PinkNoise(num_envs=2, action_dim=1, sigma=2.0, seq_len=5)
    first = noise.sequences.clone()
    assert torch.equal(noise(), first[:, :, 0] * 2.0) and noise.step.tolist() == [1, 1]
    noise.reset(np.array([False, True]))
    assert torch.equal(noise.sequences[0], first[0]) and not torch.equal(noise.sequences[1], first[1])
    assert noise.step.tolist() == [1, 0]
    for _ in range(5):
        noise()
    assert noise.step.tolist() == [1, 5]  # sub-env 0 ran out at its 6th step and started a new sequence


def td3(noise_type: str, cls=TD3, total: int = 300):
    return cls(
        env=EnvConfig("Pendulum-v1", num_envs=2, seed=0, env_kwargs={"max_episode_steps": 50}),
        run=RunConfig(total_env_steps=total, env_steps_per_epoch=150, eval_episodes=1),
        replay=ReplayConfig(buffer_size=1000, batch_size=16, learning_starts=100),
        hidden_sizes=(16,),
        exploration_noise=0.5,
        noise_type=noise_type,
    )


@pytest.mark.parametrize("noise_type", ["ornstein_uhlenbeck", "pink"])
@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_stateful_noise_drives_collection(cls, noise_type):
    model = td3(noise_type, cls, total=280)  # 140 vector steps: 40 past the last episode end (a reset)
    quick_trainer().fit(model)
    expected = OrnsteinUhlenbeckNoise if noise_type == "ornstein_uhlenbeck" else PinkNoise
    assert isinstance(model.noise, expected)
    used = model.noise.state.abs().sum() > 0 if noise_type == "ornstein_uhlenbeck" else model.noise.step.sum() > 0
    assert used


class CountingTD3(TD3):
    def build_experience(self):
        replay = super().build_experience()
        self.ends = []
        reset = self.noise.reset
        replay.on_episode_end = lambda ended: (self.ends.append(ended.copy()), reset(ended))
        return replay


def test_collection_resets_the_noise_of_the_sub_envs_whose_episode_ended():
    model = CountingTD3(
        env=EnvConfig("Pendulum-v1", num_envs=2, seed=0, env_kwargs={"max_episode_steps": 50}),
        run=RunConfig(total_env_steps=300, env_steps_per_epoch=300, eval_episodes=1),
        replay=ReplayConfig(buffer_size=1000, batch_size=16, learning_starts=100),
        hidden_sizes=(16,),
        noise_type="ornstein_uhlenbeck",
    )
    quick_trainer().fit(model)
    # 150 vector steps of two sub-envs with 50-step episodes: both end together, three times
    assert [e.tolist() for e in model.ends] == [[True, True]] * 3


def test_noise_state_is_saved_and_restored_with_checkpoints(tmp_path):
    model = td3("ornstein_uhlenbeck", total=280)  # not at an episode end, where the state is reset
    quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True).fit(model)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]["noise.state"]
    assert torch.equal(saved, model.noise.state) and saved.abs().sum() > 0
    restored = TD3.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=True)
    assert torch.equal(restored.noise.state, saved)


def test_gsde_noise_is_a_function_of_the_state_until_it_is_redrawn():
    torch.manual_seed(0)
    actor = GSDEActor(obs_dim=3, act_dim=2, hidden_sizes=(8,), log_std_init=0.0)
    obs = torch.randn(5, 3)
    a1, _ = actor.sample(obs)
    a2, _ = actor.sample(obs)
    assert torch.equal(a1, a2)  # same matrix, same states: same actions (i.i.d. noise would differ)
    assert not torch.allclose(a1, actor.mode(obs))
    actor.reset_noise()
    assert not torch.allclose(actor.sample(obs)[0], a1)
    actor.reset_noise(5)  # one matrix per row (sub-env)
    w = actor.head.log_std.exp() * actor.head.eps
    mean, _, features = actor(obs)
    expected = torch.tanh(mean + torch.stack([features[i] @ w[i] for i in range(5)]))
    assert torch.allclose(actor.sample(obs)[0], expected, atol=1e-6)


def test_gsde_log_prob_is_the_squashed_gaussian_with_the_state_dependent_std():
    torch.manual_seed(0)
    actor = GSDEActor(obs_dim=3, act_dim=2, hidden_sizes=(8,), log_std_init=-1.0)
    obs = torch.randn(4, 3)
    actions, log_prob = actor.sample(obs)
    mean, log_std, _ = actor(obs)
    std = log_std.exp()
    u = torch.atanh(actions.double()).float()
    expected = torch.distributions.Normal(mean, std).log_prob(u).sum(-1) - torch.log(1 - actions.pow(2)).sum(-1)
    assert torch.allclose(log_prob, expected, atol=1e-3)
    log_prob.sum().backward()  # the exploration scale is learned through the reparameterized matrix
    assert actor.head.log_std.grad is not None and actor.head.log_std.grad.abs().sum() > 0


def test_sac_gsde_learns_its_features_through_the_std_and_the_noise():
    # SB3's SAC (and sb3-contrib's TQC, CrossQ) build gSDE with learn_features=True: the state-dependent
    # std and the noise pass gradients into the actor's trunk. With the mean's path cut off, only they
    # reach it.
    torch.manual_seed(0)
    actor = GSDEActor(obs_dim=3, act_dim=2, hidden_sizes=(8,), log_std_init=-1.0)
    actor.head.linear.requires_grad_(False)
    obs = torch.randn(4, 3)
    _, log_std, _ = actor(obs)
    first_layer = next(actor.trunk.parameters())
    (grad_of_std,) = torch.autograd.grad(log_std.sum(), first_layer)
    assert grad_of_std.abs().sum() > 0
    actions, _ = actor.sample(obs)
    (grad_of_noise,) = torch.autograd.grad(actions.sum(), first_layer)
    assert grad_of_noise.abs().sum() > 0


def test_sac_gsde_actor_matches_sb3s_in_actions_stds_and_their_gradients():
    sb3 = pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3)")
    torch.manual_seed(0)
    reference = sb3.SAC(
        "MlpPolicy", "Pendulum-v1", use_sde=True, policy_kwargs={"net_arch": [8, 8], "log_std_init": -1.0}
    ).actor
    actor = GSDEActor(obs_dim=3, act_dim=1, hidden_sizes=(8, 8), log_std_init=-1.0)
    names = ["trunk.0.weight", "trunk.0.bias", "trunk.2.weight", "trunk.2.bias", "head.linear.weight"]
    ref = reference.state_dict()
    ref_names = ["latent_pi.0.weight", "latent_pi.0.bias", "latent_pi.2.weight", "latent_pi.2.bias", "mu.0.weight"]
    state = {name: ref[ref_name] for name, ref_name in zip(names, ref_names, strict=True)}
    actor.load_state_dict({**state, "head.linear.bias": ref["mu.0.bias"], "head.log_std": ref["log_std"]})
    obs = torch.randn(5, 3)
    actor.reset_noise()
    reference.action_dist.exploration_mat = (actor.head.log_std.exp() * actor.head.eps[0]).detach()

    mean, log_std, latent = reference.get_action_dist_params(obs)
    dist = reference.action_dist.proba_distribution(mean, log_std, **latent)
    ref_out = dist.sample().sum() + dist.distribution.stddev.sum()
    actions, _ = actor.sample(obs)
    out = actions.sum() + actor(obs)[1].exp().sum()
    assert torch.allclose(out, ref_out, atol=1e-5)
    (grad,) = torch.autograd.grad(out, actor.trunk[0].weight)
    (ref_grad,) = torch.autograd.grad(ref_out, reference.latent_pi[0].weight)
    assert torch.allclose(grad, ref_grad, atol=1e-5)  # detached features miss the std's and the noise's part


def test_ppo_gsde_head_keeps_its_features_detached():
    # SB3's PPO builds gSDE with learn_features=False: the std is a function of the features, not of
    # what made them.
    head = GSDEHead(in_dim=4, action_dim=2, log_std_init=-1.0, orthogonal=False)
    features = torch.randn(5, 4, requires_grad=True)
    _, log_std, _ = head(features)
    assert not log_std.requires_grad or torch.autograd.grad(log_std.sum(), features, allow_unused=True)[0] is None


def test_sac_with_gsde_trains_and_restores_from_a_checkpoint(tmp_path):
    model = tiny_sac(use_sde=True, log_std_init=-2.0, sde_sample_freq=8)
    quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True).fit(model)
    assert isinstance(model.actor, GSDEActor) and model.sde_steps == 100  # 150 vector steps, 50 of them random
    log_std = model.actor.head.log_std
    assert not torch.allclose(log_std, torch.full_like(log_std, -2.0))  # learned
    restored = SAC.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=True)
    assert torch.equal(restored.actor.head.log_std, log_std)


def test_sac_refuses_a_bad_sde_sample_freq():
    with pytest.raises(ConfigError, match="sde_sample_freq"):
        tiny_sac(use_sde=True, sde_sample_freq=0)


def test_ppo_gsde_head_noise_per_sub_env_and_its_gaussian():
    torch.manual_seed(0)
    head = GSDEHead(in_dim=4, action_dim=2, log_std_init=-1.0, orthogonal=False)
    head.reset_noise(3)  # three sub-envs
    h = torch.randn(3, 4)
    params = head(h)
    a1, a2 = head.sample(params), head.sample(params)
    assert torch.equal(a1, a2)  # the same matrices until the next rollout
    w = head.log_std.exp() * head.eps
    assert torch.allclose(a1, params[0] + torch.stack([h[i] @ w[i] for i in range(3)]), atol=1e-6)
    std = (h.pow(2) @ head.log_std.exp().pow(2) + 1e-6).sqrt()
    expected = torch.distributions.Normal(params[0], std)
    assert torch.allclose(head.log_prob(params, a1), expected.log_prob(a1).sum(-1), atol=1e-5)
    assert torch.allclose(head.entropy(params), expected.entropy().sum(-1), atol=1e-5)


def test_ppo_gsde_head_redraws_every_sample_freq_samples():
    head = GSDEHead(in_dim=4, action_dim=1, sample_freq=2)
    head.reset_noise(1)
    params = head(torch.randn(1, 4))
    actions = [head.sample(params) for _ in range(4)]
    assert torch.equal(actions[0], actions[1]) and not torch.equal(actions[1], actions[2])
    assert torch.equal(actions[2], actions[3])


def test_ppo_with_gsde_trains_and_refuses_discrete_actions():
    model = build(
        PPO,
        env=EnvConfig("Pendulum-v1", num_envs=2, seed=0),
        total_env_steps=256,
        env_steps_per_epoch=128,
        eval_episodes=1,
        num_steps=32,
        use_sde=True,
        log_std_init=-2.0,
    )
    quick_trainer().fit(model)
    assert isinstance(model.agent.head, GSDEHead)
    assert not torch.allclose(model.agent.head.log_std, torch.full_like(model.agent.head.log_std, -2.0))
    with pytest.raises(ConfigError, match="use_sde"):
        quick_trainer().fit(build(PPO, env=EnvConfig("CartPole-v1"), use_sde=True))
