"""Whole training updates as CUDA graphs: forward, loss, backward, gradient clipping and optimizer
step recorded once and replayed, so that one update costs one launch from the host instead of
hundreds (the Atari and MuJoCo updates on a GPU are bound by the host's kernel launches, not by
the GPU).

``GraphedUpdate(fn)`` wraps an update ``fn(*tensors) -> tensors`` (a tensor, or a tuple or named
tuple of them). On CUDA tensors it runs ``fn`` eagerly for a few warm-up calls on a side stream
(optimizer state, cuBLAS workspaces), then captures it into a ``torch.cuda.CUDAGraph`` with static
input buffers, one graph per input shapes; each later call copies its inputs into the buffers and
replays. What a replay returns lives in the graph's static buffers: the next call overwrites it.
On other devices, and if capturing fails (an op that synchronizes with the host, say), ``fn`` runs
eagerly, the latter with a one-line warning naming the error.

What a captured ``fn`` must keep to: fixed shapes per graph; no host synchronization (``.item()``,
``bool(tensor)``, printing); optimizers built with ``capturable=True`` and learning rates that change
held as tensors (``RLModule.adam`` and ``anneal_learning_rate`` do both); Python state read at
capture time is frozen into the graph (a constant ``tau`` is fine; a counter is not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

WARMUP_CALLS = 3  # eager calls on a side stream before capture, as in PyTorch's CUDA-graphs recipe


class GraphedUpdate:
    """``fn`` captured as one CUDA graph per input shapes and replayed (see the module docstring).

    Attributes:
        captures: Graphs captured so far.
        replays: Calls served by replaying a graph.
        eager_calls: Calls that ran ``fn`` eagerly (warm-up, other devices, failed capture).
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "update")
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[Tensor], Any]] = {}
        self.warmup_left: dict[tuple, int] = {}
        self.failed = False
        self.captures = self.replays = self.eager_calls = 0
        self.generators: list[torch.Generator] = []  # besides the default one, those ``fn`` draws from

    def __call__(self, *inputs: Tensor) -> Any:
        if self.failed or not inputs or inputs[0].device.type != "cuda":
            return self._eager(*inputs)
        key = tuple((x.shape, x.dtype) for x in inputs)
        if key not in self.graphs:
            left = self.warmup_left.setdefault(key, WARMUP_CALLS)
            if left > 0:
                self.warmup_left[key] = left - 1
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    out = self._eager(*inputs)
                torch.cuda.current_stream().wait_stream(stream)
                return out
            try:
                self._capture(key, inputs)
            except Exception as e:  # noqa: BLE001 - any capture failure falls back to eager updates
                self.failed = True
                rank_zero_warn(
                    f"CUDA graph capture of {self.name} failed ({type(e).__name__}: {str(e).splitlines()[0]}); "
                    "its updates run eagerly."
                )
                torch.cuda.synchronize()
                return self._eager(*inputs)
        graph, static_inputs, static_out = self.graphs[key]
        for buffer, x in zip(static_inputs, inputs, strict=True):
            buffer.copy_(x)
        graph.replay()
        self.replays += 1
        return static_out

    def _eager(self, *inputs: Tensor) -> Any:
        self.eager_calls += 1
        return self.fn(*inputs)

    def _capture(self, key: tuple, inputs: tuple[Tensor, ...]) -> None:
        static_inputs = [x.clone() for x in inputs]
        graph = torch.cuda.CUDAGraph()
        for generator in self.generators:  # their random streams advance with every replay
            graph.register_generator_state(generator)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            static_out = self.fn(*static_inputs)
        self.graphs[key] = (graph, static_inputs, static_out)
        self.captures += 1


def count_step(optimizer: Any) -> None:
    """Count a step of ``optimizer`` (a LightningOptimizer) taken in plain torch, as Lightning counts its own
    (``global_step``): in these hooks of LightningOptimizer, for want of a public API to count a step it did
    not run. tests/test_lightning_private.py checks them."""
    optimizer._on_before_step()
    optimizer._on_after_step()


class UpdateGraphs:
    """The CUDA graphs of one module's updates (``cuda_graphs: true``): each update function captured once
    per input shapes and replayed (``run``), its optimizer steps in plain torch (``RLModule.gradient_step``:
    Lightning's hooks around backward and the step are Python and could not run on a replay), and the
    optimizers each update steps remembered (``stepped``) so that Lightning still counts them on replays.

    ``RLModule`` composes one; an algorithm reaches it through ``run_update`` and ``gradient_step``."""

    def __init__(self) -> None:
        self.enabled = False
        self.graphed: dict[str, GraphedUpdate] = {}
        self._stepped: list[Any] = []  # the (Lightning) optimizers the running update stepped
        self._steps_of: dict[str, list[Any]] = {}  # ... and those each update steps, for its replays

    def graphed_fn(self, fn: Callable[..., Any], name: str) -> GraphedUpdate:
        """``fn`` as the ``GraphedUpdate`` named ``name`` (built on first use)."""
        return self.graphed.get(name) or self.graphed.setdefault(name, GraphedUpdate(fn, name))

    def run(self, update: Callable[..., Any], *inputs: Tensor) -> Any:
        """``update(*inputs)`` captured (once per input shapes) and replayed; its outputs are valid until
        the next call."""
        graphed = self.graphed_fn(update, update.__name__)
        replays = graphed.replays
        self._stepped = []
        out = graphed(*inputs)
        if graphed.replays == replays:  # the update's Python ran: it named the optimizers it steps
            self._steps_of[graphed.name] = self._stepped
        for optimizer in self._steps_of[graphed.name]:
            count_step(optimizer)
        return out

    def stepped(self, optimizer: Any) -> None:
        """Note that the running update stepped ``optimizer`` (a LightningOptimizer), in plain torch
        (``RLModule.gradient_step``), so that Lightning counts that step on each replay."""
        self._stepped.append(optimizer)
