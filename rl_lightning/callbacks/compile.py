"""``torch.compile`` an algorithm's networks for training and collection.

Switched on with ``compile: true`` on the command line or in a config (``configs/trainer/compile.yaml``),
or in Python with ``Trainer(callbacks=[CompileNetworks()])``. A callback rather than an argument of
every algorithm: it works for all of them with no change to their signatures, and compilation is
a property of the run (like precision), not of the algorithm's hyperparameters.

At the start of ``fit`` it calls ``RLModule.compile_networks``, which compiles each network in place
(``nn.Module.compile``, or the network's own ``compile`` when it is used through methods other than
``forward``), so parameter names and checkpoints are the same as without compilation. The first
calls pay the compile time (seconds to tens of seconds on CPU); shapes that vary (the number of
truncated sub-envs whose final observation is evaluated) are compiled dynamically after their second
distinct value.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torchmetrics import Metric


class CompileNetworks(L.Callback):
    """Compile the module's networks with ``torch.compile`` when ``fit`` starts.

    Args:
        mode: ``torch.compile`` mode: ``None`` (default), ``reduce-overhead`` (CUDA graphs) or
            ``max-autotune``.
        dynamic: ``torch.compile``'s ``dynamic``: ``None`` lets it detect varying shapes.
        fullgraph: Fail on graph breaks instead of falling back to eager between them.
        backend: ``torch.compile`` backend; ``eager`` only traces (fast; for tests and debugging).
    """

    def __init__(
        self, mode: str | None = None, dynamic: bool | None = None, fullgraph: bool = False, backend: str = "inductor"
    ) -> None:
        self.kwargs: dict[str, Any] = {"mode": mode, "dynamic": dynamic, "fullgraph": fullgraph, "backend": backend}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not hasattr(pl_module, "compile_networks"):  # an rl_lightning algorithm (RLModule)
            raise TypeError(f"CompileNetworks works with rl_lightning algorithms, got {type(pl_module).__name__}.")
        pl_module.compile_networks(**self.kwargs)


def compile_children(module: L.LightningModule, **compile_kwargs: Any) -> None:
    """``RLModule.compile_networks``: each child network compiled in place (parameter names and checkpoints
    unchanged), once (a second fit with the same module compiles nothing again); torchmetrics metrics are
    not networks. ``nn.Module.compile`` covers ``forward`` only, so a network used through other methods
    overrides ``compile`` to cover them (``ActorCritic`` does)."""
    if getattr(module, "_networks_compiled", False):
        return
    for child in module.children():
        if not isinstance(child, Metric):
            child.compile(**compile_kwargs)
    module._networks_compiled = True
