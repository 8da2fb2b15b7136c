"""Golden results: small fits of every algorithm on fixed seeds, compared with results recorded earlier.

A refactor must not change what the library computes. Each case trains for a few hundred to a few
thousand env steps and compares the final parameters and buffers, the replay buffer's contents, the
env-step and optimizer-step counters and the evaluation return with ``tests/golden/<case>.pt``.

On the machine the goldens were recorded on (same CPU capability and torch version) the comparison
is exact. Elsewhere float rounding may differ in the last bits (vector math libraries take other
paths on other CPUs), so it is a tight tolerance there.

Re-record (only for an intended change, explained in its commit)::

    RL_LIGHTNING_RECORD_GOLDEN=1 pytest tests/test_golden.py
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from rl_lightning import A2C, DDPG, DQN, PPO, REINFORCE, SAC, TD3, EnvConfig, ReplayConfig, RunConfig
from tests.helpers import quick_trainer

GOLDEN = Path(__file__).parent / "golden"
RECORD = os.environ.get("RL_LIGHTNING_RECORD_GOLDEN") == "1"


def _cases() -> dict[str, Any]:
    cartpole = dict(env=EnvConfig("CartPole-v1", num_envs=4, seed=3), hidden_sizes=(16, 16))
    pendulum = dict(env=EnvConfig("Pendulum-v1", num_envs=2, seed=5), hidden_sizes=(16, 16))

    def run(total: int, per_epoch: int, episodes: int) -> RunConfig:
        return RunConfig(total_env_steps=total, env_steps_per_epoch=per_epoch, eval_episodes=episodes)

    def replay(**kw: Any) -> ReplayConfig:
        return ReplayConfig(buffer_size=2000, batch_size=32, learning_starts=100, save_replay_buffer=True, **kw)

    return {
        "ppo": lambda: PPO(**cartpole, run=run(1024, 512, 3), num_steps=32, num_minibatches=4, update_epochs=2),
        "ppo_continuous_normalized": lambda: PPO(
            **pendulum,
            run=run(800, 400, 2),
            num_steps=50,
            num_minibatches=2,
            update_epochs=3,
            normalize_obs=True,
            normalize_reward=True,
            target_kl=0.05,
            clip_vloss=True,
        ),
        "a2c": lambda: A2C(**cartpole, run=run(400, 200, 3), rollouts_per_step=3),
        "reinforce": lambda: REINFORCE(**cartpole, run=run(1200, 600, 3), num_steps=100, max_grad_norm=1.0),
        "dqn": lambda: DQN(
            **cartpole,
            run=run(1200, 600, 3),
            replay=replay(train_freq=4, gradient_steps=2, phases_per_step=1),
            target_network_frequency=200,
        ),
        "dqn_double_dueling_nstep_per": lambda: DQN(
            **cartpole,
            run=run(1200, 600, 3),
            replay=replay(train_freq=2, gradient_steps=1, phases_per_step=1),
            target_network_frequency=100,
            tau=0.5,
            double_q=True,
            dueling=True,
            n_step=3,
            prioritized_replay=True,
        ),
        "sac": lambda: SAC(**pendulum, run=run(500, 250, 2), replay=replay(gradient_steps=2)),
        "td3": lambda: TD3(**pendulum, run=run(500, 250, 2), replay=replay(phases_per_step=4)),
        "ddpg": lambda: DDPG(**pendulum, run=run(420, 210, 2), replay=replay(train_freq=3)),
    }


CASES = _cases()


def _fingerprint() -> str:
    return f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} torch {torch.__version__}"


def _run(name: str, callbacks: list[L.Callback] | None = None) -> dict[str, Any]:
    L.seed_everything(123)
    model = CASES[name]()
    trainer = quick_trainer(callbacks=callbacks)
    trainer.fit(model)
    replay = getattr(model.experience, "buffer", None)  # off-policy: the replay buffer
    result = {
        "state": [t.detach().clone() for t in model.state_dict().values()],
        "names": list(model.state_dict()),
        "env_steps": model.env_steps,
        "global_step": trainer.global_step,
        "eval_return": float(trainer.callback_metrics["val/episode_return"]),
        "fingerprint": _fingerprint(),
    }
    if replay is not None:
        state = {k: v for k, v in replay.state_dict().items() if isinstance(v, torch.Tensor)}
        # Rows from each stream's head on were never written (the storage is uninitialized): masked.
        unwritten = torch.arange(state["frames"].shape[1]) >= state["rows_written"][:, None]
        state["frames"][unwritten] = 0
        result["replay"] = state
    return result


@pytest.mark.parametrize("name", list(CASES))
def test_results_match_the_recorded_goldens(name):
    got = _run(name)
    path = GOLDEN / f"{name}.pt"
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        torch.save(got, path)
        pytest.skip(f"recorded {path}")
    assert_matches_golden(name, got)


def assert_matches_golden(name: str, got: dict[str, Any]) -> None:
    want = torch.load(GOLDEN / f"{name}.pt", weights_only=True)
    exact = want["fingerprint"] == got["fingerprint"]
    assert (got["env_steps"], got["global_step"]) == (want["env_steps"], want["global_step"])
    assert len(got["state"]) == len(want["state"]), (got["names"], want["names"])
    tensors = list(zip(want["names"], want["state"], got["state"], strict=True))
    tensors += [(f"replay.{k}", v, got["replay"][k]) for k, v in want.get("replay", {}).items()]
    for key, w, g in tensors:
        assert w.shape == g.shape and w.dtype == g.dtype, key
        if exact or not w.is_floating_point():
            assert torch.equal(w, g), f"{name}: {key} differs from the golden"
        else:
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4, msg=f"{name}: {key} differs from the golden")
    if exact:
        assert got["eval_return"] == want["eval_return"]
    else:
        assert got["eval_return"] == pytest.approx(want["eval_return"], rel=0.05, abs=1.0)
