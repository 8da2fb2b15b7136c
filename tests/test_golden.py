"""Golden results: small fits of every algorithm on fixed seeds, compared with results recorded earlier.

A refactor must not change what the library computes. Each case trains for a few hundred to a few
thousand env steps and compares the final parameters and buffers, the replay buffer's contents, the
env-step and optimizer-step counters and the evaluation return with ``tests/golden/<case>.pt``.

On a CPU that recorded them the comparison is exact. Elsewhere float rounding may differ in the last
bits (vector math libraries take other paths on other CPUs, even of one vector capability), and in
some cases further than a fixed tolerance allows (CrossQ's run ends up to 0.04 apart on an AMD EPYC and
an Intel Xeon), so each CPU the suite runs on regularly keeps its own recording of the same runs,
``<case>@<cpu>.pt``, made from the same commit as ``<case>.pt``; on any other CPU the comparison is a
tight tolerance against ``<case>.pt``.

Re-record (only for an intended change, explained in its commit; this drops the other CPUs' recordings,
which that change makes stale)::

    RL_LIGHTNING_RECORD_GOLDEN=1 pytest tests/test_golden.py

Add this CPU's recording of the current goldens (only on a commit whose code computes what they hold)::

    RL_LIGHTNING_RECORD_GOLDEN=this-cpu pytest tests/test_golden.py
"""

import os

import pytest
import torch

from tests.helpers import (
    GOLDEN,
    GOLDEN_CASES,
    assert_matches_golden,
    golden_paths,
    golden_variant_path,
    run_golden_case,
)

RECORD = os.environ.get("RL_LIGHTNING_RECORD_GOLDEN")


@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_results_match_the_recorded_goldens(name):
    got = run_golden_case(name)
    if RECORD == "1":
        GOLDEN.mkdir(exist_ok=True)
        for stale in golden_paths(name)[1:]:
            stale.unlink()
        torch.save(got, GOLDEN / f"{name}.pt")
        pytest.skip(f"recorded {name}")
    if RECORD == "this-cpu":
        torch.save(got, golden_variant_path(name, got["fingerprint"]))
        pytest.skip(f"recorded {name} for {got['fingerprint']}")
    assert_matches_golden(name, got)
