"""Golden results: small fits of every algorithm on fixed seeds, compared with results recorded earlier.

A refactor must not change what the library computes. Each case trains for a few hundred to a few
thousand env steps and compares the final parameters and buffers, the replay buffer's contents, the
env-step and optimizer-step counters and the evaluation return with ``tests/golden/<case>.pt``.

On the machine the goldens were recorded on (same CPU capability and torch version) the comparison
is exact. Elsewhere float rounding may differ in the last bits (vector math libraries take other
paths on other CPUs), so it is a tight tolerance there.

Re-record (only for an intended change, explained in its commit)::

    RL_LIGHTNING_RECORD_GOLDEN=1 pytest tests/test_golden.py
"""

import os

import pytest
import torch

from tests.helpers import GOLDEN, GOLDEN_CASES, assert_matches_golden, run_golden_case

RECORD = os.environ.get("RL_LIGHTNING_RECORD_GOLDEN") == "1"


@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_results_match_the_recorded_goldens(name):
    got = run_golden_case(name)
    path = GOLDEN / f"{name}.pt"
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        torch.save(got, path)
        pytest.skip(f"recorded {path}")
    assert_matches_golden(name, got)
