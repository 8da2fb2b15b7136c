import pytest
import torch

# Before the import below: pytest's assertion messages for the asserts in the shared helpers too
# (assert_matches_golden), as for those in test modules.
pytest.register_assert_rewrite("tests.helpers")

import tests.helpers  # noqa: E402, F401  (registers the toy envs the CLI tests name by id)
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
