"""What a user must be able to trust: no checkpoint runs code, `last` is this run, exit codes tell the
truth, a fit runs at the same speed whatever was imported first, and bad input is one line."""

import errno
import http.server
import os
import pickle
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback

from rl_lightning import PPO, QRDQN, EnvConfig, RunConfig
from rl_lightning.callbacks import LastCheckpoint
from rl_lightning.checkpointing import (
    ReplaySideFileIO,
    atomic_write,
    checkpoint_problem,
    hyperparameter_changes,
    newest_loadable,
    read_checkpoint,
)
from rl_lightning.cli import debugging
from rl_lightning.errors import ConfigError
from tests.helpers import ROOT, quick_trainer

CONFIG = str(ROOT / "configs/ppo/cartpole.yaml")
TINY = (
    *("--model.run.total_env_steps", "512", "--model.run.env_steps_per_epoch", "256"),
    *("--model.run.eval_episodes", "1", "--trainer.enable_progress_bar", "false"),
)


class Payload:
    """A pickle whose loading runs code: it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_evil(path: Path, marker: Path) -> Path:
    # A Lightning-looking checkpoint with the payload inside, as an attacker would serve it.
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {}, "x": Payload(marker)}, path)
    return path


@pytest.fixture
def served(tmp_path):
    """A local HTTP server over ``tmp_path / "www"``; yields its base URL."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------------------ no code runs
@pytest.mark.parametrize("subcommand", ["validate", "fit"])
def test_a_checkpoint_url_never_runs_code(subcommand, served, tmp_path, cli_here):
    root, url = served
    marker = tmp_path / "pwned"
    write_evil(root / "evil.ckpt", marker)
    result = cli_here(subcommand, "--config", CONFIG, *TINY, "--ckpt_path", f"{url}/evil.ckpt")
    assert not marker.exists(), "the pickle's payload ran"
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(errors) == 1 and "refused" in errors[0] and "posix.system" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_local_symlinked_and_home_checkpoints_never_run_code(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    evil = write_evil(tmp_path / "evil.ckpt", marker)
    (tmp_path / "link.ckpt").symlink_to(evil)
    monkeypatch.setenv("HOME", str(tmp_path))
    for path in (evil, tmp_path / "link.ckpt", "~/evil.ckpt"):
        with pytest.raises(ConfigError, match="refused: it holds Python objects"):
            read_checkpoint(path)
        with pytest.raises(ConfigError, match="refused"):
            PPO.load_from_checkpoint(path)
        assert "refused" in checkpoint_problem(Path(path).expanduser())
    with pytest.raises(ConfigError, match="weights_only=False"):
        PPO.load_from_checkpoint(evil, weights_only=False)
    assert not marker.exists()


def test_the_python_api_reads_urls_and_resumes_with_weights_only(served, tmp_path):
    root, url = served
    model = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(512, 256, 1), num_steps=32)
    trainer = quick_trainer(default_root_dir=tmp_path, enable_checkpointing=True)
    trainer.fit(model)
    shutil.copy(trainer.checkpoint_callback.best_model_path, root / "good.ckpt")
    loaded = PPO.load_from_checkpoint(f"{url}/good.ckpt")
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())

    marker = tmp_path / "pwned"
    write_evil(root / "evil.ckpt", marker)
    with pytest.raises(ConfigError, match="refused"):
        PPO.load_from_checkpoint(f"{url}/evil.ckpt")
    fresh = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(1024, 256, 1), num_steps=32)
    with pytest.raises(ConfigError, match="refused"):
        quick_trainer(default_root_dir=tmp_path).fit(fresh, ckpt_path=f"{url}/evil.ckpt")
    assert not marker.exists()


# ----------------------------------------------------------------------------- last = this run
def test_last_resumes_the_run_trained_with_this_config_not_the_newest(tmp_path, cli_here):
    """Run A, then B with another learning rate: `last` with A's config continues A, and says so."""
    assert cli_here("fit", "--config", CONFIG, *TINY, "--seed_everything", "0").returncode == 0
    assert (
        cli_here("fit", "--config", CONFIG, *TINY, "--seed_everything", "0", "--model.learning_rate", "3e-4").returncode
        == 0
    )
    runs = tmp_path / "runs/ppo_cartpole"
    a_dir, b_dir = runs / "version_0", runs / "version_1"

    val = cli_here("validate", "--config", CONFIG, *TINY, "--seed_everything", "0", "--ckpt_path", "last")
    assert val.returncode == 0, val.stderr[-2000:]
    assert f"evaluating run {Path('runs/ppo_cartpole/version_0')}, checkpoint last.ckpt at env step 512" in val.stderr
    assert not [w for w in val.warnings if "hyperparameters" in w or "deprecated" in w], val.warnings  # A's own
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]  # validate wrote no version

    # A config that matches no run: the newest, with each difference named.
    other = cli_here(
        "validate", "--config", CONFIG, *TINY, "--seed_everything", "0", "--model.gamma", "0.9", "--ckpt_path", "last"
    )  # fmt: skip
    assert other.returncode == 0, other.stderr[-2000:]
    assert "No run under runs/ppo_cartpole was trained with this config" in other.stderr
    assert "model.gamma: 0.98 -> 0.9" in other.stderr and "model.learning_rate: 0.0003 -> 0.001" in other.stderr
    assert f"{b_dir.relative_to(tmp_path)}/checkpoints/last.ckpt" in other.stderr

    # Resuming A with a raised budget: A continues (the difference is named), its two files agree.
    more = cli_here(
        "fit", "--config", CONFIG, *TINY, "--seed_everything", "0", "--model.run.total_env_steps", "768",
        "--ckpt_path", "last",
    )  # fmt: skip
    assert more.returncode == 0, more.stderr[-2000:]
    assert "resuming run runs/ppo_cartpole/version_0, checkpoint last.ckpt at env step 512" in more.stderr
    assert any("run.total_env_steps: 512 -> 768" in w for w in more.warnings)  # RLModule's, naming the change
    assert torch.load(a_dir / "checkpoints/last.ckpt", weights_only=True)["rl_lightning"]["env_steps"] == 768
    config = yaml.safe_load((a_dir / "config.yaml").read_text())["model"]["init_args"]
    hparams = yaml.safe_load((a_dir / "hparams.yaml").read_text())
    assert config["run"]["total_env_steps"] == hparams["run"]["total_env_steps"] == 768
    assert torch.load(b_dir / "checkpoints/last.ckpt", weights_only=True)["rl_lightning"]["env_steps"] == 512


def test_resuming_with_other_hyperparameters_warns_naming_each(tmp_path):
    model = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(512, 256, 1), num_steps=32)
    trainer = quick_trainer(default_root_dir=tmp_path, enable_checkpointing=True)
    trainer.fit(model)
    ckpt = trainer.checkpoint_callback.best_model_path
    changed = PPO(
        env=EnvConfig("CartPole-v1", num_envs=2), run=RunConfig(1024, 256, 1), num_steps=32, learning_rate=1e-3
    )
    with pytest.warns(UserWarning, match=r"other hyperparameters than this PPO's \(checkpoint -> now\)") as w:
        quick_trainer(default_root_dir=tmp_path).fit(changed, ckpt_path=ckpt)
    (message,) = [str(x.message) for x in w if "other hyperparameters" in str(x.message)]
    assert "learning_rate: 0.00025 -> 0.001" in message and "run.total_env_steps: 512 -> 1024" in message
    assert "env.seed" not in message
    same = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(512, 256, 1), num_steps=32)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*other hyperparameters.*")
        quick_trainer(default_root_dir=tmp_path).validate(same, ckpt_path=ckpt)


def test_a_config_field_added_since_the_checkpoint_is_a_change_only_off_its_default():
    # A checkpoint (or a run's config.yaml) written before run.population_ddp existed trained as its default does.
    saved = {"model": {"learning_rate": 1e-3, "run": {"total_env_steps": 512, "population": 1}}}
    run = {"total_env_steps": 512, "population": 1, "population_ddp": "split"}
    now = {"model": {"learning_rate": 1e-3, "run": run}}
    assert hyperparameter_changes(saved, now) == []
    now["model"]["run"]["population_ddp"] = "replicate"
    assert hyperparameter_changes(saved, now) == ["model.run.population_ddp: '(absent)' -> 'replicate'"]
    now["model"]["gamma"] = 0.99  # not a config field: absent before is a change
    assert "model.gamma: '(absent)' -> 0.99" in hyperparameter_changes(saved, now)
    # An argument of the module (or of a base class it passes arguments on to) added since, at its default.
    assert "model.anneal_lr: '(absent)' -> False" in hyperparameter_changes(saved, {"model": {"anneal_lr": False}})
    for added in ({"model": {"anneal_lr": False}}, {"anneal_lr": False}):  # CLI config, checkpoint hparams
        assert not [c for c in hyperparameter_changes(saved, added, module=QRDQN) if "anneal_lr" in c]
    assert hyperparameter_changes({}, {"anneal_lr": True}, module=QRDQN) == ["anneal_lr: '(absent)' -> True"]


# ------------------------------------------------------------------------------- side files
def test_a_truncated_replay_side_file_makes_its_checkpoint_unusable_and_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(ReplaySideFileIO, "min_bytes", 1)
    io = ReplaySideFileIO(TorchCheckpointIO())
    state = {"rl_lightning": {"env_steps": 100, "replay_buffer": {"obs": torch.arange(10_000.0)}}}
    io.save_checkpoint(state, tmp_path / "best-epoch0.ckpt")
    os.utime(tmp_path / "best-epoch0.ckpt", (1, 1))  # older than last.ckpt
    io.save_checkpoint({"rl_lightning": {**state["rl_lightning"], "env_steps": 200}}, tmp_path / "last.ckpt")
    side = tmp_path / "last.ckpt.replay-000000000200.pt"
    side.write_bytes(side.read_bytes()[: side.stat().st_size // 2])

    problem = checkpoint_problem(tmp_path / "last.ckpt")
    assert problem.startswith(f"its replay side file {side} does not load (truncated or corrupt: ")
    found, skipped = newest_loadable(list(tmp_path.glob("*.ckpt")))
    assert found == tmp_path / "best-epoch0.ckpt" and skipped == [(tmp_path / "last.ckpt", problem)]
    with pytest.raises(ConfigError, match=r"replay-000000000200\.pt, which does not load"):
        io.load_checkpoint(tmp_path / "last.ckpt")


def test_stale_temporary_files_are_removed_when_a_run_starts(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    stale = checkpoints / ".last.ckpt.replay-000000000200.pt.abc123.tmp"
    stale.write_bytes(b"")  # what a kill in the middle of a side-file write leaves
    model = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(256, 256, 1), num_steps=32)
    quick_trainer(enable_checkpointing=True, callbacks=[LastCheckpoint(dirpath=checkpoints)]).fit(model)
    assert not stale.exists() and (checkpoints / "last.ckpt").exists()


# ------------------------------------------------------------------------------ exit codes, disk
def test_a_full_disk_inside_torchs_writer_says_no_space_left_and_names_the_file(tmp_path):
    class FullDisk:  # the checkpoint's file on a disk that fills after `room` bytes
        def __init__(self, f, room):
            self.f, self.room = f, room

        def write(self, data):
            if len(data) > self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= len(data)
            return self.f.write(data)

        def flush(self):
            self.f.flush()

    target = tmp_path / "last.ckpt"
    for room in (0, 100, 10_000):  # before torch writes anything, after its header, mid-tensor
        with pytest.raises(OSError, match=rf"No space left on device while writing: '{target}'") as info:
            atomic_write(target, lambda f, room=room: torch.save({"w": torch.zeros(10_000)}, FullDisk(f, room)))
        assert info.value.errno == errno.ENOSPC and not list(tmp_path.iterdir())


def test_a_failed_save_on_the_way_out_does_not_claim_a_previous_checkpoint(tmp_path, monkeypatch):
    callback = LastCheckpoint(dirpath=tmp_path)

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lightning.pytorch.callbacks.ModelCheckpoint.on_exception", full)
    with pytest.warns(UserWarning, match="no earlier checkpoint exists"):
        callback.on_exception(None, None, RuntimeError("env fault"))
    callback.last_model_path = str(tmp_path / "last.ckpt")
    with pytest.warns(UserWarning, match=r"the previous one, .*last\.ckpt, is intact"):
        callback.on_exception(None, None, RuntimeError("env fault"))


def test_a_runaway_learning_rate_stops_the_run_with_exit_1_and_no_checkpoint(tmp_path, cli_here):
    result = cli_here("fit", "--config", CONFIG, *TINY, "--model.learning_rate", "1e6")
    assert result.returncode == 1, result.stderr[-2000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("rl-lightning: error:")]
    assert "PPO diverged" in line and "max_abs_weight=1e+06" in line and ".." not in line
    assert not list(tmp_path.glob("runs/*/*/checkpoints/*.ckpt"))


# ---------------------------------------------------------------------------------- threads
def test_the_fit_chooses_torch_threads_whatever_was_imported_first(monkeypatch):
    seen = []

    class Probe(Callback):
        def on_train_batch_end(self, *args):
            seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # as a script that imported torch before rl_lightning runs
        for omp, expected in ((None, 1), ("2", 2)):
            if omp is None:
                monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
            else:
                monkeypatch.setenv("OMP_NUM_THREADS", omp)
            seen.clear()
            model = PPO(env=EnvConfig("CartPole-v1", num_envs=2, seed=0), run=RunConfig(128, 128, 1), num_steps=32)
            quick_trainer(callbacks=[Probe()]).fit(model)
            assert seen and set(seen) == {expected}
            assert torch.get_num_threads() == 2  # the caller's setting, back after the fit
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- small papercuts
def test_env_modules_import_from_the_current_directory(tmp_path):
    script = Path(sys.executable).parent / "rl-lightning"
    if not script.exists():
        pytest.skip("the rl-lightning console script is not installed here")
    (tmp_path / "myenvs.py").write_text(
        "from gymnasium.envs.classic_control import CartPoleEnv\n\nclass MyCartPole(CartPoleEnv):\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    args = ["fit", "--config", CONFIG, *TINY, "--model.env.env_id", "myenvs:MyCartPole"]
    result = subprocess.run([str(script), *args], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_run_that_fails_before_its_first_step_leaves_no_run_directory(tmp_path, cli_here):
    result = cli_here("fit", "--config", CONFIG, *TINY, "--model.env.env_id", "NoSuchEnv-v0")
    assert result.returncode == 2 and "Unknown environment id 'NoSuchEnv-v0'" in result.stderr
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True


def test_a_yaml_syntax_error_keeps_its_line_and_column(tmp_path, cli_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  class_path: rl_lightning.PPO\n  init_args:\n    num_steps: [32\n    gamma: 0.9\n")
    result = cli_here("fit", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"rl-lightning: error: {bad} line 5, column 10: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence)."
    ]


def test_rl_lightning_debug_0_means_off(tmp_path, monkeypatch, cli_here):
    for value, on in (("0", False), ("false", False), ("", False), ("off", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("RL_LIGHTNING_DEBUG", value)
        assert debugging() is on, value
    monkeypatch.setenv("RL_LIGHTNING_DEBUG", "0")
    result = cli_here("fit", "--config", CONFIG, *TINY, "--model.learning_rate", "1e6")
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_pickle_module_is_what_torch_raises_for_a_refused_global(tmp_path):
    # read_checkpoint's refusal relies on torch raising pickle.UnpicklingError for unsupported globals.
    evil = write_evil(tmp_path / "evil.ckpt", tmp_path / "pwned")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(evil, weights_only=True)
