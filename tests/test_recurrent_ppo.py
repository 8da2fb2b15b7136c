"""RecurrentPPO: memories reset at episode starts, sequence minibatches replay collection exactly, exact
resume, exported ``(obs, memory) -> (actions, memory)`` programs, evaluation memories, refusals; the
MaskVelocity wrapper; and the envs of the memory configs (POPGym's RepeatFirst, Pendulum with a frame stack)."""

from __future__ import annotations

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
import yaml

from rl_lightning import PPO, EnvConfig, RecurrentPPO
from rl_lightning.algorithms.recurrent_ppo import RecurrentActorCritic, reset_where
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.envs.make import make_vector_env
from rl_lightning.envs.wrappers import MaskVelocity
from rl_lightning.errors import ConfigError
from tests.helpers import ROOT, Corridor, build, quick_trainer

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def agent(recurrent: str = "lstm", shared_memory: bool = False) -> RecurrentActorCritic:
    torch.manual_seed(0)
    return RecurrentActorCritic(BOX, gym.spaces.Discrete(2), recurrent, 8, shared_memory, (16,))


def step_by_step(net: RecurrentActorCritic, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor):
    """The reference: one step at a time, ``state * (1 - start)`` before each."""
    actor, critic = [], []
    for t in range(len(x)):
        a, c, state = net._run(x[t : t + 1], reset_where(state, starts[t]))
        actor.append(a)
        critic.append(c)
    return torch.cat(actor), torch.cat(critic), state


def test_memory_resets_at_an_episode_start_inside_a_sequence():
    net = agent("gru")
    x = torch.randn(5, 2, 3)
    starts = torch.zeros(5, 2, dtype=torch.bool)
    starts[3, 0] = True  # sub-env 0 starts an episode at step 3; sub-env 1 runs on
    state = torch.randn(2, *net.initial_state(1).shape[1:])
    actor, critic = net.sequence(x, state, starts)
    # Sub-env 0 from step 3 on is what a fresh episode from zeros gives on x[3:]: the past is forgotten.
    fresh_actor, fresh_critic, _ = net._run(x[3:, :1], net.initial_state(1))
    torch.testing.assert_close(actor[3:, 0], fresh_actor[:, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(critic[3:, 0], fresh_critic[:, 0], rtol=0, atol=1e-6)
    # Sub-env 1 is the uninterrupted run from its state.
    whole, _, _ = net._run(x[:, 1:], state[1:])
    torch.testing.assert_close(actor[:, 1], whole[:, 0], rtol=0, atol=1e-6)
    # Without the reset sub-env 0's output would differ (the test can fail).
    assert not torch.allclose(net._run(x[:, :1], state[:1])[0][3:, 0], fresh_actor[:, 0], atol=1e-3)


@pytest.mark.parametrize("recurrent,shared", [("lstm", False), ("lstm", True), ("gru", False)])
def test_sequence_forward_equals_the_step_by_step_forward(recurrent, shared):
    net = agent(recurrent, shared)
    torch.manual_seed(1)
    x = torch.randn(12, 4, 3)
    starts = torch.rand(12, 4) < 0.2
    starts[0, :2] = True  # two sub-envs start an episode at the first step, two go on from their state
    starts[1:, 3] = False  # and one runs the whole sequence in one piece
    state = torch.randn(4, *net.initial_state(1).shape[1:])
    got = net.sequence(x, state, starts)
    want = step_by_step(net, x, state, starts)[:2]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6)


def test_the_minibatch_loss_sees_what_collection_saw():
    """After a rollout, ``evaluate`` on the whole rollout (sequence minibatches from the stored start memory
    and episode starts) gives the log-probs and values collection stored, with episodes ending inside it."""
    L.seed_everything(0)
    model = build(RecurrentPPO, env=EnvConfig("CartPole-v1", num_envs=4, seed=0), num_steps=64, hidden_size=8)
    model.build_for_env()
    model.experience.start(make_vector_env(model.env_config), torch.device("cpu"), 0, 1, model.graphs)
    for _ in range(2):  # the second rollout starts from the memory the first left
        rollout = model.experience.collect(model.agent)
        side = model.experience
        assert side.episode_starts[1:].any(), "episodes must end inside the rollout for this test"
        with torch.no_grad():
            logprobs, _, values = model.agent.evaluate(
                rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1), side.episode_starts, side.start_memory
            )
        torch.testing.assert_close(logprobs.view(64, 4), rollout.logprobs, rtol=0, atol=1e-5)
        torch.testing.assert_close(values.view(64, 4), rollout.values, rtol=0, atol=1e-5)
    model.experience.stop()


def test_on_torch_envs_truncated_episodes_are_valued_under_their_own_memory():
    """env.backend torch (no host sync per step): a time-limit cut inside the rollout is bootstrapped from
    V(final observation) under the memory of the episode it ends, as step-by-step replay computes it (the
    final observation normalized as stored, with the statistics of its step); the sequence minibatches see
    what collection saw; and a fit runs."""
    L.seed_everything(0)
    env = EnvConfig("Pendulum-v1", num_envs=2, seed=0, backend="torch")
    model = build(RecurrentPPO, env=env, num_steps=256, hidden_size=8, num_minibatches=1, normalize_obs=True)
    model.build_for_env()
    model.experience.start(make_vector_env(model.env_config), torch.device("cpu"), 0, 1, model.graphs)
    rollout = model.experience.collect(model.agent)
    side = model.experience
    (cut,) = set(rollout.truncated.nonzero()[:, 0].tolist())  # step 199: Pendulum's 200-step limit
    with torch.no_grad():
        logprobs, _, values = model.agent.evaluate(
            rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1), side.episode_starts, side.start_memory
        )
        torch.testing.assert_close(values.view(256, 2), rollout.values, rtol=0, atol=1e-5)
        torch.testing.assert_close(logprobs.view(256, 2), rollout.logprobs, rtol=0, atol=1e-5)
        x = model.agent._encode(rollout.obs.flatten(0, 1)).view(256, 2, -1)
        *_, memory = step_by_step(model.agent, x[: cut + 1], side.start_memory, side.episode_starts[: cut + 1])
        final_obs = model.experience.collector.final_obs[cut]
        expected = model.agent.value(final_obs, memory)
    torch.testing.assert_close(rollout.next_values[cut], expected, rtol=0, atol=1e-5)
    assert side.episode_starts[cut + 1].all() and not side.episode_starts[1:cut].any()
    model.experience.stop()
    model = build(RecurrentPPO, env=env, num_steps=8, num_minibatches=1, total_env_steps=64, hidden_size=8)
    quick_trainer().fit(model)
    assert model.env_steps == 64


class TimelessCorridor(Corridor):
    """The corridor of the resume tests with its clock hidden (16-step episodes, reward for moving right)."""

    def _obs(self):
        return np.array([self.x, 0.0], np.float32)


gym.register("test/RecurrentCorridor-v0", entry_point=TimelessCorridor)


def recurrent(total: int) -> RecurrentPPO:
    return build(
        RecurrentPPO,
        env=EnvConfig("test/RecurrentCorridor-v0", num_envs=4, seed=0),
        total_env_steps=total,
        num_steps=16,
        num_minibatches=2,
        update_epochs=2,
        env_steps_per_epoch=256,
        eval_episodes=2,
        learning_rate=1e-2,
        hidden_size=8,
    )


@pytest.mark.parametrize("recurrent", ["lstm", "gru"])
def test_a_memory_learns_to_recall_a_cue_that_a_stateless_policy_cannot(recurrent):
    """A cheap learning check: a bit shown at the reset and asked for three steps later, two distractors
    between (tests.helpers.RecallFirstEnv: a memory scores 1, a stateless policy 0.5 on average). Fails
    when the memory is reset late (after the cue) or lost between steps."""
    env = EnvConfig("tests.helpers:RecallFirstEnv", num_envs=16, seed=0)
    run = dict(total_env_steps=2048, env_steps_per_epoch=2048, eval_episodes=20)  # learned by 1k on seeds 0-2
    common = dict(env=env, run=run, num_steps=8, num_minibatches=2, learning_rate=3e-3, gamma=0.5, anneal_lr=False)
    L.seed_everything(0)
    memory = RecurrentPPO(recurrent=recurrent, hidden_size=16, hidden_sizes=(16,), **common)
    trainer = quick_trainer()
    trainer.fit(memory)
    assert float(trainer.callback_metrics["val/episode_return"]) == 1.0
    L.seed_everything(0)
    stateless = PPO(hidden_sizes=(16,), **common)
    trainer = quick_trainer()
    trainer.fit(stateless)
    assert float(trainer.callback_metrics["val/episode_return"]) < 0.9  # one answer for every cue: ~0.5


def test_resume_is_bit_exact_when_episodes_end_at_the_checkpoint(tmp_path):
    L.seed_everything(0)
    straight = recurrent(768)
    quick_trainer().fit(straight)

    L.seed_everything(0)
    interrupted = recurrent(768)
    quick_trainer(max_epochs=2, callbacks=[LastCheckpoint(dirpath=tmp_path)], enable_checkpointing=True).fit(
        interrupted
    )
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)
    torch.testing.assert_close(checkpoint["rl_lightning"]["replay_buffer"]["memory"], interrupted.experience.memory)
    torch.manual_seed(123)
    resumed = recurrent(768)
    quick_trainer().fit(resumed, ckpt_path=tmp_path / "last.ckpt")

    assert resumed.env_steps == straight.env_steps == 768
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(straight.experience.memory, resumed.experience.memory, rtol=0, atol=0)


def test_exported_policy_carries_the_memory_like_evaluation(tmp_path):
    model = build(RecurrentPPO, env=EnvConfig("CartPole-v1"), hidden_size=8, normalize_obs=True)
    model.build_for_env()
    model.obs_rms.mean += 0.5
    program = model.export_policy(tmp_path / "policy.pt2")
    policy = torch.export.load(tmp_path / "policy.pt2").module()
    torch.manual_seed(0)
    obs = torch.randn(6, 5, 4)  # 6 steps of 5 envs (not the export's batch size)
    memory = model.initial_memory(5)
    exported_memory = torch.zeros_like(memory)  # the documented first memory
    model.eval_memory = None
    for t in range(6):
        want = model.act_in_env(obs[t])  # evaluation's path, its memory carried by the module
        actions, exported_memory = policy(obs[t], exported_memory)
        torch.testing.assert_close(actions, want)
        expected, memory = model.act_in_env(obs[t], memory)
        torch.testing.assert_close(expected, want)
    torch.testing.assert_close(exported_memory, model.eval_memory)
    assert not torch.equal(exported_memory, torch.zeros_like(exported_memory))
    assert program is not None


def test_evaluation_starts_every_episode_from_zero_memory():
    L.seed_everything(0)
    model = build(RecurrentPPO, env=EnvConfig("CartPole-v1", seed=0), hidden_size=8)
    model.build_for_env()
    first = model.play_episodes([1, 2, 3])
    model.eval_memory = torch.randn(3, *model.initial_memory(1).shape[1:]) * 10  # stale memory of other episodes
    again = model.play_episodes([1, 2, 3])
    np.testing.assert_array_equal(first[0], again[0])
    assert model.eval_memory is None
    # forward carries the memory between calls: the same observation twice acts from different memories
    obs = torch.ones(3, 4)
    model(obs)
    after_one = model.eval_memory.clone()
    model(obs)
    assert not torch.equal(model.eval_memory, after_one)


def test_refusals_name_the_way_forward():
    with pytest.raises(ConfigError, match="num_minibatches=3 must divide env.num_envs=4"):
        build(RecurrentPPO, env=EnvConfig("CartPole-v1", num_envs=4), num_steps=6, num_minibatches=3)
    with pytest.raises(ConfigError, match="recurrent"):
        build(RecurrentPPO, env=EnvConfig("CartPole-v1"), recurrent="rnn")
    model = build(RecurrentPPO, env=EnvConfig("CartPole-v1"))
    with pytest.raises(ConfigError, match="CUDA graphs"):
        model.enable_cuda_graphs()
    with pytest.raises(ConfigError, match="compile"):
        model.compile_networks()


def test_mask_velocity_zeroes_or_removes_the_velocities():
    env = MaskVelocity(gym.make("CartPole-v1"))
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(1)
    assert obs[1] == 0 and obs[3] == 0 and obs[0] != 0 and obs[2] != 0
    removed = MaskVelocity(gym.make("Pendulum-v1"), remove=True)
    assert removed.observation_space.shape == (2,)
    full, _ = gym.make("Pendulum-v1").reset(seed=0)
    np.testing.assert_array_equal(removed.reset(seed=0)[0], full[:2])  # cos, sin; the angular velocity gone
    with pytest.raises(ValueError, match="Acrobot"):
        MaskVelocity(gym.make("Acrobot-v1"))


def test_mask_velocity_from_a_config():
    model = build(
        PPO, EnvConfig("CartPole-v1", num_envs=2, wrappers=["rl_lightning.envs.wrappers.MaskVelocity"]), num_steps=8
    )
    envs = make_vector_env(model.env_config)
    obs, _ = envs.reset(seed=0)
    obs, *_ = envs.step(np.array([1, 1]))
    assert (obs[:, [1, 3]] == 0).all()
    envs.close()


def config_env(name: str) -> gym.vector.VectorEnv:
    """The vector env of ``configs/<name>.yaml`` (its ``env`` section, as the CLI builds it)."""
    env = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["model"]["init_args"]["env"]
    return make_vector_env(EnvConfig(**env))


def test_repeat_first_pays_a_memory_of_the_first_card_and_chance_without_one():
    """POPGym's RepeatFirstEasy as configs/{recurrent_ppo,ppo}/repeat_first.yaml build it: remembering the
    first observation of each episode scores 1.0 (the maximum), guessing scores about -0.5 (chance)."""
    pytest.importorskip("popgym", reason="POPGym configs need the memory extra")
    assert (
        yaml.safe_load((ROOT / "configs/ppo/repeat_first.yaml").read_text())["model"]["init_args"]["env"]
        == (yaml.safe_load((ROOT / "configs/recurrent_ppo/repeat_first.yaml").read_text())["model"]["init_args"]["env"])
    )
    envs = config_env("recurrent_ppo/repeat_first")
    n = envs.num_envs
    assert envs.single_observation_space.shape == (4,)  # the suit, one-hot
    rng = np.random.default_rng(0)
    for policy, expected, tolerance in (("memory", 1.0, 1e-6), ("guess", -0.5, 0.1)):
        obs, _ = envs.reset(seed=0)
        first = obs.argmax(1)
        returns, done = np.zeros(n), np.zeros(n, dtype=bool)
        while not done.all():
            actions = first if policy == "memory" else rng.integers(0, 4, n)
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            returns += np.where(done, 0.0, rewards)
            done |= terminated | truncated
        assert abs(returns.mean() - expected) < tolerance, (policy, returns.mean())
    envs.close()


def test_pendulum_frame_stack_config_stacks_the_last_four_masked_observations():
    envs = config_env("ppo/pendulum_novel_stack4")
    assert envs.single_observation_space.shape == (4, 3)
    obs, _ = envs.reset(seed=0)
    np.testing.assert_array_equal(obs[:, 0], obs[:, 3])  # a new episode's stack: its first observation 4 times
    for _ in range(5):
        previous = obs
        obs, *_ = envs.step(np.zeros((envs.num_envs, 1), np.float32))
    np.testing.assert_array_equal(obs[:, :3], previous[:, 1:])  # shifted by one step, oldest first
    assert (obs[..., 2] == 0).all() and (obs[..., :2] != 0).any()  # the angular velocity zeroed everywhere
    envs.close()
