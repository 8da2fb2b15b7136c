"""Learning curves from TensorBoard runs: two seeds become one mean curve with a band, in a PNG."""

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from rl_lightning.plotting import aggregate, find_runs, load_scalars, main, plot_learning_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir, points, tag="val/episode_return", fit=True):
    writer = SummaryWriter(str(run_dir))
    for step, value in points:
        writer.add_scalar(tag, value, step)
        if fit:  # every fit logs the env-step counter; validate and test do not
            writer.add_scalar("time/env_steps", step, step)
    writer.close()


def write_hparams(run_dir, **hparams):
    import yaml

    (run_dir / "hparams.yaml").write_text(yaml.safe_dump(hparams))


def write_cli_run(run_dir, points, seed=0, total_env_steps=3000, **trainer):
    """A fit as ``rl-lightning fit`` leaves it (of its config.yaml, what matters here): besides the seed,
    seeds differ in logger version, checkpoint path, progress bar and ``ckpt_path``, none a new config."""
    import yaml

    write_run(run_dir, points)
    model = {
        "env": {"env_id": "CartPole-v1", "seed": None},
        "run": {"total_env_steps": total_env_steps, "env_steps_per_epoch": 1000},
        "learning_rate": 0.001,
    }
    write_hparams(run_dir, _instantiator="lightning.pytorch.cli.instantiate_module", **model)
    logger = {"save_dir": "runs", "name": "ppo_cartpole", "version": seed}
    progress_bar = {"class_path": "rl_lightning.callbacks.RLProgressBar", "init_args": {"refresh_seconds": 30.0}}
    config = {
        "seed_everything": seed,
        "trainer": {
            "accelerator": "auto",
            "strategy": "auto",
            "devices": "auto",
            "precision": None,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": logger},
            "callbacks": [progress_bar] if seed else None,
            "enable_progress_bar": bool(seed),
            **trainer,
        },
        "model": {"class_path": "rl_lightning.PPO", "init_args": model},
        "checkpoint": {"dirpath": f"checkpoints/seed{seed}", "filename": "best-epoch{epoch}"},
        "compile": False,
        "ckpt_path": "last" if seed else None,
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture
def two_seeds(tmp_path):
    write_run(tmp_path / "runs/ppo_cartpole/version_0", [(1000, 10.0), (2000, 30.0), (3000, 50.0)])
    write_run(tmp_path / "runs/ppo_cartpole/version_1", [(1000, 20.0), (2000, 50.0), (3000, 70.0)])
    return tmp_path / "runs/ppo_cartpole"


def test_two_seeds_make_a_png_with_mean_and_band(two_seeds, tmp_path):
    out = tmp_path / "plots/curves.png"
    fig = plot_learning_curves([two_seeds], out)
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 10_000
    (ax,) = fig.axes
    (line,) = ax.get_lines()
    assert line.get_label() == "ppo_cartpole (2 runs)"
    assert line.get_xdata().tolist() == [1000, 2000, 3000] and line.get_ydata().tolist() == [15.0, 40.0, 60.0]
    (band,) = ax.collections  # the min-max band
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == 10.0 and ys.max() == 70.0
    assert ax.get_xlabel() == "env steps"


def test_a_populations_members_are_drawn_as_seeds(tmp_path, capsys):
    run = tmp_path / "runs/sac_pendulum/version_0"
    writer = SummaryWriter(str(run))
    for step in (1000, 2000):
        writer.add_scalar("val/episode_return", -999.0, step)  # the members' mean: not what is drawn
        for k, value in enumerate((-300.0, -100.0, -200.0)):
            writer.add_scalar(f"member_{k}/val/episode_return", value * step / 1000, step)
        writer.add_scalar("time/env_steps", step, step)
    writer.close()
    (ax,) = plot_learning_curves([run.parent]).axes
    assert "1 run (holding 3 population members, each drawn as a run)" in capsys.readouterr().err
    (line,) = ax.get_lines()
    assert line.get_label() == "sac_pendulum (3 runs)" and line.get_ydata().tolist() == [-200.0, -400.0]
    ys = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == -600.0 and ys.max() == -100.0


def test_aggregate_interpolates_onto_the_common_range():
    a = (np.array([0, 10, 20]), np.array([0.0, 10.0, 20.0]))
    b = (np.array([5, 15, 25]), np.array([5.0, 5.0, 5.0]))
    steps, mean, low, high = aggregate([a, b])
    assert steps.tolist() == [5, 10, 15, 20]  # the union of points where both runs have data
    assert mean.tolist() == [5.0, 7.5, 10.0, 12.5] and low.tolist() == [5.0] * 4 and high.tolist() == [5, 10, 15, 20]
    _, mean, low, high = aggregate([a, b], spread="std")
    assert np.allclose(high - mean, [0.0, 2.5, 5.0, 7.5]) and np.allclose(mean - low, high - mean)


def test_a_resumed_run_keeps_the_latest_value_of_a_step(tmp_path):
    write_run(tmp_path / "run", [(100, 1.0), (200, 2.0)])
    write_run(tmp_path / "run", [(200, 5.0), (300, 6.0)])  # resumed from the checkpoint at step 100
    assert find_runs(tmp_path) == [tmp_path / "run"]
    steps, values = load_scalars(tmp_path / "run")
    assert steps.tolist() == [100, 200, 300] and values.tolist() == [1.0, 5.0, 6.0]
    with pytest.raises(KeyError, match="no scalar 'nope'"):
        load_scalars(tmp_path / "run", "nope")


def test_command_line_with_labels(two_seeds, tmp_path, capsys):
    out = tmp_path / "cli.png"
    main([f"PPO={two_seeds / 'version_0'}", f"PPO={two_seeds / 'version_1'}", "-o", str(out), "--spread", "std"])
    assert out.read_bytes()[:8] == PNG_MAGIC and capsys.readouterr().out.strip() == str(out)
    with pytest.raises(FileNotFoundError):
        plot_learning_curves([tmp_path / "missing"])


def test_validate_runs_and_failed_fits_are_skipped_and_named(two_seeds, tmp_path, capsys):
    write_run(two_seeds / "version_2", [(3000, 500.0)], fit=False)  # what `rl-lightning validate` leaves
    (two_seeds / "version_3").mkdir()  # a fit that failed at once: hparams, no scalars
    write_hparams(two_seeds / "version_3", learning_rate=0.1)
    fig = plot_learning_curves([two_seeds])
    (line,) = fig.axes[0].get_lines()
    assert line.get_label() == "ppo_cartpole (2 runs)"
    err = capsys.readouterr().err
    assert "skipped" in err and "version_2" in err and "version_3" not in err  # no event files: not a run


def test_runs_of_different_configurations_are_separate_curves(tmp_path):
    root = tmp_path / "runs/ppo_cartpole"
    for version, (env_id, seed) in enumerate([("CartPole-v1", 0), ("CartPole-v1", 1), ("Acrobot-v1", 0)]):
        run = root / f"version_{version}"
        write_run(run, [(1000, 10.0 * (version + 1)), (2000, 20.0)])
        write_hparams(run, env={"env_id": env_id, "seed": seed}, learning_rate=0.001)
    fig = plot_learning_curves([root])
    labels = sorted(line.get_label() for line in fig.axes[0].get_lines())
    assert labels == ["ppo_cartpole [env.env_id=Acrobot-v1]", "ppo_cartpole [env.env_id=CartPole-v1] (2 runs)"]


def test_runs_of_different_budgets_are_separate_curves_not_cut_to_the_shortest(tmp_path):
    root = tmp_path / "runs/ppo_cartpole"
    long = [(1000, 10.0), (2000, 20.0), (3000, 30.0)]
    write_cli_run(root / "version_0", long, seed=0)
    write_cli_run(root / "version_1", long, seed=1)
    write_cli_run(root / "version_2", long[:2], seed=0, total_env_steps=2000)
    lines = {line.get_label(): line for line in plot_learning_curves([root]).axes[0].get_lines()}
    assert sorted(lines) == [
        "ppo_cartpole [run.total_env_steps=2000]",
        "ppo_cartpole [run.total_env_steps=3000] (2 runs)",
    ]
    assert lines["ppo_cartpole [run.total_env_steps=3000] (2 runs)"].get_xdata().tolist() == [1000, 2000, 3000]
    assert lines["ppo_cartpole [run.total_env_steps=2000]"].get_xdata().tolist() == [1000, 2000]


def test_runs_of_different_trainer_settings_are_separate_curves(tmp_path):
    root = tmp_path / "runs/ppo_cartpole"
    points = [(1000, 10.0), (2000, 20.0)]
    write_cli_run(root / "version_0", points, seed=0)
    write_cli_run(root / "version_1", points, seed=1)
    write_cli_run(root / "version_2", points, seed=0, precision="bf16-mixed")
    write_cli_run(root / "version_3", points, seed=0, devices=2, strategy="ddp")
    labels = sorted(line.get_label() for line in plot_learning_curves([root]).axes[0].get_lines())
    assert labels == [
        "ppo_cartpole [trainer.devices=2, trainer.precision=None, trainer.strategy=ddp]",
        "ppo_cartpole [trainer.devices=auto, trainer.precision=None, trainer.strategy=auto] (2 runs)",
        "ppo_cartpole [trainer.devices=auto, trainer.precision=bf16-mixed, trainer.strategy=auto]",
    ]


def test_runs_differing_only_in_seed_share_a_curve_and_the_merge_is_reported(tmp_path, capsys):
    root = tmp_path / "runs/ppo_cartpole"
    runs = [root / f"version_{seed}" for seed in range(3)]
    for seed, run in enumerate(runs):  # also differing in logger version, checkpoint path, progress bar, ckpt_path
        write_cli_run(run, [(1000, 10.0 * seed), (2000, 20.0)], seed=seed)
    (line,) = plot_learning_curves([root]).axes[0].get_lines()
    assert line.get_label() == "ppo_cartpole (3 runs)"
    err = capsys.readouterr().err
    assert f"curve 'ppo_cartpole': 3 runs, seeds 0, 1, 2: {runs[0]}, {runs[1]}, {runs[2]}\n" in err
    assert "warning" not in err


def test_an_explicit_group_is_merged_as_given_with_a_warning_naming_the_differences(tmp_path, capsys):
    root = tmp_path / "runs/ppo_cartpole"
    write_cli_run(root / "version_0", [(1000, 10.0), (2000, 20.0), (3000, 30.0)], seed=0)
    write_cli_run(root / "version_1", [(1000, 10.0), (2000, 20.0)], seed=1, total_env_steps=2000, precision="16-mixed")
    write_cli_run(root / "version_2", [(1000, 10.0), (2000, 20.0), (3000, 30.0)], seed=2)
    groups = {"mixed": [root / "version_0", root / "version_1"], "seeds": [root / "version_0", root / "version_2"]}
    labels = sorted(line.get_label() for line in plot_learning_curves(groups).axes[0].get_lines())
    assert labels == ["mixed (2 runs)", "seeds (2 runs)"]
    err = capsys.readouterr().err.splitlines()
    assert f"curve 'mixed': 2 runs, seeds 0, 1: {root / 'version_0'}, {root / 'version_1'}" in err
    differences = "run.total_env_steps (3000, 2000), trainer.precision (None, 16-mixed)"
    assert [line for line in err if line.startswith("warning")] == [
        f"warning: curve 'mixed' merges runs that differ in {differences}"
    ]


def test_fit_then_validate_then_plot_counts_the_fit_only(tmp_path, monkeypatch, capsys):
    """The README's sequence: `fit`, `validate --ckpt_path last`, then the plot: one run (validate writes
    no run directory)."""
    from pathlib import Path

    from rl_lightning.cli import main as cli

    monkeypatch.chdir(tmp_path)
    config = str(Path(__file__).resolve().parents[1] / "configs/ppo/cartpole.yaml")
    tiny = ["--model.run.total_env_steps", "512", "--model.run.env_steps_per_epoch", "256"]
    quiet = ["--model.run.eval_episodes", "1", "--trainer.enable_progress_bar", "false"]
    cli(["fit", "--config", config, *tiny, *quiet])
    cli(["validate", "--config", config, "--ckpt_path", "last", *quiet])
    runs = find_runs(tmp_path / "runs/ppo_cartpole")
    assert [run.name for run in runs] == ["version_0"]
    fig = plot_learning_curves([tmp_path / "runs/ppo_cartpole"])
    (line,) = fig.axes[0].get_lines()
    assert line.get_label() == "ppo_cartpole" and line.get_xdata().tolist() == [256, 512]
    err = capsys.readouterr().err
    assert f"curve 'ppo_cartpole': 1 run, seed 0: {runs[0]}\n" in err
