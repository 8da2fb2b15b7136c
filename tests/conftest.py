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
