import subprocess
import sys
import warnings

import pytest
import torch

# Before the import below: pytest's assertion messages for the asserts in the shared helpers too
# (assert_matches_golden), as for those in test modules.
pytest.register_assert_rewrite("tests.helpers")

import tests.helpers  # noqa: E402, F401  (registers the toy envs the CLI tests name by id)
from rl_lightning.cli import main  # noqa: E402
from tests.helpers import quick_trainer  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def trainer_factory():
    return quick_trainer


@pytest.fixture(autouse=True)
def no_leaked_global_seed(monkeypatch):
    """``L.seed_everything`` leaves ``PL_GLOBAL_SEED`` in the environment, where a later CLI fit in the same
    worker would take it as its seed: each test starts without it (the CLI's own default then applies)."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)


@pytest.fixture
def cli_here(tmp_path, monkeypatch, capsys, caplog):
    """``cli_here(*args)``: the CLI's ``main`` in this process, in ``tmp_path``, as the console script runs it (a
    subprocess per command paid ~7 s of imports on a 2-core machine; ``tests.helpers.cli`` runs one where the
    process itself is under test). Returns a ``CompletedProcess`` with the exit code, stdout and stderr (with
    the messages logged, which Lightning's handler prints on stderr), and ``.warnings``: the messages of the
    warnings raised (a subprocess prints them on stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # the console script's own (pytest's would warn)
    monkeypatch.setattr(sys, "path", [*sys.path])  # main puts the working directory first: undone after the test

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                main(list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        out = capsys.readouterr()
        logged = "".join(f"{record.getMessage()}\n" for record in caplog.records)
        result = subprocess.CompletedProcess(["rl-lightning", *args], code, out.out, out.err + logged)
        result.warnings = [str(w.message) for w in caught]
        return result

    return run
