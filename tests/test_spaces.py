"""What users bring: every common gymnasium space trains, or is refused with the reason and the
algorithm that handles it. Observations: Discrete (one-hot), Tuple and Dict (flattened; a CNN per
image part), images in either layout and stacked, scalars (as 1-vectors); Graph and Sequence refused.
Actions: Discrete with a start, MultiDiscrete (factored categorical), MultiBinary (Bernoulli), Box of any
shape (flat for the networks)."""

from __future__ import annotations

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import A2C, DQN, PPO, REINFORCE, SAC, EnvConfig, RecurrentPPO, ReplayConfig, RunConfig
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation import make_eval_env
from rl_lightning.networks.cnn import MinAtarCNN, NatureCNN
from rl_lightning.networks.encoders import MultiInputEncoder
from rl_lightning.networks.policies import BernoulliHead, CategoricalHead, MultiCategoricalHead
from tests.helpers import quick_trainer, register

TINY = RunConfig(total_env_steps=256, env_steps_per_epoch=256, eval_episodes=2)


def fit(model, **trainer_kwargs) -> float:
    trainer = quick_trainer(**trainer_kwargs)
    trainer.fit(model)
    return float(trainer.callback_metrics["val/episode_return"])


class ImageEnv(gym.Env):
    """uint8 frames (channels last unless ``shape`` says otherwise); reward for action 1 when the
    frame is bright. 8-step episodes."""

    def __init__(self, shape=(40, 40, 3), box_actions: bool = False):
        self.shape = tuple(shape)
        self.observation_space = gym.spaces.Box(0, 255, self.shape, np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if box_actions else gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.bright = 0, bool(self.np_random.integers(2))
        return self._obs(), {}

    def _obs(self):
        return np.full(self.shape, 200 if self.bright else 20, np.uint8)

    def step(self, action):
        self.t += 1
        reward = float((int(np.asarray(action).ravel()[0] > 0.5)) == self.bright)
        self.bright = bool(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= 8, {}


class DictImageEnv(ImageEnv):
    """A Dict observation: an image and a vector (a robot's camera and its joint readings)."""

    def __init__(self):
        super().__init__()
        image = self.observation_space
        self.observation_space = gym.spaces.Dict({"camera": image, "joints": gym.spaces.Box(-1, 1, (3,), np.float32)})

    def _obs(self):
        return {"camera": super()._obs(), "joints": np.full(3, 0.5 if self.bright else -0.5, np.float32)}


class StartedDiscreteEnv(gym.Env):
    """Actions are -1, 0 or 1 (``Discrete(3, start=-1)``); any other value fails. Reward for 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert int(action) in (-1, 0, 1), f"not an action of Discrete(3, start=-1): {action!r}"
        self.t += 1
        return np.zeros(2, np.float32), float(int(action) == 1), False, self.t >= 10, {}


class ShapedBoxEnv(gym.Env):
    """A scalar observation and ``[2, 3]`` actions (or ``observation_space``, ``action_space`` given); an
    action of any other shape fails. Reward: minus the actions' mean magnitude."""

    def __init__(self, observation_space=None, action_space=None):
        self.observation_space = observation_space or gym.spaces.Box(-1.0, 1.0, (), np.float32)
        self.action_space = action_space or gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        shape = self.action_space.shape
        assert np.shape(action) == shape, f"actions of shape {np.shape(action)}, not {shape}"
        self.t += 1
        obs = self.observation_space.sample()
        return obs, -float(np.abs(action).mean()), False, self.t >= 10, {}


register("test/Image-v0", ImageEnv)
register("test/DictImage-v0", DictImageEnv)
register("test/StartedDiscrete-v0", StartedDiscreteEnv)
register("test/ShapedBox-v0", ShapedBoxEnv)


# -------------------------------------------------------------------------------------- observations
def test_discrete_observations_are_one_hot_and_ppo_solves_non_slippery_frozenlake():
    L.seed_everything(0)
    model = PPO(
        env=EnvConfig("FrozenLake-v1", num_envs=4, env_kwargs={"is_slippery": False}),
        run=RunConfig(total_env_steps=20_000, env_steps_per_epoch=20_000, eval_episodes=5),
        num_steps=64,
    )
    assert fit(model) == 1.0  # random: ~0.01
    assert isinstance(model.observation_space, gym.spaces.Discrete)  # the networks see the structure
    assert model.agent.actor_body[0].in_features == 16  # ... and read its one-hot encoding
    one_hot = torch.eye(16)[[0, 5]]
    assert model(one_hot).shape == (2,)


def test_tuple_observations_train_ppo_and_dqn():
    for model in (
        PPO(env=EnvConfig("Blackjack-v1", num_envs=4), run=TINY, num_steps=32),
        DQN(env=EnvConfig("Blackjack-v1", num_envs=2), run=TINY, replay=ReplayConfig(learning_starts=64)),
    ):
        fit(model)
        assert isinstance(model.observation_space, gym.spaces.Tuple) and model.env_steps >= 256


@pytest.mark.parametrize("cls", [PPO, DQN])
def test_dict_observations_with_an_image_get_a_cnn_for_it_and_the_rest_concatenated(cls):
    extra = {"replay": ReplayConfig(learning_starts=64, buffer_size=1000)} if cls is DQN else {"num_steps": 32}
    model = cls(env=EnvConfig("test/DictImage-v0", num_envs=2), run=TINY, **extra)
    fit(model)
    encoder = model.agent.encoder if cls is PPO else model.q_net.torso
    assert isinstance(encoder, MultiInputEncoder) and len(encoder.cnns) == 1
    assert encoder.features_dim == 512 + 3


@pytest.mark.parametrize(
    "env_id, env_kwargs",
    [
        ("test/DictImage-v0", {}),  # Dict with an image: a CNN for it, then the memory
        ("test/Image-v0", {"box_actions": True}),  # images, Gaussian actions
        ("Blackjack-v1", {}),  # Tuple of Discretes
        ("rl_lightning.envs.examples:GridReach-v0", {"multi_discrete": True}),  # Dict, factored categorical
        ("test/MultiBinary-v0", {}),  # Bernoulli actions
    ],
)
def test_recurrent_ppo_takes_the_spaces_ppo_takes(env_id, env_kwargs):
    model = RecurrentPPO(
        env=EnvConfig(env_id, num_envs=2, env_kwargs=env_kwargs), run=TINY, num_steps=32, hidden_size=16
    )
    fit(model)
    assert model.env_steps >= 256 and model.experience.memory.shape == (2, 4, 16)
    assert (model.agent.encoder is not None) == ("Image" in env_id)  # a CNN before the memory
    envs = make_eval_env(model.env_config, 1)
    obs = torch.as_tensor(envs.reset(seed=0)[0])  # flattened structures, as the exported policy takes them
    actions, memory = model.export_policy().module()(obs, model.initial_memory(1))
    assert envs.action_space.contains(actions.numpy().astype(envs.action_space.dtype)) and memory.shape == (1, 4, 16)
    envs.close()


def test_multi_input_encoder_reads_the_flattened_dict_as_its_parts():
    space = DictImageEnv().observation_space
    encoder = MultiInputEncoder(space)
    obs = space.sample()
    flat = torch.as_tensor(gym.spaces.flatten(space, obs), dtype=torch.float32)[None]
    features = encoder(flat)
    expected_image = encoder.cnns[0](torch.as_tensor(obs["camera"])[None])
    torch.testing.assert_close(features[:, :512], expected_image)
    torch.testing.assert_close(features[:, 512:], torch.as_tensor(obs["joints"])[None])


def test_channels_last_images_are_read_as_their_channels_first_transpose():
    hwc = NatureCNN(gym.spaces.Box(0, 255, (40, 48, 3), np.uint8))
    chw = NatureCNN(gym.spaces.Box(0, 255, (3, 40, 48), np.uint8))
    chw.load_state_dict(hwc.state_dict())
    frames = torch.randint(0, 256, (2, 40, 48, 3), dtype=torch.uint8)
    torch.testing.assert_close(hwc(frames), chw(frames.permute(0, 3, 1, 2)))
    stacked = NatureCNN(gym.spaces.Box(0, 255, (4, 40, 48, 3), np.uint8))  # FrameStackObservation of RGB
    assert stacked.cnn[0].in_channels == 12 and stacked(torch.zeros(2, 4, 40, 48, 3, dtype=torch.uint8)).shape == (
        2,
        512,
    )


def test_rgb_frames_stacked_through_env_wrappers_train_ppo():
    stack = {"class_path": "gymnasium.wrappers.FrameStackObservation", "init_args": {"stack_size": 3}}
    model = PPO(env=EnvConfig("test/Image-v0", num_envs=2, wrappers=[stack]), run=TINY, num_steps=32)
    fit(model)
    assert model.observation_space.shape == (3, 40, 40, 3) and model.agent.encoder.cnn[0].in_channels == 9


def test_images_smaller_than_the_nature_cnn_sees_get_the_minatar_cnn_and_tinier_ones_are_refused():
    model = PPO(env=EnvConfig("test/Image-v0", num_envs=1, env_kwargs={"shape": (20, 20, 3)}), run=TINY)
    fit(model)
    assert isinstance(model.agent.encoder, MinAtarCNN) and model.agent.encoder.cnn[0].in_channels == 3
    with pytest.raises(ConfigError, match=r"smaller than the MinAtar CNN's 3x3.*FlattenObservation"):
        fit(PPO(env=EnvConfig("test/Image-v0", num_envs=1, env_kwargs={"shape": (2, 2, 3)}), run=TINY))


def test_algorithms_without_an_image_encoder_refuse_images_naming_those_with_one():
    model = SAC(env=EnvConfig("test/Image-v0", num_envs=1, env_kwargs={"box_actions": True}), run=TINY)
    with pytest.raises(ConfigError, match=r"SAC has no image encoder.*Use A2C, C51, DQN, PPO, PQN, QRDQN, REINFORCE"):
        fit(model)


# ------------------------------------------------------------------------------------------- actions
def test_factored_categorical_is_the_sum_of_its_parts():
    head = MultiCategoricalHead(5, [3, 2])
    features = torch.randn(4, 5)
    logits = head(features)
    actions = head.sample(logits)
    assert actions.shape == (4, 2) and (actions[:, 0] < 3).all() and (actions[:, 1] < 2).all()
    logp, entropy = head.log_prob_entropy(logits, actions)
    parts = [torch.distributions.Categorical(logits=lg) for lg in logits]
    torch.testing.assert_close(logp, sum(d.log_prob(a) for d, a in zip(parts, actions.unbind(-1), strict=True)))
    torch.testing.assert_close(entropy, sum(d.entropy() for d in parts))
    assert torch.equal(head.mode(logits), torch.stack([lg.argmax(-1) for lg in logits], -1))


def test_bernoulli_head_matches_torch_distributions():
    head = BernoulliHead(5, 3)
    logits = head(torch.randn(6, 5)) * 10
    actions = head.sample(logits)
    dist = torch.distributions.Bernoulli(logits=logits)
    logp, entropy = head.log_prob_entropy(logits, actions)
    torch.testing.assert_close(logp, dist.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))
    assert torch.equal(head.mode(logits), (logits > 0).float())


@pytest.mark.parametrize("cls", [PPO, A2C, REINFORCE])
def test_multi_binary_actions_reach_the_env_as_integer_bits(cls):
    extra = {"num_steps": 20} if cls is not A2C else {}
    model = cls(env=EnvConfig("test/MultiBinary-v0", num_envs=2), run=TINY, **extra)
    fit(model)  # the env asserts every action it gets, in training and in evaluation
    exported = model.export_policy().module()(torch.zeros(3, 2))
    assert exported.shape == (3, 2) and exported.dtype == torch.long


def test_ppo_learns_multi_discrete_grid_reach():
    L.seed_everything(0)
    model = PPO(
        env=EnvConfig("rl_lightning.envs.examples:GridReach-v0", num_envs=8, env_kwargs={"multi_discrete": True}),
        run=RunConfig(total_env_steps=50_000, env_steps_per_epoch=50_000, eval_episodes=20),
        num_steps=64,
        learning_rate=1e-3,
        ent_coef=0.01,
    )
    assert fit(model) > 0.7  # random: about 0.0; solved: about 0.95
    assert isinstance(model.agent.head, MultiCategoricalHead)


@pytest.mark.parametrize("cls", [PPO, DQN])
def test_discrete_actions_with_a_start_reach_the_env_shifted(cls):
    extra = {"replay": ReplayConfig(learning_starts=64)} if cls is DQN else {"num_steps": 32}
    model = cls(env=EnvConfig("test/StartedDiscrete-v0", num_envs=2), run=TINY, **extra)
    fit(model)  # the env asserts -1 <= action <= 1
    assert set(model.act_in_env(torch.zeros(4, 2)).tolist()) <= {-1, 0, 1}


@pytest.mark.parametrize("cls", [PPO, SAC])
def test_scalar_observations_and_matrix_actions_reach_the_networks_flat_and_the_env_in_its_shapes(cls):
    extra = {"replay": ReplayConfig(learning_starts=64)} if cls is SAC else {"num_steps": 32}
    model = cls(env=EnvConfig("test/ShapedBox-v0", num_envs=2), run=TINY, **extra)
    assert np.isfinite(fit(model))  # the env asserts [2, 3] actions, in training and in evaluation
    assert model.observation_space.shape == (1,) and model.action_space.shape == (6,)


def test_scalar_actions_train_and_a_dict_observation_keeps_its_structure_under_the_actions_wrapper():
    scalar_actions = EnvConfig("test/ShapedBox-v0", env_kwargs={"action_space": gym.spaces.Box(-2.0, 2.0, ())})
    fit(PPO(env=scalar_actions, run=TINY, num_steps=32))
    image_and_vector = gym.spaces.Dict(
        {"camera": gym.spaces.Box(0, 255, (40, 40, 3), np.uint8), "joints": gym.spaces.Box(-1, 1, (3,))}
    )
    model = PPO(
        env=EnvConfig("test/ShapedBox-v0", env_kwargs={"observation_space": image_and_vector}), run=TINY, num_steps=32
    )
    fit(model)  # the structure of the observations survives the actions' wrapper
    assert isinstance(model.agent.encoder, MultiInputEncoder) and len(model.agent.encoder.cnns) == 1


@pytest.mark.parametrize(
    "space", [gym.spaces.Sequence(gym.spaces.Box(-1, 1, (2,))), gym.spaces.Graph(gym.spaces.Box(-1, 1, (2,)), None)]
)
def test_observations_of_no_fixed_size_are_refused_with_the_way_on(space):
    env = EnvConfig("test/ShapedBox-v0", env_kwargs={"observation_space": space})
    with pytest.raises(ConfigError, match=r"cannot be flattened into tensors of a fixed size\. Add a wrapper"):
        fit(PPO(env=env, run=TINY))


def test_dqn_refuses_multi_discrete_naming_the_algorithms_that_handle_it():
    env = EnvConfig("rl_lightning.envs.examples:GridReach-v0", env_kwargs={"multi_discrete": True})
    with pytest.raises(
        ConfigError, match=r"DQN cannot handle .*MultiDiscrete.*use A2C, PPO, REINFORCE, RecurrentPPO\."
    ):
        fit(DQN(env=env, run=TINY))


def test_categorical_head_is_unchanged():
    head = CategoricalHead(4, 3)
    logits = head(torch.randn(2, 4))
    torch.testing.assert_close(
        head.log_prob(logits, torch.tensor([0, 2])), torch.log_softmax(logits, -1)[[0, 1], [0, 2]]
    )
