"""Bad input fails before any env step, with exit status 2 and a message naming what to fix."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lightning import A2C, DQN, PPO, REINFORCE, EnvConfig, RunConfig
from rl_lightning.cli import main
from rl_lightning.config import ReplayConfig
from rl_lightning.errors import ConfigError
from rl_lightning.validation import (
    at_least,
    at_least_or,
    fraction,
    mlp_args,
    non_negative,
    one_of,
    positive,
    positive_fraction,
    positive_or_none,
)
from tests.helpers import build

ROOT = Path(__file__).resolve().parents[1]
PPO_CARTPOLE = ["--config", str(ROOT / "configs/ppo/cartpole.yaml")]

CASES = [
    # (arguments on top of the PPO CartPole config, text the message must contain)
    (["--model.env.env_id", "CartPol-v1"], "'CartPol-v1'.*CartPole-v1"),
    (["--model.env.env_id", "test/DictAction-v0"], r"PPO cannot handle the action space Dict\("),
    (["--model.gamma", "1.5"], r"gamma must be in \(0, 1\], got 1.5"),
    (["--model.gamma", "0"], r"gamma must be in \(0, 1\], got 0"),
    (["--model.gae_lambda", "1.2"], "gae_lambda must be in"),
    (["--model.learning_rate", "-0.001"], "learning_rate must be > 0, got -0.001"),
    (["--model.learning_rate", "0"], "learning_rate must be > 0"),
    (["--model.num_minibatches", "3"], r"num_minibatches=3 does not divide .* 8 \* 32 = 256"),
    (["--model.num_steps", "0"], "num_steps must be >= 1"),
    (["--model.update_epochs", "0"], "update_epochs must be >= 1"),
    (["--model.clip_coef", "-0.1"], "clip_coef must be > 0"),
    (["--model.max_grad_norm", "0"], "max_grad_norm must be > 0"),
    (["--model.vf_coef", "-1"], "vf_coef must be >= 0"),
    (["--model.target_kl", "-0.01"], "target_kl must be > 0"),
    (["--model.activation", "sigmoidd"], r"--model.activation: Expected .*'tanh'.*Got value: sigmoidd"),
    (["--model.run.total_env_steps", "0"], "total_env_steps must be >= 1"),
    (["--model.run.env_steps_per_epoch", "0"], "env_steps_per_epoch must be >= 1"),
    (["--model.run.eval_episodes", "0"], "eval_episodes must be >= 1"),
    (["--model.env.num_envs", "0"], "num_envs must be >= 1"),
    (["--model.env.vectorization", "parallel"], "vectorization"),
    (["--model.hidden_sizes", "[64, 0]"], r"hidden_sizes must be positive, got \[64, 0\]"),
    (["--model.env.backend", "jax"], "backend"),
    (["--model.learning_rat", "0.1"], "learning_rat"),  # typo in a key
    (["--model.env.env_idd", "CartPole-v1"], "env_idd"),
    (["--model.gamma", "abc"], "gamma"),  # wrong type
    (["--trainer.max_epochs", "many"], "max_epochs"),
    (["--ckpt_path", "last"], "--ckpt_path last: no checkpoint that loads under runs/ppo_cartpole"),
    (["--model.env.env_id", "Taxi-v4", "--model.env.backend", "torch"], "no torch implementation of 'Taxi"),
    (
        ["--model.env.env_id", "Taxi-v3", "--model.env.backend", "envpool"],
        r"env.backend envpool has no env 'Taxi-v3'.*ALE/<Game>-v5",
    ),
    (
        ["--model.env.backend", "envpool", "--model.env.env_kwargs", "{bogus: 1}"],
        "env.env_kwargs for 'CartPole-v1' on envpool: .*bogus",
    ),
]


DQN_CARTPOLE = ["--config", str(ROOT / "configs/dqn/cartpole.yaml")]
CASES += [
    (
        [*DQN_CARTPOLE, "--model.replay.batch_size", "512", "--model.replay.buffer_size", "256"],
        "replay.buffer_size=256 must be >= replay.batch_size=512",
    ),
    ([*DQN_CARTPOLE, "--model.n_step", "0"], "n_step must be >= 1"),
    (
        [*DQN_CARTPOLE, "--model.replay.learning_starts", "200000"],
        r"replay.learning_starts must be in \[0, total_env_steps=100000\], got 200000",
    ),
    ([*DQN_CARTPOLE, "--model.tau", "1.5"], r"tau must be in \(0, 1\]"),
    ([*DQN_CARTPOLE, "--model.hidden_sizes", "[0]"], "hidden_sizes must be positive"),
    (
        [*DQN_CARTPOLE, "--model.env.env_id", "Pendulum-v1"],
        r"DQN cannot handle the action space Box.*For Box actions use A2C, CrossQ, DDPG, PPO, [^.]*SAC, TD3, TQC\.",
    ),
    (
        ["--config", str(ROOT / "configs/qrdqn/cartpole.yaml"), "--model.env.env_id", "Pendulum-v1"],
        r"QRDQN cannot handle the action space Box.*For Box actions use A2C, CrossQ, DDPG, PPO, [^.]*SAC, TD3, TQC\.",
    ),
]


def off_policy(algo: str) -> list[str]:
    return ["--config", str(ROOT / f"configs/{algo}/pendulum.yaml")]


CASES += [
    # (the same, on top of the SAC / TD3 / DDPG Pendulum configs)
    (off_policy("sac") + ["--model.env.env_id", "CartPole-v1"], r"SAC cannot handle the action space Discrete\(2\)"),
    (off_policy("td3") + ["--model.env.env_id", "CartPole-v1"], r"TD3 cannot handle the action space Discrete\(2\)"),
    (off_policy("ddpg") + ["--model.env.env_id", "Acrobot-v1"], r"DDPG cannot handle the action space Discrete\(3\)"),
    (
        off_policy("sac") + ["--model.replay.batch_size", "512", "--model.replay.buffer_size", "256"],
        "replay.buffer_size=256 must be >= replay.batch",
    ),
    (
        off_policy("td3") + ["--model.replay.batch_size", "300000"],
        "replay.buffer_size=200000 must be >= replay.batch_size=300000",
    ),
    (off_policy("sac") + ["--model.tau", "0"], r"tau must be in \(0, 1\], got 0"),
    (off_policy("ddpg") + ["--model.tau", "1.5"], r"tau must be in \(0, 1\], got 1.5"),
    (
        off_policy("sac") + ["--model.replay.learning_starts", "30000"],
        r"replay.learning_starts must be in \[0, total_env_steps=20000\], got 30000",
    ),
    (
        off_policy("td3") + ["--model.run.total_env_steps", "5000"],
        r"learning_starts must be in \[0, total_env_steps=5000\], got 10000",
    ),
    (off_policy("sac") + ["--model.ent_coef", "-0.1"], "ent_coef must be 'auto' or a number > 0, got -0.1"),
    (off_policy("sac") + ["--model.gamma", "1.01"], r"gamma must be in \(0, 1\], got 1.01"),
    (off_policy("td3") + ["--model.policy_frequency", "0"], "policy_frequency must be >= 1, got 0"),
    (off_policy("sac") + ["--model.replay.phases_per_step", "0"], "phases_per_step must be >= 1, got 0"),
    (off_policy("td3") + ["--model.exploration_noise", "-0.1"], "exploration_noise must be >= 0, got -0.1"),
    (off_policy("ddpg") + ["--model.policy_frequency", "2"], "policy_frequency"),  # DDPG has no delay to set
    (off_policy("sac") + ["--model.env.env_id", "test/MultiBinary-v0"], r"SAC cannot handle .*MultiBinary\(2\)"),
]


GRID = "rl_lightning.envs.examples:GridReach-v0"
CASES += [
    # (what users bring: their envs, wrappers and spaces)
    (["--model.env.env_id", "no_such_package.envs:MyEnv-v0"], r"cannot import 'no_such_package.envs'"),
    (["--model.env.env_id", "rl_lightning.envs.examples:Nope-v0"], r"registered no env 'Nope-v0'"),
    (
        ["--model.env.env_id", GRID, "--model.env.env_kwargs", "{sizee: 5}"],
        r"env.env_kwargs \{'sizee': 5\} for .*GridReach.*unexpected keyword argument 'sizee'",
    ),
    (["--model.env.env_kwargs", "{sutton_barto_rewardd: true}"], r"env.env_kwargs .*sutton_barto_rewardd"),
    (
        ["--model.env.wrappers", "[gymnasium.wrappers.NoSuchWrapper]"],
        r"env.wrappers\[0\]: no wrapper 'gymnasium.wrappers.NoSuchWrapper'",
    ),
    (
        ["--model.env.wrappers", "[{class_path: gymnasium.wrappers.FrameStackObservation, init_args: {stack: 4}}]"],
        r"env.wrappers\[0\] \(gymnasium.wrappers.FrameStackObservation\) with \{'stack': 4\}: .*'stack'",
    ),
    (["--model.env.wrappers", "[{path: gymnasium.wrappers.ClipReward}]"], r"env.wrappers\[0\]: expected a class path"),
    (
        [*DQN_CARTPOLE, "--model.env.env_id", GRID, "--model.env.env_kwargs", "{multi_discrete: true}"],
        r"DQN cannot handle the action space MultiDiscrete.*use A2C, PPO, REINFORCE, RecurrentPPO\.",
    ),
    (
        off_policy("sac") + ["--model.env.env_id", "CarRacing-v3"],
        r"SAC has no image encoder .*Use A2C, C51, DQN, PPO, PQN, QRDQN, REINFORCE, RecurrentPPO \(Nature or "
        r"MinAtar CNN\)",
    ),
    (
        [
            "--model.env.env_id",
            "CarRacing-v3",
            "--model.env.wrappers",
            "[{class_path: gymnasium.wrappers.ResizeObservation, init_args: {shape: [2, 2]}}]",
        ],
        r"are smaller than the MinAtar CNN's 3x3",
    ),
]


@pytest.mark.parametrize(("args", "pattern"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_exits_2_with_a_message_naming_it(args, pattern, tmp_path, monkeypatch, capsys):
    import re

    monkeypatch.chdir(tmp_path)
    config = [] if "--config" in args else PPO_CARTPOLE  # the PPO CartPole config, unless the case brings one
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *config, *args, "--trainer.enable_progress_bar", "false"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err, re.S), err[-2000:]
    assert "Traceback" not in err
    message = [line for line in err.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(message) == 1 and re.search(pattern, message[0]), err[-2000:]  # one line says it all
    assert not (tmp_path / "runs").exists() or not list(tmp_path.glob("runs/*/*/checkpoints/*.ckpt"))


def test_cli_prints_one_paragraph_without_traceback(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rl_lightning.cli", "fit", *PPO_CARTPOLE, "--model.gamma", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == "rl-lightning: error: gamma must be in (0, 1], got 2.0."
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (
            lambda: build(PPO, EnvConfig("CartPole-v1", backend="jax")),
            "env.backend must be 'gymnasium', 'torch' or 'envpool', got 'jax'",
        ),
        (lambda: build(A2C, EnvConfig("CartPole-v1"), hidden_sizes=(0,)), "hidden_sizes must be positive"),
        (lambda: build(DQN, EnvConfig("CartPole-v1"), hidden_sizes=(64, -1)), "hidden_sizes must be positive"),
    ],
)
def test_python_api_checks_what_the_cli_parser_cannot(make, pattern):
    """Without the CLI's typed parsing, the module's own checks catch these (before any env exists)."""
    with pytest.raises(ConfigError, match=pattern):
        make()


@pytest.mark.parametrize(
    ("validate", "good", "bad", "message"),
    [
        (lambda v: positive("lr", v), (1e-9, 3), 0, "lr must be > 0, got 0"),
        (lambda v: non_negative("c", v), (0, 2.5), -0.5, "c must be >= 0, got -0.5"),
        (lambda v: at_least("run.n", v, 1), (1, 10), 0, "run.n must be >= 1, got 0"),
        (lambda v: positive_or_none("kl", v), (None, 0.1), 0, "kl must be > 0 or None, got 0"),
        (lambda v: at_least_or("freq", v, 1, -1), (-1, 1, 8), 0, "freq must be -1 or >= 1, got 0"),
        (lambda v: fraction("lam", v), (0, 0.5, 1), 1.5, r"lam must be in \[0, 1\], got 1.5"),
        (lambda v: positive_fraction("gamma", v), (1e-3, 1), 0, r"gamma must be in \(0, 1\], got 0"),
        (lambda v: one_of("opt", v, ("a", "b", "c")), ("a", "c"), "d", "opt must be 'a', 'b' or 'c', got 'd'"),
        (lambda v: mlp_args(v, "relu"), ((), (1, 64)), (64, 0), r"hidden_sizes must be positive, got \[64, 0\]"),
        (lambda v: mlp_args((64,), v), ("tanh", "silu"), "sigmoid", "activation must be 'tanh', .* got 'sigmoid'"),
    ],
)
def test_validators_pass_good_values_and_name_the_argument_and_value_of_a_bad_one(validate, good, bad, message):
    for value in good:
        validate(value)
    with pytest.raises(ConfigError, match=message):
        validate(bad)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (lambda: RunConfig(0, 10, 1).check(), "run.total_env_steps must be >= 1, got 0"),
        (lambda: RunConfig(10, 10, 0).check(), "run.eval_episodes must be >= 1, got 0"),
        (lambda: EnvConfig(num_envs=0).check(), "env.num_envs must be >= 1, got 0"),
        (lambda: EnvConfig(vectorization="threads").check(), "env.vectorization must be 'sync' or 'async'"),
        (lambda: ReplayConfig(8, 4, 0, 0, 1, 1).check(100), "replay.train_freq must be >= 1, got 0"),
    ],
)
def test_each_config_checks_itself(config, message):
    RunConfig(1, 1, 1).check()
    EnvConfig().check()
    ReplayConfig(8, 4, 0, 1, 1, 1).check(100)
    with pytest.raises(ConfigError, match=message):
        config()


@pytest.mark.parametrize(
    ("algorithm", "kw", "message"),
    [
        (A2C, {"vf_coef": -1.0}, "vf_coef must be >= 0, got -1.0"),  # A2C shares PPO's loss checks
        (A2C, {"ent_coef": -0.01}, "ent_coef must be >= 0, got -0.01"),
        (A2C, {"max_grad_norm": 0.0}, "max_grad_norm must be > 0, got 0.0"),
        (REINFORCE, {"vf_coef": -0.5}, "vf_coef must be >= 0, got -0.5"),
        (REINFORCE, {"num_steps": 0}, "num_steps must be >= 1, got 0"),
    ],
)
def test_on_policy_algorithms_share_their_checks(algorithm, kw, message):
    with pytest.raises(ConfigError, match=message):
        build(algorithm, EnvConfig("CartPole-v1"), **kw)
