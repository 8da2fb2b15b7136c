"""Seeds and random states: the env seed of a run, each DDP rank's own streams, and the RNG states
checkpoints carry (as tensors and plain containers, so ``torch.load(weights_only=True)`` reads them)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch.strategies import DDPStrategy


def rng_state() -> dict[str, Any]:
    """torch, numpy and python RNG states as tensors and plain containers (weights_only-safe)."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "python": {"version": py_state[0], "state": list(py_state[1]), "gauss": py_state[2]},
    }


def draw_env_seed(strategy: Any | None) -> int:
    """The env seed of a run that sets none: drawn from torch's RNG, so ``seed_everything`` makes the envs
    reproducible too; rank 0's draw for all ranks (rank offsets, ``RLModule.rank_seed``, keep the ranks'
    env seeds distinct, and their evaluation seeds agree)."""
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    return int(strategy.broadcast(seed, src=0)) if strategy is not None else seed


def env_seed_drawn_by(seed: int) -> int:
    """The env seed a run with ``seed_everything(seed)`` and no ``env.seed`` draws (``draw_env_seed``, its
    first draw from torch's RNG), the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return draw_env_seed(None)


def separate_ranks(strategy: Any, rank_seed: int, find_unused_parameters: bool) -> None:
    """Under DDP, once the networks exist: ``seed_everything`` gave every rank the same RNG state, hence the
    same exploration noise, so each rank's torch, numpy and python RNGs are reseeded with its own
    ``rank_seed`` (DDP then broadcasts rank 0's initial weights); and DDP is asked to find unused
    parameters for an algorithm whose backward passes reach only some of them."""
    torch.manual_seed(rank_seed)
    np.random.seed(rank_seed % 2**32)
    random.seed(rank_seed)
    if find_unused_parameters and isinstance(strategy, DDPStrategy):
        # Lightning keeps the DDP constructor's kwargs here until it wraps the module (after setup); it
        # has no public API to change them once the strategy exists (a user's strategy=ddp).
        # tests/test_lightning_private.py fails if Lightning renames it.
        strategy._ddp_kwargs.setdefault("find_unused_parameters", True)


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
