import pytest
import torch

import tests.helpers  # noqa: F401  (registers the toy envs the CLI tests name by id)
from tests.helpers import quick_trainer

torch.set_num_threads(1)


@pytest.fixture
def trainer_factory():
    return quick_trainer
