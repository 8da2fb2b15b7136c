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

import collections
import os
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy

from rl_lightning import PPO
from rl_lightning.algorithms.base import STEP_HOOKS, lightning_steps_needed
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


class StepHookCounter(L.Callback):
    """Counts Lightning's hooks around backward and the optimizer step."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        self.calls["on_before_backward"] += 1

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.calls["on_after_backward"] += 1

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        self.calls["on_before_optimizer_step"] += 1


@pytest.mark.parametrize("name", ["sac", "qrdqn", "ppo"])
def test_gradient_steps_compute_the_goldens_with_and_without_lightnings_hooks(name, monkeypatch):
    # Where nothing overrides Lightning's hooks around backward and the step (the goldens' fits), gradient_step
    # runs in plain torch, never through Lightning's manual_backward; a callback that overrides them gets each
    # on every optimizer step. Both compute the golden, optimizer steps (global_step) counted alike.
    backwards = []
    lightning_backward = SingleDeviceStrategy.backward
    monkeypatch.setattr(
        SingleDeviceStrategy, "backward", lambda self, *a, **k: backwards.append(1) or lightning_backward(self, *a, **k)
    )
    got = run_golden_case(name)
    assert backwards == []
    assert_matches_golden(name, got)

    counter = StepHookCounter()
    got = run_golden_case(name, callbacks=[counter])
    steps = got["global_step"]
    assert len(backwards) == steps > 0
    assert counter.calls == dict.fromkeys(STEP_HOOKS, steps)
    assert_matches_golden(name, got)


def test_lightning_steps_are_kept_where_a_strategy_plugin_profiler_or_hook_needs_them():
    # What gradient_step's plain path may not skip: DDP's gradient sync, a precision plugin's scaling, a profiler's
    # timings of the hooks and the step, and any hook a callback or the module overrides.
    class Listening(PPO):
        def on_after_backward(self) -> None:
            pass

    def needed(module: L.LightningModule | None = None, **trainer_kwargs: Any) -> bool:
        trainer = L.Trainer(logger=False, accelerator="cpu", **trainer_kwargs)
        return lightning_steps_needed(trainer, module or PPO())

    assert not needed()
    assert needed(strategy="ddp", devices=2)
    assert needed(precision="bf16-mixed")
    assert needed(profiler="simple")
    assert needed(callbacks=[StepHookCounter()])
    assert needed(Listening())
