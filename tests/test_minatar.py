"""MinAtar (Young & Tian 2019): its gymnasium ids reached from a config, and the MinAtar CNN that reads its
10x10 boolean frames for DQN and the actor-critics alike."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning import DQN, PPO, EnvConfig
from rl_lightning.networks import MinAtarCNN, NatureCNN
from rl_lightning.networks.cnn import image_input
from rl_lightning.networks.encoders import image_encoder
from tests.helpers import build, quick_trainer

MINATAR_FRAMES = gym.spaces.Box(0, 1, (10, 10, 4), bool)  # MinAtar Breakout's observations


def fit(model):
    quick_trainer().fit(model)
    return model


def test_small_images_get_the_minatar_cnn_and_booleans_reach_it_as_floats():
    encoder = image_encoder(MINATAR_FRAMES, orthogonal_init=False)
    assert isinstance(encoder, MinAtarCNN) and encoder.features_dim == 128
    conv, linear = encoder.cnn[0], encoder.linear[0]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (4, 16, (3, 3), (1, 1))
    assert linear.in_features == 16 * 8 * 8  # no padding: 10x10 -> 8x8
    frames = torch.rand(5, 10, 10, 4) < 0.3
    features = encoder(frames)
    assert features.shape == (5, 128) and features.dtype == torch.float32
    torch.testing.assert_close(encoder(frames.float()), features)  # the collectors' float copies: not /255
    # channels-last: channel c of the frames is channel c of the convolution's input
    one = torch.zeros(1, 10, 10, 4, dtype=torch.bool)
    one[0, 4, 4, 2] = True
    only_channel_2 = nn.functional.conv2d(one.float().movedim(-1, 1), conv.weight, conv.bias)
    as_read = image_input(one, encoder.pixel_range, encoder.channels_last)
    torch.testing.assert_close(encoder.cnn[:2](as_read), torch.relu(only_channel_2))
    assert isinstance(image_encoder(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), False), NatureCNN)
    # Seaquest's 10 channels tie with the height: still channels-last
    assert image_encoder(gym.spaces.Box(0, 1, (10, 10, 10), bool), False).cnn[0].in_channels == 10


def test_minatar_dqn_and_ppo_train_a_few_steps_on_breakout():
    pytest.importorskip("minatar")
    env = EnvConfig("MinAtar/Breakout-v1", num_envs=2, seed=0)
    common = dict(env=env, total_env_steps=256, env_steps_per_epoch=128, eval_episodes=1)
    dqn = build(DQN, **common, buffer_size=500, batch_size=16, learning_starts=64, train_freq=4, gradient_steps=1)
    dqn = fit(dqn)
    assert isinstance(dqn.q_net.torso, MinAtarCNN) and dqn.replay.buffer.frames.dtype == torch.bool
    assert dqn.env_steps == 256
    ppo = fit(build(PPO, **common, num_steps=32))
    assert isinstance(ppo.agent.encoder, MinAtarCNN) and ppo.env_steps == 256


def test_a_minatar_id_without_minatar_is_refused_naming_the_package(monkeypatch):
    import sys

    from rl_lightning.envs.gymnasium_backend import GymnasiumBackend
    from rl_lightning.errors import ConfigError

    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    monkeypatch.setattr(gym.envs, "registry", {k: v for k, v in gym.envs.registry.items() if "MinAtar" not in k})
    with pytest.raises(ConfigError, match=r"'MinAtar/Breakout-v1' needs MinAtar: pip install minatar"):
        GymnasiumBackend().check_env_id("MinAtar/Breakout-v1")


@pytest.mark.parametrize("algo", ["c51", "qrdqn", "rainbow", "pqn"])
def test_a_seaquest_config_ends_the_episode_of_a_sub_that_never_dives(algo):
    """MinAtar Seaquest never ends an episode while the sub stays at the surface; an evaluation of a greedy
    policy that never dives ran forever. The configs cut episodes at 27,000 steps."""
    pytest.importorskip("minatar")
    import yaml

    from rl_lightning.evaluation import make_eval_env
    from tests.helpers import ROOT

    env = yaml.safe_load((ROOT / f"configs/{algo}/minatar_seaquest.yaml").read_text())["model"]["init_args"]["env"]
    envs = make_eval_env(EnvConfig(**{**env, "num_envs": 1}), 1)
    try:
        envs.reset(seed=0)
        steps, ended = 0, False
        while not ended and steps < 30_000:
            _, _, terminated, truncated, _ = envs.step(np.array([0]))  # no-op: the sub stays at the surface
            steps, ended = steps + 1, bool(terminated[0] or truncated[0])
    finally:
        envs.close()
    assert truncated[0] and not terminated[0] and steps == 27_000
