"""What differs between env backends is decided in ``envs/`` and read from the env, not from its id:
frame stacking, whether steps stay on the device, the evaluation env, the run's name."""

import pytest
import torch

from rl_lightning import DQN, EnvConfig, ReplayConfig, RunConfig
from rl_lightning.envs.backends import BACKENDS, backend_of
from rl_lightning.envs.gymnasium_backend import GymnasiumBackend
from rl_lightning.envs.make import backend_tag, env_device, eval_env_config, make_vector_env, steps_on_device
from tests.helpers import quick_trainer

STACK3 = {"class_path": "gymnasium.wrappers.FrameStackObservation", "init_args": {"stack_size": 3}}


@pytest.mark.parametrize(
    ("config", "stack"),
    [
        (EnvConfig("CartPole-v1"), 1),
        (EnvConfig("CartPole-v1", wrappers=[STACK3]), 3),  # a user's frame stack, from the config
        (EnvConfig("CartPole-v1", wrappers=[STACK3, "gymnasium.wrappers.FlattenObservation"]), 1),  # not frames
        (EnvConfig("CartPole-v1", backend="torch"), 1),
    ],
)
def test_the_vector_env_says_how_many_frames_its_observations_stack(config, stack):
    envs = make_vector_env(config, num_envs=2)
    try:
        assert envs.frame_stack == stack
    finally:
        envs.close()


def test_atari_frames_are_stacked_four_deep_whatever_the_id():
    pytest.importorskip("ale_py")
    envs = make_vector_env(EnvConfig("ALE/Pong-v5"), num_envs=1)
    try:
        assert envs.frame_stack == 4 and envs.single_observation_space.shape == (4, 84, 84)
    finally:
        envs.close()


def test_dqn_stores_a_stacked_env_frame_by_frame():
    """DQN's replay buffer takes the stack from the env (a user's FrameStackObservation too), so it keeps
    one frame per transition, not the whole stack twice."""
    model = DQN(
        env=EnvConfig("CartPole-v1", num_envs=2, seed=0, wrappers=[STACK3]),
        run=RunConfig(total_env_steps=256, env_steps_per_epoch=256, eval_episodes=1),
        replay=ReplayConfig(buffer_size=500, batch_size=16, learning_starts=64),
        hidden_sizes=(16,),
    )
    quick_trainer().fit(model)
    buffer = model.replay.buffer
    assert buffer.frame_stack == 3 and tuple(buffer.frames.shape[2:]) == (4,)  # one CartPole state per row
    batch = model.replay.sample(8)
    assert batch.obs.shape == (8, 3, 4) and batch.next_obs.shape == (8, 3, 4)


def test_backend_specifics_live_in_envs():
    torch_envs = make_vector_env(EnvConfig("CartPole-v1", backend="torch"), num_envs=2)
    gym_envs = make_vector_env(EnvConfig("CartPole-v1"), num_envs=2)
    try:
        assert steps_on_device(torch_envs) and not steps_on_device(gym_envs)
        assert isinstance(torch_envs.reset(seed=0)[0], torch.Tensor)
    finally:
        torch_envs.close()
        gym_envs.close()
    assert eval_env_config(EnvConfig("CartPole-v1", backend="torch"), None).backend == "gymnasium"
    assert eval_env_config(EnvConfig("CartPole-v1", backend="envpool"), None).backend == "envpool"
    assert eval_env_config(EnvConfig("CartPole-v1", backend="envpool"), "rgb_array").backend == "gymnasium"
    assert [backend_tag(b) for b in (None, "gymnasium", "torch", "envpool")] == ["", "", "_torch", "_envpool"]


def test_a_new_backend_is_one_class_and_one_registry_entry(monkeypatch):
    """Registered, a backend is built, checked, evaluated, named and trained on with no other change."""

    class Recording(GymnasiumBackend):
        """gymnasium's envs under another name, recording what it was asked to build."""

        name = "recording"
        builds = []

        def make(self, config, build):
            self.builds.append(build)
            return super().make(config, build)

        def evaluation_backend(self, render_mode):
            return "gymnasium"

    monkeypatch.setitem(BACKENDS, "recording", Recording())
    config = EnvConfig("CartPole-v1", num_envs=2, seed=0, backend="recording")
    config.check()
    envs = make_vector_env(config)
    try:
        assert envs.env_backend == "recording" and backend_of(envs) is BACKENDS["recording"]
        assert not steps_on_device(envs) and env_device(envs) == torch.device("cpu")
    finally:
        envs.close()
    assert eval_env_config(config, None).backend == "gymnasium" and backend_tag("recording") == "_recording"
    model = DQN(
        env=config,
        run=RunConfig(total_env_steps=128, env_steps_per_epoch=128, eval_episodes=1),
        replay=ReplayConfig(buffer_size=500, batch_size=16, learning_starts=64),
        hidden_sizes=(16,),
    )
    quick_trainer().fit(model)
    # this test's env and the fit's (evaluation plays gymnasium's: evaluation_backend)
    assert model.env_steps == 128 and [b.training for b in Recording.builds] == [True, True]


def test_an_unknown_backend_names_the_registered_ones():
    with pytest.raises(Exception, match="env.backend must be 'gymnasium', 'torch' or 'envpool', got 'jax'"):
        EnvConfig("CartPole-v1", backend="jax").check()
