"""rl-lightning tune: Optuna studies over a config, on one machine or many processes sharing a storage."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from rl_lightning.cli import fit_trial
from rl_lightning.errors import ConfigError
from rl_lightning.plotting import load_scalars
from rl_lightning.tune import algorithm_of, load_space, redact, tune
from tests.helpers import ROOT, cli

optuna = pytest.importorskip("optuna")

PPO_CARTPOLE = str(ROOT / "configs/ppo/cartpole.yaml")
# A tiny fit per trial: 4 evaluations of 2 episodes over 2,048 env steps.
TINY = [
    *("--model.run.total_env_steps", "2048", "--model.run.env_steps_per_epoch", "512"),
    *("--model.run.eval_episodes", "2", "--trainer.enable_progress_bar", "false"),
    *("--trainer.enable_model_summary", "false", "--seed_everything", "0"),
]
TWO_EVALUATIONS = ["--model.run.total_env_steps", "512", "--model.run.env_steps_per_epoch", "256"]  # the last wins


def write_space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


SPACE = "learning_rate: {low: 1.0e-4, high: 3.0e-3, log: true}\nnum_steps: {choices: [64, 128]}\n"


def load(storage: str, name: str):
    return optuna.load_study(study_name=name, storage=storage)


@pytest.mark.parametrize(
    "space, message",
    [
        ("learning_rat: {low: 0.1, high: 0.2}", "PPO has no argument 'learning_rat'"),
        ("run.total_steps: {choices: [1, 2]}", "run has no field 'total_steps'"),
        ("learning_rate: {low: 0.2, high: 0.1}", "low (0.2) must be below high (0.1)"),
        ("learning_rate: {low: 0.0, high: 0.1, log: true}", "a log range needs low > 0"),
        ("num_steps: {choices: []}", "choices must be a non-empty list"),
        ("num_steps: {values: [1, 2]}", "unknown field(s) ['values']"),
        ("num_steps: 64", "expected {low: .., high: ..} or {choices: [..]}"),
    ],
)
def test_a_bad_search_space_is_refused_before_any_trial(tmp_path, monkeypatch, space, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        tune(["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, space), *TINY], fit_trial)
    assert message in str(e.value)
    assert not (tmp_path / "runs").exists()  # no trial ran, no study was created


def test_the_cli_reports_a_bad_search_space_in_one_line(tmp_path, cli_here):
    space = write_space(tmp_path, "learning_rat: {low: 0.1, high: 0.2}")
    out = cli_here("tune", "--config", PPO_CARTPOLE, "--space", space, *TINY)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    expected = f"rl-lightning: error: --space {space}: learning_rat: PPO has no argument 'learning_rat'."
    assert out.stderr.strip() == expected


@pytest.mark.slow  # ~30 s of worker processes; test_six_trials_in_two_processes_share_one_sqlite_study covers --jobs
def test_jobs_workers_with_a_sampler_seed_suggest_different_trials(tmp_path):
    # One sampler seed for all --jobs workers made them suggest the same parameters, trial for trial.
    args = ["tune", "--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "4"]
    out = cli(
        *args, "--jobs", "2", "--sampler_seed", "0", "--study_name", "jobs", "--pruner", "none", *TINY, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    trials = load(f"sqlite:///{tmp_path / 'runs/tune/jobs/study.db'}", "jobs").trials
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(params) >= 4 and len(set(params)) == len(params)


@pytest.mark.slow  # ~27 s; the default suite is at its time budget (a killed worker's study stays in it)
def test_six_trials_in_two_processes_share_one_sqlite_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    args = ["tune", "--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "6"]
    args += ["--storage", storage, "--study_name", "shared", "--pruner", "none", *TINY]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "rl_lightning.cli", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs[0][-2000:] + outputs[1][-2000:]
    trials = load(storage, "shared").trials
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= 6 and len(trials) == len(complete)  # both stop at 6 (one more if they raced)
    assert len({t.number for t in trials}) == len(trials)
    run_dirs = [Path(tmp_path / t.user_attrs["run_dir"]) for t in complete]
    assert len(set(run_dirs)) == len(run_dirs) and all((d / "config.yaml").is_file() for d in run_dirs)
    assert all("study.db" not in (d / "config.yaml").read_text() for d in run_dirs)  # storage stays out of runs
    assert all("| trial | state | value |" in o for o in outputs)


def test_a_pruned_trial_stops_at_its_first_evaluation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "1", *TINY]
    study = tune(argv, fit_trial, pruner=optuna.pruners.ThresholdPruner(lower=1e9))  # prunes every report
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    (reported_at,) = trial.intermediate_values  # one evaluation, of the two or four the budget allows
    last = torch.load(tmp_path / trial.user_attrs["run_dir"] / "checkpoints/last.ckpt", weights_only=True)
    assert last["rl_lightning"]["env_steps"] == reported_at < 2048  # the fit stopped there


def test_the_best_config_reruns_to_its_trials_result(tmp_path, cli_here):
    argv = ["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "2", "--pruner", "none"]
    study = tune([*argv, "--study_name", "best", "--sampler_seed", "0", *TINY], fit_trial)
    best_yaml = tmp_path / "runs/tune/best/best.yaml"
    assert best_yaml.is_file() and (tmp_path / "runs/tune/best/history.png").is_file()
    out = cli_here("fit", "--config", str(best_yaml))
    assert out.returncode == 0, out.stderr[-2000:]
    rerun = float(re.search(r"\(val/episode_return ([-\d.e+]+)\)", out.stdout).group(1))
    assert rerun == pytest.approx(study.best_value)
    assert "runs/ppo_cartpole/version_0" in out.stdout  # its own run directory, not the trial's


@pytest.mark.slow  # ~29 s; the default suite is at its time budget
def test_a_killed_worker_leaves_the_study_usable(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["tune", "--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--storage", storage]
    common += ["--study_name", "killed", "--pruner", "none", "--heartbeat", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    long_trial = [*TINY, "--model.run.total_env_steps", "10000000"]  # the last value given wins
    worker = subprocess.Popen(
        [sys.executable, "-m", "rl_lightning.cli", *common, "--n_trials", "1", *long_trial],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "runs/tune/killed").exists():
        time.sleep(0.5)
    while time.time() < deadline:
        try:
            if [t.state for t in load(storage, "killed").trials] == [optuna.trial.TrialState.RUNNING]:
                break
        except KeyError:  # the study is not created yet
            pass
        time.sleep(0.5)
    time.sleep(3)  # mid-trial
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    time.sleep(2.5)  # its heartbeat is now older than the grace period (2 x 1 s)
    out = cli(*common, "--n_trials", "2", *TINY, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trial 0 stopped reporting" in out.stdout
    states = [t.state for t in load(storage, "killed").trials]
    assert states[0] == optuna.trial.TrialState.FAIL and states.count(optuna.trial.TrialState.COMPLETE) == 2


def test_storage_passwords_are_never_printed():
    assert (
        redact("postgresql://alice:s3cret@db.example:5432/studies") == "postgresql://alice:***@db.example:5432/studies"
    )


def test_a_storage_without_its_driver_is_one_line_naming_the_pip_install(tmp_path, cli_here):
    # It was 32 lines: SQLAlchemy's ModuleNotFoundError and Optuna's ImportError, two tracebacks.
    if any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        pytest.skip("a PostgreSQL driver is installed")
    url = "postgresql://u:secret@127.0.0.1:1/db"
    space = write_space(tmp_path, SPACE)
    out = cli_here("tune", "--config", PPO_CARTPOLE, "--space", space, "--storage", url, *TINY)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "secret" not in out.stderr + out.stdout
    assert lines[0].startswith("rl-lightning: error: --storage postgresql://u:***@127.0.0.1:1/db: ")
    assert re.search(r"the Python module psycopg2?, .* for postgresql, is not installed \(pip install ", lines[0])
    assert not (tmp_path / "runs").exists()  # refused before any work


@pytest.mark.parametrize(
    "url, message",
    [
        ("nosuchdb://u:secret@host/db", "SQLAlchemy has no dialect 'nosuchdb'; use e.g. sqlite:///study.db"),
        ("postgres://u:secret@host/db", "SQLAlchemy has no dialect 'postgres'"),
        ("u:secret@host/db", "--storage ***@host/db: not a database URL"),
        ("mysql+pymysql://u:secret@host/db", "module pymysql, SQLAlchemy's driver for mysql+pymysql, is not installed"),
    ],
)
def test_a_bad_storage_url_is_refused_in_one_line_before_any_trial(tmp_path, monkeypatch, url, message):
    if url.startswith("mysql+pymysql") and importlib.util.find_spec("pymysql"):
        pytest.skip("pymysql is installed")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        tune(["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--storage", url, *TINY], fit_trial)
    assert message in str(e.value) and "\n" not in str(e.value) and "secret" not in str(e.value)
    assert not (tmp_path / "runs").exists()


def test_a_storage_that_does_not_open_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # open_storage's retries (for racing workers)
    url = f"sqlite:///{tmp_path / 'no/such/dir/study.db'}"
    with pytest.raises(ConfigError) as e:
        tune(["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--storage", url, *TINY], fit_trial)
    assert str(e.value) == f"--storage {url}: cannot open the database: unable to open database file"


def test_without_optuna_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ConfigError, match=r"rl-lightning\[tune\]"):
        tune(["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE)], fit_trial)


@pytest.mark.parametrize("space", sorted((ROOT / "configs").glob("*/*.tune.yaml")), ids=lambda p: p.name)
def test_shipped_search_spaces_fit_the_config_beside_them(space):
    config = space.with_name(space.name.replace(".tune.yaml", ".yaml"))
    assert load_space(space, algorithm_of([str(config)]))


def test_seeds_run_as_populations_one_per_worker_and_aggregate_over_members(tmp_path, monkeypatch, capfd):
    # PPO trains populations: --jobs 2 splits seeds 0-2 into the populations [0, 1] and [2] (a run of its own).
    # The command in this process (a subprocess paid ~7 s of imports); its workers are processes of their own,
    # so capfd: what they print would show.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tune(["--config", PPO_CARTPOLE, "--seeds", "0-2", "--jobs", "2", *TINY[:-2], *TWO_EVALUATIONS], fit_trial)
    out = capfd.readouterr().out
    assert out.count("| seed | final | best | run |") == 1  # the workers do not report
    assert re.search(r"\| final \| 3 \| [-\d.]+ \[[-\d.]+, [-\d.]+\] \|", out)
    root = tmp_path / "runs/tune/ppo_cartpole_seeds"
    trials = load(f"sqlite:///{root / 'study.db'}", "ppo_cartpole_seeds").trials
    assert sorted(t.user_attrs.get("seeds", [t.user_attrs.get("seed")]) for t in trials) == [[0, 1], [2]]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:
        config = yaml.safe_load((tmp_path / t.user_attrs["run_dir"] / "config.yaml").read_text())
        seeds = t.user_attrs.get("seeds", [t.user_attrs.get("seed")])
        assert config["seed_everything"] == seeds[0]
        assert config["model"]["init_args"]["run"]["population_seeds"] == (seeds if len(seeds) > 1 else [])
    assert (root / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # A longer seed list on the same study runs only the new seeds.
    tune(["--config", PPO_CARTPOLE, "--seeds", "0-3", *TINY[:-2], *TWO_EVALUATIONS], fit_trial)
    out = capfd.readouterr().out
    assert out.count("Run: ") == 1 and "| final | 4 |" in out


def test_seeds_of_ppo_are_one_population_fit_whose_members_the_report_lists(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    study = tune(["--config", PPO_CARTPOLE, "--seeds", "0,1", *TINY[:-2], *TWO_EVALUATIONS], fit_trial)
    (trial,) = study.trials  # one fit for both seeds
    run = tmp_path / trial.user_attrs["run_dir"]
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["run"]["population_seeds"] == [0, 1]
    out = capsys.readouterr().out
    finals = []
    for k, seed in enumerate((0, 1)):
        returns = load_scalars(run, f"member_{k}/val/episode_return")[1]
        assert f"| {seed} | {returns[-1]:g} | {returns.max():g} | {trial.user_attrs['run_dir']} |" in out
        finals.append(returns[-1])
    assert re.search(rf"\| final \| 2 \| {sum(finals) / 2:.4g} \[", out)


class FakeFit:
    """A fit that records its arguments and reports one evaluation return (its seed), in no time."""

    def __init__(self, tmp_path: Path) -> None:
        self.calls, self.tmp_path = [], tmp_path

    def __call__(self, args: list[str], report) -> object:
        self.calls.append(args)
        seed = int(args[len(args) - 1 - args[::-1].index("--seed_everything") + 1])
        report.returns.append(float(seed))
        report.member_returns.append([float(seed)])
        return type("Trainer", (), {"log_dir": str(self.tmp_path / f"run_{len(self.calls)}")})()


@pytest.mark.parametrize(
    "config, extra",
    [
        ("pqn/cartpole", []),
        ("ppo/cartpole", ["--no_population"]),
        ("ppo/cartpole", ["--model.run.population", "2"]),
        ("ppo/pendulum", []),  # normalize_obs: true, which a population refuses
        ("dqn/cartpole", ["--model.prioritized_replay", "true"]),
        ("sac/mountaincarcontinuous", ["--model.use_sde=true"]),
    ],
    ids=["no-populations", "no_population", "own-population", "config-excludes", "argument-excludes", "argument="],
)
def test_seeds_run_one_fit_each_without_populations_or_with_the_users_own(tmp_path, monkeypatch, config, extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rl_lightning.tune.plot_learning_curves", lambda *args: None)  # FakeFit writes no curves
    fit = FakeFit(tmp_path)
    study = tune(["--config", str(ROOT / f"configs/{config}.yaml"), "--seeds", "0-2", *extra], fit)
    assert sorted(t.user_attrs["seed"] for t in study.trials) == [0, 1, 2]
    assert not any("--model.run.population_seeds" in call for call in fit.calls)


def test_trial_seeds_are_one_population_per_trial_and_optimize_the_mean_over_members(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "1", "--pruner", "none"]
    study = tune([*argv, "--trial_seeds", "3,4", "--objective", "last", *TINY[:-2], *TWO_EVALUATIONS], fit_trial)
    (trial,) = study.trials
    run = tmp_path / "runs/tune/ppo_cartpole/trial_0/version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["init_args"]["run"]["population_seeds"] == [3, 4] and config["seed_everything"] == 3
    finals = [float(load_scalars(run, f"member_{k}/val/episode_return")[1][-1]) for k in range(2)]
    assert trial.value == pytest.approx(sum(finals) / 2)


@pytest.mark.parametrize("seeds", ["a,b", "3-1", ""])
def test_bad_seed_lists_are_refused(tmp_path, monkeypatch, seeds):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--seeds"):
        tune(["--config", PPO_CARTPOLE, "--seeds", seeds], fit_trial)


def test_trial_seeds_without_a_population_optimize_the_mean_over_seeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fit = FakeFit(tmp_path)
    argv = ["--config", PPO_CARTPOLE, "--space", write_space(tmp_path, SPACE), "--n_trials", "1", "--pruner", "none"]
    study = tune([*argv, "--trial_seeds", "3,4", "--no_population"], fit)
    assert [call[call.index("--trainer.logger.init_args.name") + 1] for call in fit.calls] == [
        "tune/ppo_cartpole/trial_0/seed_3",
        "tune/ppo_cartpole/trial_0/seed_4",
    ]
    assert study.trials[0].value == pytest.approx(3.5)  # FakeFit's returns: the seeds
