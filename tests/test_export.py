"""RLModule.export_policy: a trained policy runs with torch alone, acting exactly as evaluation does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import DQN, PPO, SAC, EnvConfig
from tests.helpers import build

# The deployed side: torch only; importing rl_lightning, gymnasium or lightning fails there.
RUN_EXPORTED = """
import json, sys, torch
for name in ("rl_lightning", "gymnasium", "lightning"):
    sys.modules[name] = None
cases = json.loads(sys.argv[1])
out = {}
for name, case in cases.items():
    policy = torch.export.load(case["path"]).module()
    obs = torch.tensor(case["obs"], dtype=getattr(torch, case["dtype"]))
    out[name] = policy(obs).tolist()
print(json.dumps(out))
"""


def built(model):
    model.build_for_env()
    return model.eval()


def test_exported_policies_act_like_evaluation_without_rl_lightning(tmp_path: Path) -> None:
    torch.manual_seed(0)
    normalized = built(build(PPO, EnvConfig("CartPole-v1"), normalize_obs=True))
    normalized.obs_rms.mean += 0.5  # statistics the exported policy must carry
    normalized.obs_rms.var *= 4.0
    gaussian = built(build(PPO, EnvConfig("Pendulum-v1")))
    with torch.no_grad():
        gaussian.agent.head.linear.bias.fill_(5.0)  # a mean beyond the bounds: evaluation clips it to 2
    models = {
        "ppo_normalized": normalized,
        "ppo_gaussian": gaussian,
        "dqn": built(build(DQN, EnvConfig("CartPole-v1"))),
        "sac": built(build(SAC, EnvConfig("Pendulum-v1"))),
        # Tuple and Dict observations: the policy takes them flattened, as the envs give them
        "ppo_tuple": built(build(PPO, EnvConfig("Blackjack-v1"))),
        "dqn_dict": built(build(DQN, EnvConfig("rl_lightning.envs.examples:GridReach-v0"))),
    }
    cases, expected = {}, {}
    for name, model in models.items():
        path = tmp_path / f"{name}.pt2"
        model.export_policy(path)
        space = model.observation_space
        if not isinstance(space, gym.spaces.Box):
            space = gym.spaces.flatten_space(space)
        obs = torch.as_tensor(np.stack([space.sample() for _ in range(5)]))  # not the export's batch size
        cases[name] = {"path": str(path), "obs": obs.tolist(), "dtype": str(obs.dtype).removeprefix("torch.")}
        with torch.no_grad():
            expected[name] = model.act_in_env(obs)
    result = subprocess.run(
        [sys.executable, "-c", RUN_EXPORTED, json.dumps(cases)], check=True, capture_output=True, text=True
    )
    actual = json.loads(result.stdout)
    for name, want in expected.items():
        torch.testing.assert_close(torch.tensor(actual[name], dtype=want.dtype), want, msg=name)
    assert (expected["ppo_gaussian"] == 2.0).all()  # clipped to Pendulum's bounds, as in evaluation
    assert not model.training  # export leaves the module as it found it


def test_export_policy_restores_training_mode_and_needs_no_built_env() -> None:
    model = build(PPO, EnvConfig("CartPole-v1"))  # never fitted: the spaces are probed
    program = model.export_policy()
    assert model.training
    actions = program.module()(torch.zeros(3, 4))
    assert actions.shape == (3,) and actions.dtype == torch.long


@pytest.mark.filterwarnings("ignore")
def test_exported_atari_policy_takes_uint8_frames(tmp_path: Path) -> None:
    pytest.importorskip("ale_py")
    model = built(build(PPO, EnvConfig("ALE/Pong-v5")))
    path = tmp_path / "pong.pt2"
    model.export_policy(path)
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(torch.export.load(path).module()(frames), model.act_in_env(frames))
