"""DQN: the target and loss (pure functions), the exploration schedule, the training loop's
shape, checkpoints and bad input."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQN, QRDQN, EnvConfig
from rl_lightning.algorithms.dqn import dqn_loss, dqn_target, linear_schedule
from rl_lightning.networks.q_networks import QNetwork
from tests.helpers import build, quick_trainer


def tiny_dqn(cls: type = DQN, **kw) -> DQN:
    args = dict(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=0),
        total_env_steps=400,
        buffer_size=1000,
        batch_size=16,
        learning_starts=100,
        train_freq=4,
        gradient_steps=2,
        target_network_frequency=50,
        hidden_sizes=(16,),
        env_steps_per_epoch=200,
        eval_episodes=2,
    )
    args.update(kw)
    return build(cls, **args)


def test_double_dqn_target_differs_from_vanilla_and_equals_the_formula():
    rewards, discounts = torch.tensor([1.0, 0.5]), torch.tensor([0.9, 0.9])
    terminated = torch.tensor([0.0, 1.0])
    next_q_target = torch.tensor([[1.0, 5.0, 2.0], [3.0, 0.0, 0.0]])
    next_q_online = torch.tensor([[4.0, 0.0, 1.0], [0.0, 9.0, 0.0]])  # argmax: action 0, action 1
    vanilla = dqn_target(rewards, discounts, terminated, next_q_target)
    double = dqn_target(rewards, discounts, terminated, next_q_target, next_q_online)
    # vanilla: r + 0.9 * max_a Q_target = 1 + 0.9 * 5; double: r + 0.9 * Q_target(s', argmax Q_online) = 1 + 0.9 * 1
    torch.testing.assert_close(vanilla, torch.tensor([1 + 0.9 * 5.0, 0.5]))
    torch.testing.assert_close(double, torch.tensor([1 + 0.9 * 1.0, 0.5]))  # terminated: no bootstrap


def test_dqn_loss_huber_mse_and_importance_weights():
    q, target, w = torch.tensor([0.0, 0.0, 0.0]), torch.tensor([0.5, 2.0, -3.0]), torch.tensor([1.0, 0.5, 2.0])
    huber, td = dqn_loss(q, target, w, "huber")
    # Huber (delta 1): 0.5 x^2 for |x| < 1, |x| - 0.5 otherwise
    torch.testing.assert_close(huber, torch.tensor((1.0 * 0.125 + 0.5 * 1.5 + 2.0 * 2.5) / 3))
    torch.testing.assert_close(td, torch.tensor([-0.5, -2.0, 3.0]))
    mse, _ = dqn_loss(q, target, w, "mse")
    torch.testing.assert_close(mse, torch.tensor((0.25 + 0.5 * 4 + 2.0 * 9) / 3))


def test_linear_epsilon_schedule():
    assert linear_schedule(1.0, 0.04, 8000, 0) == 1.0
    assert linear_schedule(1.0, 0.04, 8000, 4000) == pytest.approx(0.52)
    assert linear_schedule(1.0, 0.04, 8000, 8000) == pytest.approx(0.04)
    assert linear_schedule(1.0, 0.04, 8000, 50_000) == pytest.approx(0.04)
    assert linear_schedule(1.0, 0.04, 0, 0) == 0.04  # no decay phase


def test_dueling_head_centres_advantages():
    import gymnasium as gym
    import numpy as np

    net = QNetwork(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), (8,), dueling=True)
    obs = torch.randn(5, 4)
    features = net.torso(obs)
    # mean_a Q(s, a) = V(s) since the advantages are centred
    torch.testing.assert_close(net(obs).mean(-1), net.value(features).squeeze(-1))


def test_every_epoch_has_the_same_number_of_phases_including_warm_up():
    model = tiny_dqn()
    collected, epoch_ends = [], []
    original = model.collect_phase

    def recording(act):
        collected.append(original(act))
        return collected[-1]

    class EpochEnds(L.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            epoch_ends.append(len(collected))

    model.collect_phase = recording
    trainer = quick_trainer(callbacks=[EpochEnds()])
    trainer.fit(model)
    counts = [b - a for a, b in zip([0, *epoch_ends], epoch_ends, strict=False)]
    # 200 env steps per epoch / 8 per phase = 25 phases; the first also holds the 100-step warm-up.
    assert counts[:-1] == [25] * (len(counts) - 1) and counts[-1] <= 25
    assert collected[0] == 100 + 8 and set(collected[1:]) == {8}
    assert model.env_steps == sum(collected) >= 400
    assert trainer.global_step == 2 * len(collected)  # gradient_steps per phase
    assert model.epsilon < 1.0 and "val/episode_return" in trainer.callback_metrics


def test_target_network_is_updated_only_when_due():
    initial = []

    class Snapshot(L.Callback):
        def on_train_start(self, trainer, pl_module):
            initial.extend(p.detach().clone() for p in pl_module.q_net.parameters())

    model = tiny_dqn(target_network_frequency=10**9)  # never due
    quick_trainer(callbacks=[Snapshot()]).fit(model)
    assert all(torch.equal(a, b) for a, b in zip(initial, model.q_target.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(initial, model.q_net.parameters(), strict=True))

    model = tiny_dqn(target_network_frequency=8)  # due after every phase: a hard copy before its updates
    copied = []
    original = model.training_step

    def spy(batch, batch_idx):
        before = [p.detach().clone() for p in model.q_net.parameters()]
        original(batch, batch_idx)
        copied.append(all(torch.equal(a, b) for a, b in zip(before, model.q_target.parameters(), strict=True)))

    model.training_step = spy
    quick_trainer().fit(model)
    assert len(copied) > 10 and all(copied)


@pytest.mark.parametrize("cls", [DQN, QRDQN])
def test_anneal_lr_decays_the_learning_rate_linearly_over_the_budget_once_per_phase(cls):
    # The RL Zoo's lin_ schedules (QR-DQN LunarLander: lin_1.5e-3): SB3 sets the rate before each train()
    # from the env steps collected so far; here before each phase's updates, the same.
    model = tiny_dqn(cls, learning_rate=1e-3, anneal_lr=True)
    seen = []
    original = model.minibatch_update

    def spy(*args):
        seen.append((model.env_steps, model.optimizers().param_groups[0]["lr"]))
        return original(*args)

    model.minibatch_update = spy
    quick_trainer().fit(model)
    start = model.hparams.learning_rate
    assert len({steps for steps, _ in seen}) > 10
    for steps, lr in seen:
        assert lr == pytest.approx(start * max(0.0, 1 - steps / 400))  # the last phase may end past it
    constant = tiny_dqn(learning_rate=1e-3)  # the default: constant
    quick_trainer().fit(constant)
    assert constant.optimizers().param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize("kw", [{}, {"double_q": True}, {"prioritized_replay": True}], ids=["dqn", "double", "per"])
def test_uniform_replay_samples_a_phase_at_once_and_each_minibatch_gets_its_own_targets(kw):
    model = tiny_dqn(gradient_steps=8, **kw)
    quick_trainer().fit(model)
    rows_seen = []
    model.q_target.register_forward_hook(lambda module, args, out: rows_seen.append(args[0].shape[0]))
    pairs = list(model._minibatches(beta=0.4))
    # Uniform: one target-network forward over the 8 minibatches; prioritized: one per minibatch,
    # each sampled after the previous step's priority update.
    assert rows_seen == ([16] * 8 if kw.get("prioritized_replay") else [8 * 16])
    assert len(pairs) == 8 and not torch.equal(pairs[0][0].obs, pairs[1][0].obs)
    for batch, target in pairs:
        with torch.no_grad():
            next_q, online = model.q_target(batch.next_obs), model.q_net(batch.next_obs) if kw.get("double_q") else None
            expected = dqn_target(batch.rewards, batch.discounts, batch.terminated, next_q, online)
        assert batch.obs.shape[0] == 16
        torch.testing.assert_close(target, expected)


@pytest.mark.parametrize(
    "kw",
    [
        {"double_q": True},
        {"dueling": True},
        {"n_step": 3},
        {"prioritized_replay": True},
        {"loss": "mse", "max_grad_norm": None, "tau": 0.5},
    ],
    ids=["double", "dueling", "n_step", "per", "mse-polyak"],
)
def test_variants_train(kw):
    model = tiny_dqn(total_env_steps=200, **kw)
    trainer = quick_trainer()
    trainer.fit(model)
    assert trainer.global_step > 0 and model.env_steps >= 200


def test_same_seed_gives_identical_training():
    def run(seed):
        L.seed_everything(seed)
        model = tiny_dqn(env=EnvConfig("CartPole-v1", num_envs=2), total_env_steps=150)
        quick_trainer().fit(model)
        return [p.detach().clone() for p in model.q_net.parameters()]

    a, b, c = run(3), run(3), run(4)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_checkpoint_round_trips_replay_buffer_and_epsilon(tmp_path):
    trainer = quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True)
    first = tiny_dqn(save_replay_buffer=True)
    trainer.fit(first)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["rl_lightning"]
    assert saved["epsilon"] == first.epsilon < 1.0
    assert saved["env_steps"] == first.env_steps == 404  # 100 warm-up + 38 phases of 8

    resumed = tiny_dqn(total_env_steps=800, save_replay_buffer=True)
    at_resume = {}

    class Capture(L.Callback):
        def on_train_start(self, trainer, module):
            at_resume["epsilon"] = module.epsilon
            make_buffer = module.replay._make_buffer

            def capture(*args):  # the restored buffer, before the envs start (and end its episodes)
                buffer = make_buffer(*args)
                at_resume["state"] = buffer.state_dict()
                return buffer

            module.replay._make_buffer = capture

    quick_trainer(callbacks=[Capture()]).fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    assert at_resume["epsilon"] == saved["epsilon"]
    for name, value in saved["replay_buffer"].items():
        restored = at_resume["state"][name]
        if isinstance(value, str):  # the sampling RNG's state, kept as JSON text
            assert value == restored, name
        else:
            # Rows not yet written hold whatever memory the buffer got (NaN included): equal bit for bit.
            torch.testing.assert_close(
                torch.as_tensor(value), torch.as_tensor(restored), rtol=0, atol=0, equal_nan=True
            )
    # It continued from the restored buffer (no second warm-up): 404 -> 804 in phases of 8 env steps.
    assert resumed.env_steps == 804
    assert resumed.replay.buffer.num_adds == 804 // 2

    loaded = DQN.load_from_checkpoint(tmp_path / "last.ckpt")
    assert loaded(torch.zeros(3, 4)).shape == (3,)


def test_replay_buffer_is_left_out_of_checkpoints_by_default(tmp_path):
    trainer = quick_trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_checkpointing=True)
    trainer.fit(tiny_dqn(total_env_steps=200))
    state = torch.load(tmp_path / "last.ckpt", weights_only=True)["rl_lightning"]
    assert "replay_buffer" not in state and "epsilon" in state


def test_continuous_actions_fail_at_once_pointing_to_sac_td3_ddpg():
    model = tiny_dqn(env=EnvConfig("Pendulum-v1", num_envs=1))
    with pytest.raises(
        ValueError,
        match=r"DQN cannot handle the action space Box\(.*use "
        r"A2C, CrossQ, DDPG, PPO, REINFORCE, RecurrentPPO, SAC, TD3, TQC",
    ):
        quick_trainer().fit(model)
    assert model.env_steps == 0


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"gamma": 0.0}, "gamma"),
        ({"tau": 0.0}, "tau"),
        ({"train_freq": 0}, "train_freq"),
        ({"n_step": 0}, "n_step"),
        ({"end_e": 1.5}, "end_e"),
        ({"loss": "l1"}, "loss"),
        ({"batch_size": 2000}, "replay.buffer_size=1000 must be >= replay.batch_size=2000"),
        ({"learning_starts": -1}, "learning_starts"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_dqn(**kw)
