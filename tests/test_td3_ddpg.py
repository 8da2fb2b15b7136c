"""TD3 and DDPG: target smoothing and the target (pure functions), delayed policy updates, DDPG as TD3
with its three changes off, exploration within bounds, checkpoints, bad input, learning on Pendulum."""

import time

import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import DDPG, SAC, TD3, EnvConfig
from rl_lightning.algorithms.td3 import deterministic_actor_loss, smoothed_target_actions, td3_target
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.config import constructor_defaults
from rl_lightning.errors import ConfigError
from tests.helpers import RecordingBox, build, quick_trainer
from tests.helpers import tiny_td3 as tiny


# ------------------------------------------------------------------------------ pure functions
def test_target_policy_smoothing_clips_the_noise_then_the_action():
    actions = torch.tensor([[0.0, 0.9], [-0.8, 0.1]])
    noise = torch.tensor([[0.7, 0.3], [-0.2, -0.6]])
    # noise clipped to +-0.5: [[0.5, 0.3], [-0.2, -0.5]]; actions clipped to [-1, 1]
    expected = torch.tensor([[0.5, 1.0], [-1.0, -0.4]])
    torch.testing.assert_close(smoothed_target_actions(actions, noise, 0.5), expected)
    torch.testing.assert_close(smoothed_target_actions(actions, noise, 0.0), actions)  # DDPG: no smoothing


def test_td3_target_takes_the_minimum_of_the_critics_and_respects_termination():
    rewards, discounts, terminated = (
        torch.tensor([1.0, 2.0, 3.0]),
        torch.full((3,), 0.98),
        torch.tensor([0.0, 0.0, 1.0]),
    )
    next_q = torch.tensor([[5.0, -1.0, 7.0], [4.0, 2.0, 9.0]])
    torch.testing.assert_close(
        td3_target(rewards, discounts, terminated, next_q), torch.tensor([1 + 0.98 * 4, 2 - 0.98, 3.0])
    )
    # one critic (DDPG): its value
    torch.testing.assert_close(
        td3_target(rewards, discounts, terminated, next_q[:1]), torch.tensor([1 + 0.98 * 5, 2 - 0.98, 3.0])
    )
    torch.testing.assert_close(deterministic_actor_loss(torch.tensor([1.0, 3.0])), torch.tensor(-2.0))


def test_target_smoothing_noise_is_drawn_only_when_configured():
    # TD3 perturbs the target actions; DDPG (no smoothing) uses the target actor's actions as they are.
    calls = []
    original = torch.randn_like

    def spy(t, *a, **k):
        calls.append(tuple(t.shape))
        return original(t, *a, **k)

    for cls, expected in [(TD3, True), (DDPG, False)]:
        calls.clear()
        model = tiny(cls, total_env_steps=150, learning_starts=0, train_freq=1, gradient_steps=1)
        torch.randn_like = spy
        try:
            quick_trainer().fit(model)
        finally:
            torch.randn_like = original
        # exploration noise is [2 envs, 1]; smoothing noise is [batch 32, 1]
        assert ((32, 1) in calls) == expected, cls


# ------------------------------------------------------------------------------ delayed updates
@pytest.mark.parametrize(("cls", "policy_frequency"), [(TD3, 2), (TD3, 3), (DDPG, 1)])
def test_actor_and_targets_update_once_every_policy_frequency_critic_updates(cls, policy_frequency):
    kw = {} if cls is DDPG else {"policy_frequency": policy_frequency}
    model = tiny(cls, gradient_steps=1, phases_per_step=1, **kw)  # one update per training step
    snapshots = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            snapshots.append(
                (
                    module.num_updates,
                    module.actor.out.weight.clone(),
                    module.actor_target.out.weight.clone(),
                    module.critic_target.layers[-1].weight[0].clone(),
                )
            )

    trainer = quick_trainer(callbacks=[Watch()])
    trainer.fit(model)
    actor_opt, critic_opt = trainer.optimizers
    steps = {k: [s["step"].item() for s in opt.state.values()] for k, opt in (("a", actor_opt), ("c", critic_opt))}
    assert set(steps["c"]) == {model.num_updates} and model.num_updates == len(snapshots)
    assert set(steps["a"]) == {model.num_updates // policy_frequency}
    # the targets move exactly in the training steps that contain a policy update
    for (n0, a0, at0, ct0), (n1, a1, at1, ct1) in zip(snapshots, snapshots[1:], strict=False):
        due = n1 // policy_frequency > n0 // policy_frequency
        assert (not torch.equal(a0, a1)) == due and (not torch.equal(at0, at1)) == due
        assert (not torch.equal(ct0, ct1)) == due


def test_ddpg_is_td3_with_one_critic_no_delay_and_no_smoothing():
    model = tiny(DDPG)
    assert (model.n_critics, model.policy_frequency, model.target_policy_noise) == (1, 1, 0.0)
    assert TD3.n_critics == 2
    # DDPG's arguments (as the CLI resolves them) are TD3's, minus the three it fixes, with TD3's defaults.
    td3, ddpg = constructor_defaults(TD3), constructor_defaults(DDPG)
    fixed = {"policy_frequency", "target_policy_noise", "target_noise_clip"}
    assert ddpg == {name: default for name, default in td3.items() if name not in fixed}


# ------------------------------------------------------------------------------------ bounds
@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_noisy_actions_stay_within_the_bounds(cls):
    RecordingBox.received.clear()
    model = tiny(cls, env=EnvConfig("test/RecordingBox-v0", num_envs=2, seed=0), exploration_noise=5.0)
    quick_trainer().fit(model)
    sent = np.stack(RecordingBox.received)
    low, high = RecordingBox.action_space.low, RecordingBox.action_space.high
    assert (sent >= low).all() and (sent <= high).all()
    with torch.no_grad():
        acts = model(torch.randn(100, 3) * 100, deterministic=False)
    assert (acts >= torch.from_numpy(low)).all() and (acts <= torch.from_numpy(high)).all()


# ------------------------------------------------------------------------------ checkpoints
def test_checkpoint_round_trips_targets_and_the_update_counter(tmp_path):
    model = tiny(TD3, save_replay_buffer=True)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(model)
    loaded = TD3.load_from_checkpoint(tmp_path / "last.ckpt")
    assert set(loaded.state_dict()) == set(model.state_dict()) and any("actor_target" in k for k in model.state_dict())
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, loaded.state_dict()[k], msg=k)
    assert loaded.num_updates == model.num_updates
    ddpg = tiny(DDPG, total_env_steps=150)
    quick_trainer(callbacks=[LastCheckpoint(dirpath=tmp_path / "d")], enable_checkpointing=True).fit(ddpg)
    reloaded = DDPG.load_from_checkpoint(tmp_path / "d/last.ckpt")
    assert reloaded.critic.n == 1 and reloaded.policy_frequency == 1
    obs = torch.randn(4, 3)
    torch.testing.assert_close(ddpg(obs), reloaded(obs))


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_discrete_actions_fail_at_once_naming_the_space(cls):
    model = tiny(cls, env=EnvConfig("CartPole-v1", num_envs=1, seed=0))
    with pytest.raises(ConfigError, match=rf"{cls.__name__} cannot handle the action space Discrete\(2\)"):
        quick_trainer().fit(model)
    assert model.env_steps == 0


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(policy_frequency=0), "policy_frequency must be >= 1, got 0"),
        (dict(exploration_noise=-0.1), "exploration_noise must be >= 0, got -0.1"),
        (dict(target_noise_clip=-1.0), "target_noise_clip must be >= 0"),
        (dict(batch_size=2000), "replay.buffer_size=1000 must be >= replay.batch_size=2000"),
        (dict(tau=2.0), r"tau must be in \(0, 1\], got 2.0"),
        (dict(learning_starts=301), r"replay.learning_starts must be in \[0, total_env_steps=300\], got 301"),
        (dict(hidden_sizes=(0,)), "hidden_sizes must be positive"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        tiny(TD3, **kw)


# ----------------------------------------------------------------------------------- learning
def pendulum(cls, seed: int, total: int = 20_000, **kw):
    """configs/{td3,ddpg}/pendulum.yaml (RL Zoo)."""
    args = dict(
        env=EnvConfig("Pendulum-v1", num_envs=1, seed=seed),
        total_env_steps=total,
        buffer_size=200_000,
        learning_rate=1e-3,
        gamma=0.98,
        learning_starts=10_000,
        train_freq=200,
        gradient_steps=200,
        exploration_noise=0.1,
        env_steps_per_epoch=2000,
        eval_episodes=20,
    )
    args.update(kw)
    return build(cls, **args)


# With -m slow (~32 s for TD3, ~50 s for DDPG on 2 cores; the default suite is at its time budget): SAC's
# learning check (tests/test_sac.py) stays in the default suite for the off-policy continuous code.
@pytest.mark.slow
@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_learns_pendulum_quickly(cls):
    # Random play scores about -1200. Small networks, a short warm-up, two updates per env step and a
    # higher learning rate keep this under a minute (seed 0: TD3 -226, DDPG -150).
    L.seed_everything(0)
    model = pendulum(
        cls,
        0,
        3000,
        learning_starts=400,
        train_freq=100,
        learning_rate=2e-3,
        hidden_sizes=(64, 64),
        env_steps_per_epoch=3000,
    )
    trainer = quick_trainer()
    trainer.fit(model)
    assert trainer.callback_metrics["val/episode_return"] > -600


@pytest.mark.slow
@pytest.mark.parametrize("cls", [TD3, DDPG])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pendulum_acceptance(cls, seed):
    # Acceptance: eval mean return >= -200 over 20 deterministic episodes within 20k env steps.
    L.seed_everything(seed)
    model = pendulum(cls, seed)
    trainer = quick_trainer()
    start = time.perf_counter()
    trainer.fit(model)
    ret = float(trainer.callback_metrics["val/episode_return"])
    wall = time.perf_counter() - start
    print(f"{cls.__name__} Pendulum seed {seed}: eval return {ret:.1f} at 20k env steps, {wall:.0f} s")
    assert ret >= -200


# ------------------------------------------------------------------------- phases per step
@pytest.mark.parametrize("cls", [SAC, TD3])
def test_phases_per_step_changes_nothing_but_speed(cls):
    """Grouping collection phases into one Lightning training step runs the same collection and the
    same updates in the same order (each phase collected after the previous phase's updates), and
    stops at the same env step when the budget ends inside a group: 108 env steps in the first phase
    (learning_starts 100, then 4 vector steps of 2 envs), 8 in each next; the 7th, at 156 >= 150, is
    the 3rd of the second group of 4."""
    runs = []
    for k in (1, 4):
        L.seed_everything(0)
        model = tiny(cls, total_env_steps=150, env_steps_per_epoch=80, phases_per_step=k)
        trainer = quick_trainer()
        trainer.fit(model)
        params = [p.detach().clone() for p in model.parameters()]
        runs.append((params, model.env_steps, model.num_updates, trainer.global_step))
    (params_1, *counts_1), (params_4, *counts_4) = runs
    assert counts_1 == counts_4 and counts_1[0] == 156
    for x, y in zip(params_1, params_4, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_each_phase_is_collected_after_the_previous_phases_updates():
    seen = []  # (env steps, updates) right after each phase was collected
    model = tiny(TD3, phases_per_step=3, total_env_steps=200, env_steps_per_epoch=200)
    collect = model.collect_phase

    def recording(act):
        collected = collect(act)
        seen.append((model.env_steps, model.num_updates))
        return collected

    model.collect_phase = recording
    quick_trainer().fit(model)
    steps, updates = zip(*seen, strict=True)
    assert list(updates) == [3 * i for i in range(len(seen))]  # gradient_steps=3 after every phase
    assert [b - a for a, b in zip(steps, steps[1:], strict=False)] == [8] * (len(seen) - 1)  # 4 x 2 envs
