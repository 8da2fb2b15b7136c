"""The `rl-lightning` command, run as a user would, in a subprocess."""

from pathlib import Path

import pytest
import torch
import yaml

import rl_lightning
from rl_lightning.cli import main
from rl_lightning.config import constructor_defaults
from tests.helpers import ROOT, TINY_ENV_STEPS, TINY_RUN, benchmark_script, cli

# Algorithm configs: not the trainer and logger presets (composed with one), not tune's search spaces.
CONFIGS = sorted(
    c
    for c in (ROOT / "configs").glob("*/*.yaml")
    if c.parent.name not in ("trainer", "logger") and not c.name.endswith(".tune.yaml")
)
PRESETS = sorted((ROOT / "configs/trainer").glob("*.yaml"))


def test_fit_then_validate_from_checkpoint(tmp_path):
    cfg = ROOT / "configs/ppo/cartpole.yaml"
    fit = cli(
        "fit",
        "--config",
        str(cfg),
        "--model.run.total_env_steps",
        "2048",
        "--model.run.env_steps_per_epoch",
        "1024",
        "--trainer.enable_progress_bar",
        "false",
        "--seed_everything",
        "1",
        cwd=tmp_path,
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert "deprecated" not in fit.stderr, fit.stderr  # no deprecation inside Lightning: none a user can act on
    run_dir = tmp_path / "runs/ppo_cartpole/version_0"
    last = run_dir / "checkpoints/last.ckpt"
    assert last.exists() and any(run_dir.glob("events.out.tfevents.*"))
    assert torch.load(last, weights_only=True)["rl_lightning"]["env_steps"] == 2048

    val = cli("validate", "--config", str(cfg), "--ckpt_path", str(last), cwd=tmp_path)
    assert val.returncode == 0, val.stderr[-3000:]
    assert "val/episode_return" in val.stdout


def test_print_config_and_overrides(tmp_path, cli_here):
    out = cli_here(
        "fit",
        "--config",
        str(ROOT / "configs/ppo/cartpole.yaml"),
        "--model.learning_rate",
        "0.0003",
        "--model.env.env_id",
        "Acrobot-v1",
        "--print_config",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "learning_rate: 0.0003" in out.stdout and "env_id: Acrobot-v1" in out.stdout


def test_config_typo_names_the_key(tmp_path, cli_here):
    out = cli_here("fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--model.learning_rat", "0.1")
    assert out.returncode != 0
    assert "learning_rat" in out.stderr


def env_of(config: Path) -> dict:
    """A config's env settings: its YAML, not words in its comments."""
    return yaml.safe_load(config.read_text())["model"]["init_args"]["env"]


def needs_mujoco(env_id: str) -> bool:
    return any(name in env_id for name in ("HalfCheetah", "Hopper", "Walker2d", "Ant-", "Humanoid"))


def twin(config: Path) -> pytest.param:
    """An envpool Atari config runs with ``pytest -m slow``: 10-18 s each of the budget. Its parts run in the
    default suite elsewhere: its gymnasium twin (``atari.yaml`` beside it, where one is) differs only in the
    env id and backend; tests/test_envpool.py covers the backend and its frame stacks, tests/test_pqn.py PQN
    on it; the image networks run in the gymnasium Atari configs and tests/test_spaces.py. Likewise the
    MinAtar games beside Breakout."""
    env = env_of(config)
    env_id, backend = env["env_id"], env.get("backend", "gymnasium")
    slow = backend == "envpool" and ("NoFrameskip" in env_id or env_id.startswith("ALE/"))
    # MinAtar games other than Breakout: their configs differ from minatar_breakout.yaml in the env id only
    slow |= env_id.startswith("MinAtar/") and "Breakout" not in env_id
    return pytest.param(config, marks=[pytest.mark.slow] if slow else [], id=f"{config.parent.name}/{config.stem}")


@pytest.mark.parametrize("config", [twin(c) for c in CONFIGS])
def test_every_config_runs_on_a_tiny_budget(config, tmp_path, monkeypatch):
    model = yaml.safe_load(config.read_text())["model"]
    env = model["init_args"]["env"]
    env_id = env["env_id"]
    if needs_mujoco(env_id):
        pytest.importorskip("mujoco", reason="MuJoCo configs need the mujoco extra")
    if env_id.startswith("popgym."):
        pytest.importorskip("popgym", reason="POPGym configs need the memory extra")
    if env_id.startswith("MinAtar/"):
        pytest.importorskip("minatar", reason="MinAtar configs need the minatar extra")
    algorithm = getattr(rl_lightning, model["class_path"].rsplit(".", 1)[1])
    # Off-policy configs (an algorithm with a replay): a warm-up that fits the tiny budget (learning_starts >
    # total_env_steps is an error) and leaves its last 32 env steps to updates (the last 112 took half of a
    # MuJoCo config's tiny fit),
    defaults = constructor_defaults(algorithm)
    off_policy = "replay" in defaults
    overrides = ["--model.replay.learning_starts", str(TINY_ENV_STEPS - 32)] if off_policy else []
    # and at most 8 gradient steps per phase (the zoo's 128-256 per phase of QR-DQN's 170 quantiles took a minute);
    # a config with fewer keeps its own (raising SAC's 1 to 8 made a MuJoCo tiny fit 8x the updates).
    if off_policy and ((model["init_args"].get("replay") or {}).get("gradient_steps") or 1) > 8:
        overrides += ["--model.replay.gradient_steps", "8"]
    if algorithm is rl_lightning.CrossQ:  # 2048-wide critics: ~2 min per tiny fit
        overrides += ["--model.critic_hidden_sizes", "[64, 64]"]
    # On-policy configs: a rollout within the budget (LunarLander's 16 x 1024 env steps and their epochs of
    # updates were 32 tiny budgets); each config's own rollout passes its constructor's checks below.
    num_steps = model["init_args"].get("num_steps", defaults.get("num_steps"))
    num_envs = env.get("num_envs", 1)
    if not off_policy and num_steps is not None and num_steps * num_envs > TINY_ENV_STEPS:
        overrides += ["--model.num_steps", str(max(TINY_ENV_STEPS // num_envs, 1))]
    # In this process (the CLI's own main, as the console script runs it): a subprocess per config paid
    # ~5 s of imports each. The commands above and the DDP tests run the CLI as a subprocess.
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(config), *overrides, *TINY_RUN])
    (last,) = tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt")
    assert torch.load(last, weights_only=True)["rl_lightning"]["env_steps"] >= TINY_ENV_STEPS


PRESET_LINES = {
    "gpu": "accelerator: gpu",
    "ddp": "strategy: ddp",
    "bf16": "precision: bf16-mixed",
    "compile": "compile: true",
    "cudagraphs": "cuda_graphs: true",
    "docker": "save_dir: /workspace/logs",
}


def test_trainer_presets_compose_with_an_algorithm_config(tmp_path, cli_here):
    presets = [arg for p in PRESETS for arg in ("--config", str(p))]
    out = cli_here("fit", "--config", str(ROOT / "configs/ppo/cartpole.yaml"), *presets, "--print_config")
    assert out.returncode == 0, out.stderr[-3000:]
    assert {p.stem for p in PRESETS} == set(PRESET_LINES)
    for line in PRESET_LINES.values():
        assert line in out.stdout
    assert "class_path: rl_lightning.PPO" in out.stdout and "num_steps: 32" in out.stdout


def test_bf16_preset_runs_on_cpu(tmp_path, cli_here):
    out = cli_here(
        "fit",
        *("--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--config", str(ROOT / "configs/trainer/bf16.yaml")),
        *TINY_RUN,
        *("--trainer.accelerator", "cpu"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "bfloat16 Automatic Mixed Precision" in out.stdout + out.stderr


def test_16_mixed_on_cpu_is_refused_with_a_clear_message(tmp_path, cli_here):
    out = cli_here(
        "fit",
        *("--config", str(ROOT / "configs/ppo/cartpole.yaml"), "--trainer.accelerator", "cpu"),
        *("--trainer.precision", "16-mixed"),
    )
    assert out.returncode != 0
    assert "precision='16-mixed'" in out.stderr and "not supported on CPU" in out.stderr
    assert "bf16-mixed" in out.stderr


def test_fit_without_logger_or_checkpoints(tmp_path, cli_here):
    out = cli_here(
        "fit",
        *("--config", str(ROOT / "configs/ppo/cartpole.yaml")),
        *("--model.run.total_env_steps", "512", "--model.run.env_steps_per_epoch", "256"),
        *("--model.run.eval_episodes", "1", "--trainer.enable_progress_bar", "false"),
        *("--trainer.logger", "false", "--trainer.enable_checkpointing", "false"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Run:" not in out.stdout and "checkpoint" not in out.stdout.lower()
    assert not any(tmp_path.rglob("*.ckpt"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.parent.name}/{c.stem}")
def test_every_config_builds_with_its_own_settings(config):
    """Each config's own sizes pass the constructor's checks (rollout, minibatches, sequences): the tiny
    fits above shrink an on-policy rollout to their budget."""
    common = benchmark_script("common")
    cls, init, _ = common.load_config(config)
    assert isinstance(common.make_model(cls, init), cls)
