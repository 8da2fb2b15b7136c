"""Export a trained agent's evaluation policy as a ``torch.export`` program that runs with torch alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor


class _EvaluationPolicy(torch.nn.Module):
    """``module.act_in_env`` as a module's forward, without autograd: what ``export_policy`` traces."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(self, obs: Tensor, *memory: Tensor) -> Any:
        with torch.no_grad():
            return self.module.act_in_env(obs, *memory)


def export_policy(
    module: Any, path: str | Path | None = None, memory: Tensor | None = None
) -> torch.export.ExportedProgram:
    """The evaluation policy of an ``RLModule`` (``act_in_env``: observations in, env actions out) as
    a ``torch.export`` program for any batch size, on the module's device; written to ``path``
    (``.pt2``) if given.

    It runs with torch alone (no rl_lightning, Lightning or gymnasium):
    ``torch.export.load(path).module()(obs)``, observations as the env gives them (raw; uint8 frames
    for Atari; flattened as gymnasium's ``flatten`` does for ``Discrete``/``Dict``/``Tuple`` spaces),
    normalization included. The program holds all of the module's weights. Its input has the env's
    dtype, as export fixes it: float32 for float observations (``torch.as_tensor(obs,
    dtype=torch.float32)`` for a float64 array; torch otherwise refuses with "Tensor dtype mismatch").

    A policy with memory passes an example ``memory`` (two rows): the program is then
    ``(obs, memory) -> (actions, memory)``, ``module.act_in_env(obs, memory)``.
    """
    observation_space, _ = module.build_for_env()
    if not isinstance(observation_space, gym.spaces.Box):  # the networks see it flattened, as the envs give it
        observation_space = gym.spaces.flatten_space(observation_space)
    example = torch.as_tensor(np.stack([observation_space.sample()] * 2), device=module.device)
    batch = {0: torch.export.Dim("batch")}
    inputs, dynamic_shapes = ((example,), (batch,)) if memory is None else ((example, memory), (batch, (batch,)))
    was_training = module.training
    try:
        program = torch.export.export(_EvaluationPolicy(module.eval()), inputs, dynamic_shapes=dynamic_shapes)
    finally:
        module.train(was_training)
    if path is not None:
        torch.export.save(program, path)
    return program
