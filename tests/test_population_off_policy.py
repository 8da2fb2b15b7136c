"""Populations of the off-policy algorithms (SAC and TQC on its code, TD3 and DDPG on its, DQN, C51 and QR-DQN on
DQN's): each member collects into and samples from its own part of one replay buffer, and one update steps every
member on its own batch exactly as the run of its seed (with its own hyperparameters) would step on that batch."""

from __future__ import annotations

import math

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import C51, DDPG, DQN, QRDQN, SAC, TD3, TQC, CrossQ, EnvConfig
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.config import ReplayConfig
from rl_lightning.data.buffers import PrioritizedReplayBuffer, ReplayBuffer
from rl_lightning.data.replay import Replay
from rl_lightning.errors import ConfigError
from tests.helpers import build, quick_trainer

PENDULUM = EnvConfig("Pendulum-v1", num_envs=2, seed=3)
TINY_REPLAY = dict(learning_starts=64, batch_size=16, buffer_size=1000)


def off_policy_population(cls: type = SAC, population: int = 3, total: int = 256, **kw) -> SAC:
    args = dict(
        env=PENDULUM,
        total_env_steps=total,
        env_steps_per_epoch=128,
        eval_episodes=1,
        population=population,
        hidden_sizes=(8, 8),
        replay=TINY_REPLAY,
    )
    return build(cls, **{**args, **kw})


def by_hand(module):
    """``module`` built with its optimizers, to be stepped by hand (no trainer)."""
    module.build_for_env()
    opts = module.configure_optimizers()
    module.optimizers = lambda: opts
    module.manual_backward = lambda loss: loss.backward()

    def clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm):  # what Lightning's does here
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], gradient_clip_val)

    module.clip_gradients = clip_gradients
    return opts


def batch(members: int, rows: int = 24) -> tuple[torch.Tensor, ...]:
    """A replay batch per member, ``(N, B, ...)``: obs, normalized actions, rewards, discounts, terminated, next obs."""
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(members, rows, 3, generator=g),
        torch.rand(members, rows, 1, generator=g) * 2 - 1,
        torch.randn(members, rows, generator=g) * torch.tensor([1.0, 10.0, 0.1])[:members].view(-1, 1),
        torch.full((members, rows), 0.99),
        (torch.rand(members, rows, generator=g) < 0.2).float(),
        torch.randn(members, rows, 3, generator=g),
    )


@pytest.mark.parametrize("cls", [SAC, TQC])
def test_a_members_updates_equal_its_single_runs_with_its_own_learning_rate_and_tau(cls, monkeypatch):
    """The same batches: after two updates member k's actor, critics, target critics and alpha are those of a
    single run of its seed built with its learning rate and tau (up to float reassociation). The actor's noise
    is fixed so both draw the same actions."""
    monkeypatch.setattr(torch, "randn_like", lambda x: torch.full_like(x, 0.3))
    variants = {"learning_rate": [3e-4, 1e-3, 3e-3], "tau": [0.005, 0.05, 0.5]}
    population = off_policy_population(cls, population_variants=variants)
    by_hand(population)
    b = batch(3)
    outs = [population.batch_update(*b).clone() for _ in range(2)]
    single_outs = []
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)
        own = {name: values[k] for name, values in variants.items()}  # its learning_rate and tau
        single = off_policy_population(cls, population=1, **own)
        by_hand(single)
        single_outs.append(torch.stack([single.batch_update(*(x[k] for x in b)).clone() for _ in range(2)]))
        for name in ("actor", "critic", "critic_target"):
            members = getattr(population, name).members
            for (pname, p), q in zip(members.named_parameters(), getattr(single, name).parameters(), strict=True):
                torch.testing.assert_close(p[k], q, msg=f"member {k} {name}.{pname}")
        torch.testing.assert_close(population.log_alpha[k], single.log_alpha)
    # What is logged per member (critic and actor losses, mean Q, entropy, alpha): each its run's.
    torch.testing.assert_close(torch.stack(outs), torch.stack(single_outs, dim=-1))


@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_a_td3_members_updates_equal_its_single_runs(cls, monkeypatch):
    """Two critic updates and a delayed actor update with the targets' (TD3's target smoothing noise fixed)."""
    monkeypatch.setattr(torch, "randn_like", lambda x: torch.full_like(x, 0.3))
    variants = {"learning_rate": [3e-4, 1e-3, 3e-3], "tau": [0.005, 0.05, 0.5]}
    population = off_policy_population(cls, population_variants=variants)
    by_hand(population)
    b = batch(3)

    def updates(module, b):
        return torch.stack([module.critic_update(*b), module.critic_update(*b)]), module.actor_update(b[0])

    critic_outs, actor_out = updates(population, b)
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)
        own = {name: values[k] for name, values in variants.items()}  # its learning_rate and tau
        single = off_policy_population(cls, population=1, **own)
        by_hand(single)
        single_critic_outs, single_actor_out = updates(single, [x[k] for x in b])
        torch.testing.assert_close(critic_outs[..., k], single_critic_outs)
        torch.testing.assert_close(actor_out[k], single_actor_out)
        for name in ("actor", "critic", "actor_target", "critic_target"):
            members = getattr(population, name).members
            for (pname, p), q in zip(members.named_parameters(), getattr(single, name).parameters(), strict=True):
                torch.testing.assert_close(p[k], q, msg=f"member {k} {name}.{pname}")


def test_a_td3_population_fits_with_a_noise_process_per_sub_env_and_logs_each_member():
    model = off_policy_population(TD3, population=2, total=128, noise_type="ornstein_uhlenbeck")
    trainer = quick_trainer(log_every_n_steps=1)
    trainer.fit(model)
    assert model.env_steps == 128 and model.noise.state.shape[0] == 2 * 2  # 2 members x 2 sub-envs
    metrics = trainer.callback_metrics
    for name in ("train/critic_loss", "train/actor_loss", "val/episode_return"):
        members = torch.stack([metrics[f"member_{k}/{name}"] for k in range(2)])
        torch.testing.assert_close(metrics[name], members.mean())


@pytest.mark.parametrize("cls", [DQN, C51, QRDQN])
def test_a_dqn_members_update_equals_its_single_runs_with_its_own_lr_and_clipping(cls):
    """The same minibatch and targets: member k's loss, per-sample errors, mean Q and parameters after two
    clipped Adam steps are its seed's single run's with its own learning rate and max_grad_norm."""
    variants = {"learning_rate": [1e-4, 1e-3, 1e-2], "max_grad_norm": [0.01, 1.0, 10.0]}
    args = dict(env=EnvConfig("CartPole-v1", num_envs=2, seed=3), hidden_sizes=(8,), dueling=True)
    if cls is not DQN:
        args["n_quantiles" if cls is QRDQN else "n_atoms"] = 5
    population = off_policy_population(cls, population_variants=variants, **args)
    by_hand(population)
    g = torch.Generator().manual_seed(1)
    rows = 3 * 16
    obs, actions = torch.randn(rows, 4, generator=g), torch.randint(0, 2, (rows,), generator=g)
    targets = {DQN: (rows,), C51: (rows, 5), QRDQN: (rows, 5)}[cls]
    target = torch.rand(targets, generator=g) * 10
    if cls is C51:
        target = target.softmax(-1)  # a projected distribution
    weights = torch.ones(rows)
    outs = [population.minibatch_update(obs, actions, target, weights) for _ in range(2)]
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)
        single = off_policy_population(cls, population=1, **{n: v[k] for n, v in variants.items()}, **args)
        by_hand(single)
        mine = slice(16 * k, 16 * (k + 1))
        single_outs = [single.minibatch_update(obs[mine], actions[mine], target[mine], weights[mine]) for _ in range(2)]
        for out, single_out in zip(outs, single_outs, strict=True):
            torch.testing.assert_close(out[0][k], single_out[0])  # loss
            torch.testing.assert_close(out[1][mine], single_out[1])  # per-sample errors (priorities)
            torch.testing.assert_close(out[2][k], single_out[2])  # mean Q
        for (name, p), q in zip(population.q_net.members.named_parameters(), single.q_net.parameters(), strict=True):
            torch.testing.assert_close(p[k], q, msg=f"member {k} {name}")


def test_a_dqn_population_fits_and_logs_each_member():
    model = off_policy_population(
        DQN,
        population=2,
        total=256,
        env=EnvConfig("CartPole-v1", num_envs=2, seed=3),
        double_q=True,
        n_step=3,
        target_network_frequency=64,
        replay=dict(TINY_REPLAY, gradient_steps=2),
    )
    trainer = quick_trainer(log_every_n_steps=1)
    trainer.fit(model)
    assert model.env_steps == 256
    metrics = trainer.callback_metrics
    for name in ("train/loss", "train/q_values", "val/episode_return"):
        members = torch.stack([metrics[f"member_{k}/{name}"] for k in range(2)])
        torch.testing.assert_close(metrics[name], members.mean())


def test_a_member_that_diverges_is_frozen_and_the_others_update():
    population = off_policy_population()
    by_hand(population)
    before = {n: p.detach().clone() for n, p in population.named_parameters()}
    obs, *rest = batch(3)
    obs[1, 0, 0] = math.nan  # member 1's batch only
    population.batch_update(obs, *rest)
    assert population.diverged_members.tolist() == [False, True, False]
    for name, p in population.named_parameters():
        assert torch.equal(p[1], before[name][1]), name
        if name.startswith(("actor", "critic")):
            assert not torch.equal(p[0], before[name][0]), name


def test_each_member_samples_its_own_transitions_and_keeps_its_own_budget_of_them():
    space = gym.spaces.Box(-1.0, 1.0, (1,))
    buffer = ReplayBuffer(3 * 40, 6, space, space, members=3, seed=0)
    assert buffer.rows == 20  # 40 transitions per member, over its 2 sub-envs
    for t in range(8):  # sub-env e's observations hold e
        obs = torch.arange(6.0).view(6, 1)
        buffer.add(obs, torch.zeros(6, 1), np.full(6, float(t)), obs, np.zeros(6, bool), np.zeros(6, bool))
    sampled = buffer.sample(50).obs.view(3, 50)
    for k in range(3):  # member k's rows come from its sub-envs 2k and 2k + 1 only, both of them
        assert set(sampled[k].tolist()) == {2.0 * k, 2.0 * k + 1}
    with pytest.raises(ValueError, match="do not split"):
        ReplayBuffer(100, 5, space, space, members=2)
    with pytest.raises(ValueError, match="a population replays uniformly"):
        PrioritizedReplayBuffer(100, 4, space, space, members=2)
    # The warm-up counts each member's env steps: 64 over a member's 2 sub-envs is 32 vector steps.
    envs = gym.make_vec("Pendulum-v1", num_envs=6)
    replay = Replay(ReplayConfig(buffer_size=100, learning_starts=64, batch_size=8, train_freq=1), members=3)
    replay.start(envs, torch.device("cpu"), 0, 1, graphs=None)
    replay.collect(lambda obs: torch.zeros(len(obs), 1))
    assert replay.vector_steps == 33 and replay.buffer.rows == 50
    assert replay.sample().obs.shape == (24, 3)
    envs.close()


def test_a_population_fits_resumes_exactly_and_exports_a_member(tmp_path):
    """As a run's (tests/test_resume.py): episodes end at the checkpoint, the buffer is saved with it."""

    def corridor_sac() -> SAC:
        return off_policy_population(
            env=EnvConfig("test/SlidingCorridor-v0", num_envs=2, seed=0),
            population=2,
            total=448,
            env_steps_per_epoch=128,
            replay=dict(TINY_REPLAY, train_freq=4, gradient_steps=2, save_replay_buffer=True),
        )

    L.seed_everything(0)
    straight = corridor_sac()
    quick_trainer().fit(straight)
    L.seed_everything(0)
    interrupted = corridor_sac()
    callback = LastCheckpoint(dirpath=tmp_path)
    quick_trainer(max_epochs=2, callbacks=[callback], enable_checkpointing=True).fit(interrupted)
    assert interrupted.env_steps == 320  # per member: 64 warm-up + 2 x 128, episodes end here
    torch.manual_seed(123)
    resumed = corridor_sac()
    trainer = quick_trainer(log_every_n_steps=1)
    trainer.fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.env_steps == straight.env_steps == 448
    assert straight.state_dict()["log_alpha"].shape == (2,)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    metrics = trainer.callback_metrics
    members = torch.stack([metrics[f"member_{k}/val/episode_return"] for k in range(2)])
    torch.testing.assert_close(metrics["val/episode_return"], members.mean())
    losses = torch.stack([metrics[f"member_{k}/train/critic_loss"] for k in range(2)])
    torch.testing.assert_close(metrics["train/critic_loss"], losses.mean())
    program = resumed.export_policy(member=1)
    obs = torch.randn(4, *resumed.observation_space.shape)
    torch.testing.assert_close(program.module()(obs), resumed(obs.repeat(2, 1))[4:])  # member-major rows


@pytest.mark.parametrize(
    "cls, options, message",
    [
        (CrossQ, {}, "CrossQ does not train populations"),
        (SAC, {"use_sde": True}, "use_sde does not work with run.population=2"),
        (SAC, {"population_variants": {"gamma": [0.9, 0.99]}}, "SAC's gamma cannot differ between members"),
        (DQN, {"prioritized_replay": True}, "prioritized_replay does not work with run.population=2"),
        (C51, {"noisy": True}, "noisy does not work with run.population=2"),
    ],
)
def test_what_a_population_cannot_keep_per_member_is_refused(cls, options, message):
    with pytest.raises(ConfigError, match=message):
        off_policy_population(cls, population=2, **options)
