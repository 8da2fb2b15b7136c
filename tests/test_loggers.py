"""configs/logger/: a preset per logger Lightning ships, composed with an algorithm config; each run
names itself <algorithm>_<env>, logs the evaluation return, and keeps config.yaml and checkpoints
together in one directory per run. No network: W&B offline, MLflow on a local SQLite store."""

from __future__ import annotations

import csv
import re

import pytest

from tests.helpers import ROOT, cli

TINY = [
    *("--config", str(ROOT / "configs/ppo/cartpole.yaml")),
    *("--model.run.total_env_steps", "2048", "--model.run.env_steps_per_epoch", "1024"),
    *("--model.run.eval_episodes", "2", "--trainer.enable_progress_bar", "false"),
]


def fit_with(preset: str, tmp_path, *extra: str, cli_here=None):
    """A tiny fit with the logger preset: in this process with ``cli_here``, else in a subprocess (the optional
    loggers, which start their own threads and files)."""
    args = ("fit", *TINY, "--config", str(ROOT / f"configs/logger/{preset}.yaml"), *extra)
    out = cli_here(*args) if cli_here is not None else cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / re.search(r"^Run: (\S+)", out.stdout, re.M).group(1)
    assert (run / "config.yaml").is_file() and (run / "checkpoints/last.ckpt").is_file()
    return run


def test_every_preset_has_a_test():
    assert {p.stem for p in (ROOT / "configs/logger").glob("*.yaml")} == {"tensorboard", "csv", "mlflow", "wandb"}


def test_tensorboard(tmp_path, cli_here):
    run = fit_with("tensorboard", tmp_path, cli_here=cli_here)
    assert run.parent.name == "ppo_cartpole" and any(run.glob("events.out.tfevents.*"))


def test_csv(tmp_path, cli_here):
    run = fit_with("csv", tmp_path, cli_here=cli_here)
    assert run.parent.name == "ppo_cartpole"
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [float(r["val/episode_return"]) for r in rows if r.get("val/episode_return")]


@pytest.mark.slow  # ~17 s (an optional logger); the default suite is at its time budget
def test_mlflow_on_a_local_store(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    run = fit_with("mlflow", tmp_path)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'runs/mlflow/mlflow.db'}")
    (logged,) = client.search_runs([client.get_experiment_by_name("rl_lightning").experiment_id])
    assert logged.info.run_name == "ppo_cartpole" and run.name == logged.info.run_id
    assert "val/episode_return" in logged.data.metrics


@pytest.mark.slow  # ~12 s (an optional logger); the default suite is at its time budget
def test_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = fit_with("wandb", tmp_path, "--trainer.logger.init_args.offline", "true")
    assert run.parent.name == "rl-lightning"
    (offline,) = (tmp_path / "runs/wandb").glob(f"offline-run-*-{run.name}")
    assert (offline / f"run-{run.name}.wandb").stat().st_size > 0
