"""What several test modules share: a quiet trainer, toy envs, the CLI in a subprocess, the golden cases
(tests/test_golden.py) and ``build`` (flat keyword arguments split into an algorithm's config dataclasses,
so tests can state only what matters to them). Test modules import from here (or get fixtures from
conftest.py), never from each other: tests/test_architecture.py checks it."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

import rl_lightning
from rl_lightning import (
    A2C,
    C51,
    DDPG,
    DQN,
    PPO,
    PQN,
    QRDQN,
    REINFORCE,
    SAC,
    TD3,
    TQC,
    CrossQ,
    EnvConfig,
    RecurrentPPO,
    ReplayConfig,
    RLModule,
    RunConfig,
)

ROOT = Path(__file__).resolve().parents[1]

RUN_KEYS = {f.name for f in dataclasses.fields(RunConfig)}
REPLAY_KEYS = {f.name for f in dataclasses.fields(ReplayConfig)}


def build(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls(**kwargs)`` with the ``RunConfig`` and ``ReplayConfig`` fields among ``kwargs`` (flat, or as
    the dicts a YAML config holds) moved into ``run=`` and ``replay=``, on top of the algorithm's own
    defaults for them."""
    algorithm = next(c for c in cls.__mro__ if "run" in inspect.signature(c).parameters)
    params = inspect.signature(algorithm).parameters
    for name, keys in (("run", RUN_KEYS), ("replay", REPLAY_KEYS)):
        if name not in params:
            continue
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in keys}
        given = kwargs.pop(name, None)
        config = params[name].default
        if isinstance(given, dict):
            fields = {**given, **fields}
        elif given is not None:
            config = given
        kwargs[name] = dataclasses.replace(config, **fields)
    return cls(*args, **kwargs)


ALGORITHMS = [
    obj
    for obj in (getattr(rl_lightning, name) for name in rl_lightning.__all__)
    if isinstance(obj, type) and issubclass(obj, RLModule) and obj is not RLModule
]

# PPO on CartPole with configs/ppo/cartpole.yaml's hyperparameters (SB3 zoo).
CARTPOLE_PPO = dict(
    num_steps=32, learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, update_epochs=20, num_minibatches=1, ent_coef=0.0
)  # configs/ppo/cartpole.yaml (SB3 zoo)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_lightning.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        # This checkout, whatever is installed; one intra-op thread as in the test process (conftest):
        # on a busy 2-core machine two threads per process made SAC's updates ~40x slower.
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )


# A fit of two evaluations of one episode, TINY_ENV_STEPS env steps, no progress bar.
TINY_ENV_STEPS = 512
TINY_RUN = (
    *("--model.run.total_env_steps", str(TINY_ENV_STEPS), "--model.run.env_steps_per_epoch", str(TINY_ENV_STEPS // 2)),
    *("--model.run.eval_episodes", "1", "--trainer.enable_progress_bar", "false"),
)


def tiny_pendulum(cls: type, **kw: Any) -> Any:
    """An off-policy ``cls`` (SAC, TD3, DDPG) on 2 Pendulums with 16x16 networks, 300 env steps (the
    first 100 random), evaluated twice: ``kw`` on top."""
    args = dict(
        env=EnvConfig("Pendulum-v1", num_envs=2, seed=0),
        total_env_steps=300,
        buffer_size=1000,
        batch_size=32,
        learning_starts=100,
        train_freq=4,
        gradient_steps=2,
        hidden_sizes=(16, 16),
        env_steps_per_epoch=150,
        eval_episodes=2,
    )
    args.update(kw)
    return build(cls, **args)


def tiny_sac(**kw: Any) -> SAC:
    return tiny_pendulum(SAC, **kw)


def tiny_td3(cls: type = TD3, **kw: Any) -> Any:
    return tiny_pendulum(cls, **{"gradient_steps": 3, **kw})


def quick_trainer(**kwargs: Any) -> L.Trainer:
    defaults = dict(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


def final_return(cls: type, seed: int, **kwargs: Any) -> float:
    """Seed everything with ``seed``, fit ``build(cls, **kwargs)`` with ``quick_trainer()``: the mean
    return of its last evaluation."""
    L.seed_everything(seed)
    model = build(cls, **kwargs)
    trainer = quick_trainer()
    trainer.fit(model)
    return float(trainer.callback_metrics["val/episode_return"])


class MultiBinaryActionEnv(gym.Env):
    """Two bits to set; reward +1 for each bit that matches the observation's sign, 10-step episodes.
    Fails on an action that is not two integer bits."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiBinary(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), f"not two integer bits: {action!r}"
        reward = float(((np.asarray(action) == 1) == (self.obs > 0)).sum())
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, reward, False, self.t >= 10, {}


class RecallFirstEnv(gym.Env):
    """A cue seen once: the first observation shows a random bit, the next two a random distractor bit on
    other inputs, the fourth asks for the cue; only that answer pays (+1 when it is the cue). A memory
    scores 1; a stateless policy 0.5 on average, and so does one whose memory is lost after the cue."""

    observation_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)  # cue bit (2), distractor bit (2), question
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, int(self.np_random.integers(2))
        return np.eye(5, dtype=np.float32)[self.cue], {}

    def step(self, action):
        self.t += 1
        if self.t < 3:
            return np.eye(5, dtype=np.float32)[2 + int(self.np_random.integers(2))], 0.0, False, False, {}
        if self.t == 3:
            return np.eye(5, dtype=np.float32)[4], 0.0, False, False, {}
        return np.zeros(5, dtype=np.float32), float(int(action) == self.cue), True, False, {}


class DictActionEnv(MultiBinaryActionEnv):
    """An action space no algorithm here supports."""

    action_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})


class BoundedActionEnv(gym.Env):
    """Observations far from zero mean / unit scale; fails on any action outside [-0.5, 0.5]^2."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-0.5, 0.5, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return (np.array([100.0, -50.0, 3.0]) + self.np_random.normal(size=3) * [10.0, 1.0, 0.1]).astype(np.float32)

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=np.float32)), f"out of bounds: {action}"
        self.t += 1
        return self._obs(), float(-np.sum(np.square(action))) * 100, False, self.t >= 20, {}


def register(env_id: str, entry_point: Any) -> None:
    if env_id not in gym.envs.registry:
        gym.register(env_id, entry_point=entry_point)


register("test/MultiBinary-v0", MultiBinaryActionEnv)
register("test/DictAction-v0", DictActionEnv)
register("test/BoundedAction-v0", BoundedActionEnv)


class RecordingBox(gym.Env):
    """Asymmetric 2-D action bounds; records every action it receives. Reward: -|a - centre|."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
    received: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        RecordingBox.received.append(np.array(action, copy=True))
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, -float(np.abs(action - np.array([0.5, 0.25])).sum()), False, self.t >= 20, {}


register("test/RecordingBox-v0", RecordingBox)


# tests/test_golden.py: the recorded results, and the cases they were recorded from.
GOLDEN = Path(__file__).parent / "golden"


def _golden_cases() -> dict[str, Any]:
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
        "recurrent_ppo": lambda: RecurrentPPO(
            **cartpole, run=run(1024, 512, 3), num_steps=32, num_minibatches=2, update_epochs=2, hidden_size=16
        ),
        "a2c": lambda: A2C(**cartpole, run=run(400, 200, 3), rollouts_per_step=3),
        "reinforce": lambda: REINFORCE(**cartpole, run=run(1200, 600, 3), num_steps=100, max_grad_norm=1.0),
        "pqn": lambda: PQN(**cartpole, run=run(1024, 512, 3), num_steps=32, num_minibatches=4, update_epochs=2),
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
        "c51_rainbow": lambda: C51(
            **cartpole,
            run=run(1200, 600, 3),
            replay=replay(train_freq=2, gradient_steps=1, phases_per_step=1),
            target_network_frequency=100,
            double_q=True,
            dueling=True,
            n_step=3,
            prioritized_replay=True,
            noisy=True,
            n_atoms=11,
        ),
        "qrdqn": lambda: QRDQN(
            **cartpole,
            run=run(1200, 600, 3),
            replay=replay(train_freq=4, gradient_steps=2, phases_per_step=1),
            target_network_frequency=200,
            n_quantiles=10,
        ),
        "sac": lambda: SAC(**pendulum, run=run(500, 250, 2), replay=replay(gradient_steps=2)),
        "td3": lambda: TD3(**pendulum, run=run(500, 250, 2), replay=replay(phases_per_step=4)),
        "ddpg": lambda: DDPG(**pendulum, run=run(420, 210, 2), replay=replay(train_freq=3)),
        "tqc": lambda: TQC(**pendulum, run=run(500, 250, 2), replay=replay(gradient_steps=2), n_quantiles=5),
        "crossq": lambda: CrossQ(
            **pendulum,
            run=run(500, 250, 2),
            replay=replay(gradient_steps=2),
            critic_hidden_sizes=(32, 32),
            policy_delay=2,
            batch_renorm_warmup_steps=300,  # the renormalization starts within the run
        ),
    }


GOLDEN_CASES = _golden_cases()


def _golden_fingerprint() -> str:
    # The CPU model too: two CPUs with the same vector capability (AVX512) still round differently.
    return f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} {_cpu_model()} torch {torch.__version__}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def run_golden_case(name: str, callbacks: list[L.Callback] | None = None) -> dict[str, Any]:
    """Fit ``GOLDEN_CASES[name]`` from a fixed seed; what ``assert_matches_golden`` compares."""
    L.seed_everything(123)
    model = GOLDEN_CASES[name]()
    trainer = quick_trainer(callbacks=callbacks)
    trainer.fit(model)
    replay = getattr(model.experience, "buffer", None)  # off-policy: the replay buffer
    result = {
        "state": [t.detach().clone() for t in model.state_dict().values()],
        "names": list(model.state_dict()),
        "env_steps": model.env_steps,
        "global_step": trainer.global_step,
        "eval_return": float(trainer.callback_metrics["val/episode_return"]),
        "fingerprint": _golden_fingerprint(),
    }
    if replay is not None:
        state = {k: v for k, v in replay.state_dict().items() if isinstance(v, torch.Tensor)}
        # Rows from each stream's head on were never written (the storage is uninitialized): masked.
        unwritten = torch.arange(state["frames"].shape[1]) >= state["rows_written"][:, None]
        state["frames"][unwritten] = 0
        result["replay"] = state
    return result


def golden_paths(name: str) -> list[Path]:
    """``tests/golden/<name>.pt`` and the same run recorded on other CPUs (``<name>@<cpu>.pt``)."""
    return [GOLDEN / f"{name}.pt", *sorted(GOLDEN.glob(f"{name}@*.pt"))]


def golden_variant_path(name: str, fingerprint: str) -> Path:
    """Where this CPU's recording of ``name`` goes (``RL_LIGHTNING_RECORD_GOLDEN=this-cpu``)."""
    return GOLDEN / f"{name}@{hashlib.sha1(fingerprint.encode()).hexdigest()[:8]}.pt"


def assert_matches_golden(name: str, got: dict[str, Any]) -> None:
    """``got`` equals ``tests/golden/<name>.pt`` or a recording of the same run on this CPU: exactly on a CPU that
    recorded it, else within float rounding of the first."""
    recorded = [torch.load(path, weights_only=True) for path in golden_paths(name)]
    want = next((r for r in recorded if r["fingerprint"] == got["fingerprint"]), recorded[0])
    exact = want["fingerprint"] == got["fingerprint"]
    if not exact:  # said on failure: the tolerance may be too tight for a long run on another CPU
        name = (
            f"{name} (no recording on this CPU, {got['fingerprint']}: compared with {want['fingerprint']}'s "
            "within a tolerance; if the goldens' commit computes the same here, record this CPU's from that "
            "commit: RL_LIGHTNING_RECORD_GOLDEN=this-cpu)"
        )
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


class Corridor(gym.Env):
    """Walk right to the goal: 16-step episodes (truncated), deterministic start, reward for right."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, 0.0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.x, self.t / 16], np.float32)

    def step(self, action):
        self.t += 1
        self.x = min(max(self.x + (0.1 if action == 1 else -0.1), 0.0), 1.0)
        return self._obs(), float(action == 1), False, self.t >= 16, {}


class SlidingCorridor(Corridor):
    """The same corridor with a continuous push in [-1, 1] (for SAC, TD3, DDPG)."""

    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action):
        self.t += 1
        self.x = min(max(self.x + 0.1 * float(action[0]), 0.0), 1.0)
        return self._obs(), float(action[0]), False, self.t >= 16, {}


class Endless(Corridor):
    """The corridor with no end: neither terminated nor truncated, ever (an env with no time limit)."""

    def step(self, action):
        return *super().step(action)[:3], False, {}


# 16-step episodes end at epoch ends in the resume tests (tests/test_resume.py, tests/test_population_off_policy.py).
register("test/Corridor-v0", Corridor)
register("test/SlidingCorridor-v0", SlidingCorridor)


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` as a module."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # as when the script runs: its helpers sit beside it
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
