"""Populations (``run.population``): N seeds of PPO as one batched model. Each member must be, update for
update, the run of its own seed: its initialization, its env seeds, its loss, gradients (clipped by its own
norm) and Adam step; checkpoints hold and resume all members; a diverging member is frozen alone."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import Logger

from rl_lightning import A2C, PPO, EnvConfig, RecurrentPPO
from rl_lightning.algorithms import on_policy
from rl_lightning.algorithms.population import report_diverged_members
from rl_lightning.algorithms.ppo import PPOLoss
from rl_lightning.callbacks import LastCheckpoint, RecordEpisodes
from rl_lightning.cli import main
from rl_lightning.data.rollout import Rollout, gae_batch
from rl_lightning.errors import ConfigError, DivergenceError
from rl_lightning.networks.policies import ActorCritic
from rl_lightning.networks.population import (
    Population,
    PopulationAdam,
    clip_grad_norm_per_member,
    interquartile_mean,
    member_minibatches,
    members_first,
    step_members,
)
from rl_lightning.optim import make_adam
from tests.helpers import ROOT, TINY_RUN, build, quick_trainer

OBS, ACT = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)


class Lights(gym.Env):
    """16 steps (then truncated, so every episode ends at a rollout's end here): a light, on or off by a
    fixed pattern (a resumed run's new episodes are the old ones), and reward 1 for matching it."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self):
        self.light = (self.t // 3) % 2
        return np.array([self.t / 16, self.light], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.light)
        self.t += 1
        return self._obs(), reward, False, self.t >= 16, {}


gym.register("test/Lights-v0", entry_point=Lights)


def actor_critic() -> ActorCritic:
    return ActorCritic(OBS, ACT, (8, 8))


def by_hand(population):
    """``population`` built, with its optimizer, to be stepped by hand (no trainer): the optimizer."""
    population.build_for_env()
    opt = population.configure_optimizers()
    population.optimizers = lambda: opt
    population.manual_backward = lambda loss: loss.backward()
    return opt


def population_ppo(population: int = 3, total: int = 512, **kw) -> PPO:
    args = dict(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=5),
        total_env_steps=total,
        env_steps_per_epoch=256,
        eval_episodes=2,
        population=population,
        num_steps=16,
        num_minibatches=2,
        update_epochs=2,
        hidden_sizes=(8, 8),
    )
    return build(PPO, **{**args, **kw})


def test_members_are_initialized_as_their_seeds_runs_and_answer_as_them():
    population = Population(actor_critic, [3, 7, 11])
    assert population.members.actor_body[0].weight.shape == (3, 8, 4)
    assert "members.critic.0.weight" in population.state_dict()
    torch.manual_seed(7)
    single = actor_critic()
    for (name, a), b in zip(population.member(1).named_parameters(), single.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    obs = torch.randn(3 * 5, 4)
    actions = torch.randint(0, 2, (15,))
    logprobs, entropy, values = population.evaluate(obs, actions)  # (N * B, ...) in member order
    expected = single.evaluate(obs[5:10], actions[5:10])
    for got, want in zip((logprobs[5:10], entropy[5:10], values[5:10]), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert torch.equal(population(obs, True)[5:10], single(obs[5:10], True))
    # Rows of given members (a collector's truncated sub-envs): each valued by its own member.
    rows = population.per_row("value", torch.tensor([1, 1, 2]), obs[:3])
    torch.testing.assert_close(rows[:2], single.value(obs[:2]))


def test_gradients_are_clipped_member_by_member_as_a_single_network_clips_its_own():
    population = Population(actor_critic, [0, 1])
    singles = [population.member(k) for k in range(2)]
    obs = torch.randn(2, 6, 4) * torch.tensor([0.01, 50.0]).view(2, 1, 1)  # member 1's gradients far larger
    population.map(lambda net, o: net.value(o).pow(2).mean(), obs).sum().backward()
    norms = clip_grad_norm_per_member(list(population.parameters()), 0.5)
    for k, single in enumerate(singles):
        single.value(obs[k]).pow(2).mean().backward()
        norm = torch.nn.utils.clip_grad_norm_(single.parameters(), 0.5)
        torch.testing.assert_close(norms[k], norm)
        for (name, p), q in zip(population.members.named_parameters(), single.parameters(), strict=True):
            if q.grad is not None:
                torch.testing.assert_close(p.grad[k], q.grad, msg=name)
    assert norms[0] < 0.5 < norms[1]  # one clipped, the other not: each by its own norm


def test_population_adam_is_one_adam_per_member_with_its_own_lr_and_masked_steps():
    population = Population(actor_critic, [0, 1, 2])
    singles = [population.member(k) for k in range(3)]
    lrs = [1e-2, 1e-3, 3e-2]
    opt = PopulationAdam(population.parameters(), lr=torch.tensor(lrs), eps=1e-5)
    single_opts = [torch.optim.Adam(s.parameters(), lr=lr, eps=1e-5) for s, lr in zip(singles, lrs, strict=True)]
    before = [p.detach().clone() for p in population.parameters()]
    for step in range(3):
        members = torch.tensor([True, step != 1, True])  # member 1 skips step 1
        for p in population.parameters():
            p.grad = torch.randn_like(p)
        for k, (single, single_opt) in enumerate(zip(singles, single_opts, strict=True)):
            for p, q in zip(population.parameters(), single.parameters(), strict=True):
                q.grad = p.grad[k].clone()
            if bool(members[k]):
                single_opt.step()
        opt.step(members=members)
    for k, single in enumerate(singles):
        for p, q in zip(population.parameters(), single.parameters(), strict=True):
            torch.testing.assert_close(p[k], q)
    assert all(not torch.equal(p, b) for p, b in zip(population.parameters(), before, strict=True))
    state = next(iter(opt.state.values()))
    assert state["step"].tolist() == [3, 2, 3]


def test_rollout_layout_and_minibatches_are_per_member():
    # A rollout field (T=2, N=2 members x E=3 sub-envs): entry t * 10 + sub-env.
    x = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]])
    laid_out = members_first(x.flatten().unflatten(0, (2, -1)), 2)
    assert laid_out.tolist() == [[0, 1, 2, 10, 11, 12], [3, 4, 5, 13, 14, 15]]  # each as its run flattens (T, E)
    seen = [[], []]
    for (mb,) in member_minibatches((laid_out,), 3):
        assert mb.shape == (2, 2)
        for k in range(2):
            seen[k] += mb[k].tolist()
    assert sorted(seen[0]) == [0, 1, 2, 10, 11, 12] and sorted(seen[1]) == [3, 4, 5, 13, 14, 15]
    assert interquartile_mean(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0])) == 3.5


def test_member_env_and_network_seeding_equal_the_single_runs():
    population = population_ppo(population=3)
    population.setup("fit")
    assert population.member_seeds == [5, 7, 9] and population.envs.num_envs == 6
    obs, _ = population.envs.reset(seed=population.rank_seed)
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)  # the single run: seed_everything(seed), env.seed = seed
        single = population_ppo(population=1, env=EnvConfig("CartPole-v1", num_envs=2, seed=seed))
        single.setup("fit")
        single_obs, _ = single.envs.reset(seed=single.rank_seed)
        assert (obs[2 * k : 2 * k + 2] == single_obs).all()
        for a, b in zip(population.agent.member(k).parameters(), single.agent.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        single.teardown("fit")
    population.teardown("fit")


def test_a_members_update_equals_its_single_runs_update():
    """The same rollout batch: member k's loss, clipped gradients and parameters after one Adam step are
    those of a single PPO with its seed (up to float reassociation)."""
    population = population_ppo(population=3, num_minibatches=1, max_grad_norm=0.1)
    by_hand(population)  # one step by hand: no trainer
    population.updating = torch.ones(3, dtype=torch.bool)
    s = 32
    batch = (
        torch.randn(3, s, 4),
        torch.randint(0, 2, (3, s)),
        torch.randn(3, s) * 0.1 - 0.7,
        torch.randn(3, s) * torch.tensor([1.0, 10.0, 100.0]).view(3, 1),
        torch.randn(3, s),
        torch.randn(3, s) * 30,
    )
    out = population.minibatch_update(*batch)
    single_losses = []
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)
        single = population_ppo(population=1, num_minibatches=1, max_grad_norm=0.1)
        single.build_for_env()
        single_opt = make_adam(single.agent.parameters(), 2.5e-4, 1e-5, fused=True)
        loss = single.minibatch_loss(*(x[k] for x in batch))
        torch.testing.assert_close(out.policy_loss[k], loss.policy_loss.detach())
        torch.testing.assert_close(out.value_loss[k], loss.value_loss.detach())
        torch.testing.assert_close(out.approx_kl[k], loss.approx_kl)
        loss.loss.backward()
        torch.nn.utils.clip_grad_norm_(single.agent.parameters(), 0.1)
        single_opt.step()
        for (name, p), q in zip(population.agent.members.named_parameters(), single.agent.parameters(), strict=True):
            torch.testing.assert_close(p.grad[k], q.grad, msg=name)
            torch.testing.assert_close(p[k], q, msg=name)
        single_losses.append(loss.loss.detach())
    torch.testing.assert_close(out.loss, sum(single_losses))  # what training_step returns: the members' sum


def test_a_diverged_member_is_frozen_and_reported_and_the_others_train_on():
    population = population_ppo(population=3)
    population.build_for_env()
    opt = population.configure_optimizers()
    population.manual_backward = lambda loss: loss.backward()
    before = [p.detach().clone() for p in population.parameters()]
    obs = torch.randn(3, 4, 4)
    member_losses = population.agent.map(lambda net, o: net.value(o).mean(), obs) * torch.tensor([1.0, math.nan, 1.0])
    total = population.population_step(opt, member_losses, max_grad_norm=0.5)
    assert total.isfinite() and population.diverged_members.tolist() == [False, True, False]
    for p, b in zip(population.parameters(), before, strict=True):
        if not torch.equal(p, b):
            assert torch.equal(p[1], b[1]) and not torch.equal(p[0], b[0])
    with pytest.warns(UserWarning, match=r"member\(s\) \[1\] diverged"):
        reported = report_diverged_members(population, None)
    assert report_diverged_members(population, reported).tolist() == reported.tolist()  # once only
    population.diverged_members[:] = True
    with pytest.raises(DivergenceError, match="Every member"):
        report_diverged_members(population, reported)


def test_a_member_that_diverges_in_a_fit_is_frozen_and_the_run_goes_on(monkeypatch):
    map_members = Population.map

    def map_with_a_nan_member(self, fn, *inputs, **options):
        out = map_members(self, fn, *inputs, **options)
        return out._replace(loss=out.loss * torch.tensor([1.0, math.nan, 1.0])) if isinstance(out, PPOLoss) else out

    monkeypatch.setattr(Population, "map", map_with_a_nan_member)
    model = population_ppo(population=3)
    with pytest.warns(UserWarning, match=r"member\(s\) \[1\] diverged"):
        trainer = quick_trainer()
        trainer.fit(model)
    assert model.env_steps == 512 and model.diverged_members.tolist() == [False, True, False]
    initial = population_ppo(population=3)
    initial.build_for_env()
    for p, q in zip(model.agent.parameters(), initial.agent.parameters(), strict=True):
        assert torch.equal(p[1], q[1]) and not torch.equal(p[0], q[0])  # member 1 frozen from its first step
    assert trainer.callback_metrics["member_1/val/episode_return"].isfinite()


@pytest.mark.parametrize(
    "env_seed, seeds",
    [pytest.param(5, [], id="env_seed"), pytest.param(None, [3, 5], marks=pytest.mark.slow, id="population_seeds")],
)
def test_checkpoints_hold_every_member_and_resume_exactly(tmp_path, env_seed, seeds):
    # population_seeds without env.seed: the members' env seeds are drawn again, alike, on resume.
    lights = EnvConfig("test/Lights-v0", num_envs=2, seed=env_seed)
    L.seed_everything(0)
    straight = population_ppo(population=2, total=1024, env=lights, population_seeds=seeds)
    quick_trainer().fit(straight)

    L.seed_everything(0)
    interrupted = population_ppo(population=2, total=1024, env=lights, population_seeds=seeds)
    callback = LastCheckpoint(dirpath=tmp_path)
    quick_trainer(max_epochs=2, callbacks=[callback], enable_checkpointing=True).fit(interrupted)
    assert interrupted.env_steps == 512  # per member
    torch.manual_seed(123)
    resumed = population_ppo(population=2, total=1024, env=lights, population_seeds=seeds)
    trainer = quick_trainer()
    trainer.fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.env_steps == straight.env_steps == 1024
    assert straight.state_dict()["agent.members.actor_body.0.weight"].shape == (2, 8, 2)
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    opt_a = straight.trainer.optimizers[0].state_dict()["state"]
    opt_b = trainer.optimizers[0].state_dict()["state"]
    for k in opt_a:
        torch.testing.assert_close(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"], rtol=0, atol=0)
        torch.testing.assert_close(opt_a[k]["step"], opt_b[k]["step"], rtol=0, atol=0)
    # Evaluation plays every member, each on its own run's evaluation seeds, and logs each.
    metrics = trainer.callback_metrics
    members = torch.stack([metrics[f"member_{k}/val/episode_return"] for k in range(2)])
    torch.testing.assert_close(metrics["val/episode_return"], members.mean())

    # Export: one member as a plain policy, acting as that member does.
    program = resumed.export_policy(member=1)
    obs = torch.rand(5, 2)
    assert torch.equal(program.module()(obs), resumed.agent.member(1)(obs, True))
    with pytest.raises(ConfigError, match="member=k"):
        resumed.export_policy()


def test_evaluation_plays_each_member_on_its_own_runs_seeds():
    population = population_ppo(population=2)
    population.build_for_env()
    returns, _ = population.play_episodes([1_000_005, 1_000_006])
    for k, seed in enumerate(population.member_seeds):
        single = population_ppo(population=1, env=EnvConfig("CartPole-v1", num_envs=2, seed=seed))
        single.build_for_env()
        single.agent.load_state_dict(population.agent.member(k).state_dict())
        single_returns, _ = single.play_episodes([seed + 1_000_000, seed + 1_000_001])
        assert returns[2 * k : 2 * k + 2].tolist() == single_returns.tolist()


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(normalize_obs=True), "normalize_obs does not work with run.population=2"),
        (dict(use_sde=True), "use_sde does not work"),
    ],
)
def test_options_a_population_cannot_keep_per_member_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        population_ppo(population=2, **options)


def test_videos_of_a_population_are_refused_before_any_env_step():
    with pytest.raises(ConfigError, match="RecordEpisodes records one policy"):
        quick_trainer(callbacks=[RecordEpisodes(tensorboard=False)]).fit(population_ppo(population=2))


def test_algorithms_without_populations_refuse_them_naming_those_with():
    with pytest.raises(
        ConfigError, match="RecurrentPPO does not train populations.*A2C, C51, DDPG, DQN, PPO, QRDQN, SAC, TD3, TQC do"
    ):
        build(RecurrentPPO, env=EnvConfig("CartPole-v1", num_envs=2), population=2)


def test_the_cli_takes_the_population_and_refuses_bad_values(tmp_path, monkeypatch, capsys):
    # In this process (the CLI's own main, as the console script runs it): a subprocess each paid ~5 s of imports.
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--model.run.population", "2", *TINY_RUN])
    assert re.search(r"Best member: [01] \(seed \d+\), val/episode_return .*member=[01]\)", capsys.readouterr().out)
    (last,) = tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt")
    assert torch.load(last, weights_only=True)["state_dict"]["agent.members.critic.0.weight"].shape[0] == 2
    for config, population, message in (
        ("ppo/cartpole", "0", "rl-lightning: error: run.population must be >= 1, got 0."),
        ("pqn/cartpole", "2", "PQN does not train populations"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main(
                [
                    "fit",
                    "--config",
                    str(ROOT / f"configs/{config}.yaml"),
                    "--model.run.population",
                    population,
                    *TINY_RUN,
                ]
            )
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_a2c_members_update_as_their_single_runs_with_rmsprop_and_a_masked_member_keeps_its_state():
    population = build(A2C, env=EnvConfig("CartPole-v1", num_envs=2, seed=5), population=2, hidden_sizes=(8, 8))
    opt = by_hand(population)  # torch's RMSprop over the stacked parameters: one per member
    batch = (torch.randn(2, 10, 4), torch.randint(0, 2, (2, 10)), torch.randn(2, 10), torch.randn(2, 10) * 5)
    out = population.rollout_update(*batch)
    for k, seed in enumerate(population.member_seeds):
        torch.manual_seed(seed)
        single = build(A2C, env=EnvConfig("CartPole-v1", num_envs=2, seed=seed), hidden_sizes=(8, 8))
        single.build_for_env()
        single_opt = single.configure_optimizers()
        loss = single.agent_loss(single.agent, *(x[k] for x in batch))
        torch.testing.assert_close(out.value_loss[k], loss.value_loss.detach())
        loss.loss.backward()
        torch.nn.utils.clip_grad_norm_(single.agent.parameters(), 0.5)
        single_opt.step()
        for p, q in zip(population.agent.parameters(), single.agent.parameters(), strict=True):
            torch.testing.assert_close(p[k], q)
    # A member masked out of a step (diverged) keeps its parameters and RMSprop state exactly.
    before = {p: (p.detach().clone(), opt.state[p]["square_avg"].clone()) for p in population.agent.parameters()}
    for p in population.agent.parameters():
        p.grad = torch.randn_like(p)
        p.grad[1] = math.nan
    step_members(opt, torch.tensor([True, False]))
    for p, (param, square_avg) in before.items():
        assert torch.equal(p[1], param[1]) and torch.equal(opt.state[p]["square_avg"][1], square_avg[1])
        assert not torch.equal(p[0], param[0]) and p.isfinite().all()


def test_a2c_population_fits():
    L.seed_everything(0)
    model = build(
        A2C,
        env=EnvConfig("CartPole-v1", num_envs=2, seed=5),
        population=3,
        total_env_steps=400,
        env_steps_per_epoch=200,
        eval_episodes=2,
        hidden_sizes=(8, 8),
    )
    trainer = quick_trainer(log_every_n_steps=1)
    trainer.fit(model)
    assert model.env_steps == 400  # per member
    assert {f"member_{k}/val/episode_return" for k in range(3)} <= set(trainer.callback_metrics)
    assert "val/episode_return_iqm" in trainer.callback_metrics


def test_target_kl_stops_each_members_own_epochs():
    population = population_ppo(population=3, target_kl=0.02)
    population._trainer = SimpleNamespace(
        world_size=1, strategy=SimpleNamespace(reduce=lambda x, reduce_op: x)
    )  # one rank
    population.updating = torch.ones(3, dtype=torch.bool)
    assert not population.kl_stops_epochs(torch.tensor([0.01, 0.05, 0.01]))
    assert population.updating.tolist() == [True, False, True]  # member 1's updates masked from now on
    assert population.kl_stops_epochs(torch.tensor([0.03, 0.0, 0.03]))  # every member has stopped


def test_a_member_of_given_seeds_starts_as_the_single_run_of_its_seed():
    # population_seeds [3, 5], no env.seed: member 1 is the run seed_everything(5) of the same config, which
    # draws its env seed from torch's RNG, then builds its networks; evaluation on that run's seeds.
    population = population_ppo(population=1, population_seeds=[3, 5], env=EnvConfig("CartPole-v1", num_envs=2))
    population.setup("fit")
    assert population.population == 2 and population.envs.num_envs == 4
    obs, _ = population.envs.reset(seed=population.training_env_seed)
    torch.manual_seed(5)  # the single run: seed_everything(5)
    single = population_ppo(population=1, env=EnvConfig("CartPole-v1", num_envs=2))
    single.setup("fit")
    assert population.member_env_seeds[1] == single.env_config.seed != 5
    single_obs, _ = single.envs.reset(seed=single.training_env_seed)
    assert (obs[2:] == single_obs).all() and not (obs[:2] == single_obs).all()
    for a, b in zip(population.agent.member(1).parameters(), single.agent.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    returns, _ = population.play_episodes([1_000_000])
    single.agent.load_state_dict(population.agent.member(1).state_dict())
    assert returns[1:].tolist() == single.play_episodes([single.env_config.seed + 1_000_000])[0].tolist()
    single.teardown("fit")
    population.teardown("fit")
    # A config that sets env.seed gives every seed's run that env seed: so do the members.
    fixed = population_ppo(population=1, population_seeds=[3, 5])
    assert fixed.member_env_seeds == [5, 5] and fixed.member_seeds == [3, 5]


@pytest.mark.parametrize(
    "population, seeds, message",
    [(1, [4], "run.population_seeds needs 2 or more seeds"), (3, [1, 2], "run.population=3 but run.population_seeds")],
)
def test_bad_population_seeds_are_refused(population, seeds, message):
    with pytest.raises(ConfigError, match=message):
        population_ppo(population=population, population_seeds=seeds)


# Hyperparameter variants (run.population_variants): member k is the run with its own values.
PPO_VARIANTS = dict(
    learning_rate=[1e-3, 3e-4, 2e-2],
    ent_coef=[0.0, 0.05, 0.2],
    clip_coef=[0.2, 0.05, 0.3],
    vf_coef=[0.5, 1.0, 0.25],
    max_grad_norm=[0.1, 5.0, 0.3],
)


def test_a_members_update_with_its_own_hyperparameters_equals_the_single_run_with_them():
    """population_variants: member k's loss, clipped gradients and Adam step from the same rollout batch are
    those of the single PPO with its seed and its values (learning rate, entropy, value and clipping
    coefficients, gradient-norm threshold), not of another member's."""
    population = population_ppo(population=1, num_minibatches=1, population_variants=PPO_VARIANTS)
    assert population.population == 3  # set by the lists
    by_hand(population)
    population.updating = torch.ones(3, dtype=torch.bool)
    s = 32
    batch = (
        torch.randn(3, s, 4),
        torch.randint(0, 2, (3, s)),
        torch.randn(3, s) * 0.3 - 0.7,
        torch.randn(3, s) * 3,
        torch.randn(3, s),
        torch.randn(3, s) * 30,
    )
    before = [p.detach().clone() for p in population.agent.parameters()]
    out = population.minibatch_update(*batch)
    out = population.minibatch_update(*batch)  # a second step: Adam's moments, each member's own lr
    for k, seed in enumerate(population.member_seeds):
        values = {name: v[k] for name, v in PPO_VARIANTS.items()}
        torch.manual_seed(seed)
        single = population_ppo(population=1, num_minibatches=1, **values)
        single.build_for_env()
        single_opt = make_adam(single.agent.parameters(), values["learning_rate"], 1e-5, fused=True)
        for _ in range(2):
            single_opt.zero_grad()
            loss = single.minibatch_loss(*(x[k] for x in batch))
            loss.loss.backward()
            torch.nn.utils.clip_grad_norm_(single.agent.parameters(), values["max_grad_norm"])
            single_opt.step()
        for name in ("policy_loss", "value_loss", "entropy", "clip_fraction"):
            torch.testing.assert_close(getattr(out, name)[k], getattr(loss, name).detach(), msg=name)
        members = population.agent.members.named_parameters()
        for (name, p), q, b in zip(members, single.agent.parameters(), before, strict=True):
            torch.testing.assert_close(p.grad[k], q.grad, msg=name)
            torch.testing.assert_close(p[k], q, msg=name)
            assert not torch.equal(p[k], b[k])
    assert out.clip_fraction[1] > out.clip_fraction[2]  # the narrower clip range clips more (old logprobs random)


def test_each_member_discounts_with_its_own_gamma_and_gae_lambda_and_anneals_its_own_lr():
    variants = dict(gamma=[0.9, 0.99], gae_lambda=[1.0, 0.8], learning_rate=[1e-3, 1e-2])
    population = population_ppo(population=2, population_variants=variants, total=1000)
    population.build_for_env()
    t, e = 16, 2  # rollout [num_steps, N * E], member k's sub-envs the E from k * E
    rollout = Rollout(
        obs=torch.randn(t, 2 * e, 4),
        actions=torch.randint(0, 2, (t, 2 * e)),
        logprobs=torch.randn(t, 2 * e),
        values=torch.randn(t, 2 * e),
        rewards=torch.randn(t, 2 * e),
        terminated=torch.rand(t, 2 * e) < 0.2,
        truncated=torch.rand(t, 2 * e) < 0.2,
        next_values=torch.randn(t, 2 * e),
    )
    b = on_policy.gae_member_batch(population, rollout)
    for k in range(2):
        mine = Rollout(*(x[:, k * e : (k + 1) * e] for x in rollout))
        single = gae_batch(mine, variants["gamma"][k], variants["gae_lambda"][k])
        torch.testing.assert_close(b.advantages[k], single.advantages)
        torch.testing.assert_close(b.returns[k], single.returns)
    assert not torch.allclose(b.advantages[0], gae_batch(Rollout(*(x[:, :e] for x in rollout)), 0.99, 0.95).advantages)

    opt = population.configure_optimizers()
    population.env_steps = 250  # a quarter of the budget: each member's lr at 3/4 of its own
    population.anneal_learning_rate(opt, population.member_hparam("learning_rate"))
    torch.testing.assert_close(opt.param_groups[0]["lr"], torch.tensor([7.5e-4, 7.5e-3]))
    assert population.variant_learning_rate.tolist() == pytest.approx([1e-3, 1e-2])  # the start values kept


def test_a2c_members_step_rmsprop_with_their_own_learning_rate_and_coefficients():
    variants = dict(learning_rate=[7e-4, 5e-3], ent_coef=[0.0, 0.1], vf_coef=[0.5, 2.0], max_grad_norm=[0.5, 0.05])
    env = EnvConfig("CartPole-v1", num_envs=2, seed=5)
    population = build(A2C, env=env, population_variants=variants, hidden_sizes=(8, 8))
    opt = by_hand(population)  # torch's RMSprop, each member's lr applied by step_members
    batch = (torch.randn(2, 10, 4), torch.randint(0, 2, (2, 10)), torch.randn(2, 10), torch.randn(2, 10) * 5)
    for _ in range(2):
        out = population.rollout_update(*batch)
    for k, seed in enumerate(population.member_seeds):
        values = {name: v[k] for name, v in variants.items()}
        torch.manual_seed(seed)
        single = build(A2C, env=EnvConfig("CartPole-v1", num_envs=2, seed=seed), hidden_sizes=(8, 8), **values)
        single.build_for_env()
        single_opt = single.configure_optimizers()
        for _ in range(2):
            single_opt.zero_grad()
            loss = single.agent_loss(single.agent, *(x[k] for x in batch))
            loss.loss.backward()
            torch.nn.utils.clip_grad_norm_(single.agent.parameters(), values["max_grad_norm"])
            single_opt.step()
        torch.testing.assert_close(out.entropy[k], loss.entropy.detach())
        for p, q in zip(population.agent.parameters(), single.agent.parameters(), strict=True):
            torch.testing.assert_close(p[k], q)
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)  # kept per member between steps


@pytest.mark.parametrize(
    "variants, message",
    [
        (dict(learnig_rate=[1e-3, 1e-4]), "run.population_variants: PPO has no argument 'learnig_rate'."),
        (
            dict(ent_coef=[0.0, 0.01, 0.02]),
            r"run.population_variants.ent_coef needs one value per member \(2 members\)",
        ),
        (dict(update_epochs=[1, 2]), "PPO's update_epochs cannot differ between members"),
        (dict(ent_coef=["a", 0.1]), "run.population_variants.ent_coef must be numbers"),
        (dict(ent_coef=[0.1]), r"needs one value per member \(1 members\)"),
        (dict(gamma=[0.99, 1.5]), r"gamma must be in \(0, 1\], got 1.5"),
        (dict(ent_coef=dict(normal=[0.0, 1.0])), "ent_coef must be a list of values, {uniform: "),
        (dict(learning_rate=dict(log_uniform=[0.0, 1e-2])), "log_uniform needs low <= high and low > 0"),
    ],
)
def test_bad_population_variants_are_refused_in_one_line(variants, message):
    population = 1 if variants.get("ent_coef") == [0.1] else 2
    with pytest.raises(ConfigError, match=message):
        population_ppo(population=population, population_variants=variants)


def test_a_population_with_variants_fits_and_logs_each_members_values():
    class Rows(Logger):
        name, version = "rows", 0

        def __init__(self):
            super().__init__()
            self.rows = {}

        def log_metrics(self, metrics, step=None):
            self.rows.update(metrics)

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    logger = Rows()
    variants = dict(ent_coef=[0.0, 0.01], learning_rate=[1e-3, 3e-3])
    model = population_ppo(population=2, population_variants=variants, total=256)
    quick_trainer(logger=logger, log_every_n_steps=1).fit(model)
    assert model.env_steps == 256
    assert logger.rows["member_1/hp/ent_coef"] == 0.01 and logger.rows["member_0/hp/learning_rate"] == 1e-3
    assert logger.rows["member_1/train/learning_rate"] < 3e-3 and "member_0/val/episode_return" in logger.rows


def test_sampled_variants_are_drawn_from_each_members_seed():
    spec = dict(learning_rate=dict(log_uniform=[1e-4, 1e-2]), ent_coef=dict(uniform=[0.0, 0.1]))
    population = population_ppo(population=4, population_variants=spec)
    lrs, ent_coefs = population.variants["learning_rate"], population.variants["ent_coef"]
    assert all(1e-4 <= v <= 1e-2 for v in lrs) and all(0 <= v <= 0.1 for v in ent_coefs)
    assert len(set(lrs)) == 4 and lrs != ent_coefs
    assert population_ppo(population=4, population_variants=spec).variants == population.variants  # reproducible
    # A member's value is its seed's: seed 7 is member 1 here (env.seed 5 + 1 * num_envs) and member 0 there.
    given = population_ppo(population=1, population_seeds=[7, 11], population_variants=spec)
    assert given.variants["learning_rate"][0] == lrs[1]
    assert torch.equal(population.member_hparam("ent_coef"), torch.tensor(ent_coefs))
    with pytest.raises(ConfigError, match="draws each member's value from its seed: set env.seed"):
        population_ppo(population=2, env=EnvConfig("CartPole-v1", num_envs=2), population_variants=spec)


def test_split_members_keeps_this_ranks_block_and_unite_gathers_every_rank_back():
    # What setup does on rank 1 of 2 under DDP (run.population_ddp: split), without the processes:
    # tests/test_ddp.py (-m slow) runs the real thing.
    from rl_lightning.callbacks import RLProgressBar

    model = population_ppo(population=4, population_variants={"learning_rate": [1e-3, 2e-3, 3e-3, 4e-3]})
    model.build_for_env()
    whole, seeds = {k: v.clone() for k, v in model.state_dict().items()}, model.member_seeds
    model.split_members(1, 2)
    assert model.splits_members and (model.population, model.population_size, model.member_offset) == (2, 4, 2)
    assert model.member_seeds == seeds[2:] and model.agent.size == 2
    assert all(torch.equal(v, whole[k][2:]) for k, v in model.state_dict().items())
    assert model.member_hparam("learning_rate").tolist() == pytest.approx([3e-3, 4e-3])
    assert (model.data_parallel_ranks, model.data_parallel_rank) == (1, 0)  # nothing shared with other ranks
    bar = RLProgressBar()
    bar.on_train_start(None, model)
    assert "x4 members" in bar.train_progress_bar.desc  # every rank's members, not this rank's 2

    rank_0 = {v.data_ptr(): whole[k][:2] for k, v in model.state_dict().items()}  # what rank 0 would send
    model.gather_members = lambda x: torch.cat([rank_0.get(x.data_ptr(), torch.zeros_like(x)), x])
    model.unite_members()
    assert not model.splits_members and model.population == 4 and model.agent.size == 4
    assert all(torch.equal(v, whole[k]) for k, v in model.state_dict().items())
    assert model.member_seeds == seeds
