"""Export a trained agent's evaluation policy as a ``torch.export`` program that runs with torch alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor


class _EvaluationPolicy(torch.nn.Module):
    """``module.act_in_env`` as a module's forward, without autograd: what ``export_policy`` traces."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(self, obs: Tensor) -> Tensor:
        with torch.no_grad():
            return self.module.act_in_env(obs)


def export_policy(module: Any, path: str | Path | None = None) -> torch.export.ExportedProgram:
    """The evaluation policy of an ``RLModule`` (``act_in_env``: observations in, env actions out) as
    a ``torch.export`` program for any batch size, on the module's device; written to ``path``
    (``.pt2``) if given.

    It runs with torch alone (no rl_lightning, Lightning or gymnasium):
    ``torch.export.load(path).module()(obs)``, observations as the env gives them (raw; uint8 frames
    for Atari; flattened as gymnasium's ``flatten`` does for ``Discrete``/``Dict``/``Tuple`` spaces),
    normalization included. The program holds all of the module's weights. Its input has the env's
    dtype, as export fixes it: float32 for float observations (``torch.as_tensor(obs,
    dtype=torch.float32)`` for a float64 array; torch otherwise refuses with "Tensor dtype mismatch").
    """
    observation_space, _ = module.build_for_env()
    example = torch.as_tensor(np.stack([observation_space.sample()] * 2), device=module.device)
    was_training = module.training
    try:
        program = torch.export.export(
            _EvaluationPolicy(module.eval()), (example,), dynamic_shapes=({0: torch.export.Dim("batch")},)
        )
    finally:
        module.train(was_training)
    if path is not None:
        torch.export.save(program, path)
    return program
