"""What a training step logs besides its losses: episode statistics and throughput, against env steps."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_lightning.networks.population import interquartile_mean


def log_training(module: Any, metrics: dict[str, Tensor | float], episodes: tuple[np.ndarray, ...]) -> None:
    """Log a training step's ``metrics``, the training ``episodes`` (returns, lengths) that ended since
    the last call and the env steps per second since then, against env steps (the x-axis in
    TensorBoard, Lightning's ``step``). Under DDP, one all-reduce: metrics become means over ranks,
    episode statistics means over all ranks' episodes. Two ``log_dict`` calls in all: each ``self.log``
    costs about as much as a small optimizer step.

    A population (``module.population`` members; ``episodes`` then carries each episode's sub-env):
    env steps count per member; a metric given as an ``(N,)`` tensor, one value per member, is logged as
    ``member_k/<name>`` and as its mean over members under its own name; episode returns per member
    (``member_k/rollout/episode_return``) and their interquartile mean over members
    (``rollout/episode_return_iqm``). Members split across ranks: each rank's members' values gathered first,
    named by their index in the whole population."""
    now = time.perf_counter()
    elapsed = max(now - module._last_time, 1e-9)
    metrics["time/env_steps_per_second"] = (module.env_steps - module._last_env_steps) / elapsed
    module._last_time, module._last_env_steps = now, module.env_steps
    returns, lengths = episodes[:2]
    totals = [float(returns.sum()), float(lengths.sum()), float(len(returns))]
    members = module.population_size
    if members > 1:
        metrics = split_members(gather_member_metrics(module, metrics), members)
        member = episodes[2] // module.env_config.num_envs + module.member_offset
        totals += np.bincount(member, returns, members).tolist() + np.bincount(member, None, members).tolist()
        metrics["population/diverged_members"] = module.gather_members(module.diverged_members).sum().float()
    world_size = module.trainer.world_size
    if world_size > 1:
        keys = list(metrics)
        local = [torch.as_tensor(metrics[k], dtype=torch.float32, device=module.device).reshape(1) for k in keys]
        local.append(torch.tensor(totals, dtype=torch.float32, device=module.device))
        total = module.trainer.strategy.reduce(torch.cat(local), reduce_op="sum")
        metrics = dict(zip(keys, (total[: len(keys)] / world_size).unbind(), strict=True))
        totals = total[len(keys) :].tolist()
    if module.env_config.restart_on_failure:
        metrics["rollout/env_restarts"] = float(module.env_restarts)  # a mean over ranks under DDP
    if totals[2] > 0:
        metrics["rollout/episode_return"] = totals[0] / totals[2]
        metrics["rollout/episode_length"] = totals[1] / totals[2]
    if members > 1:
        sums, counts = np.array(totals[3 : 3 + members]), np.array(totals[3 + members :])
        for k in np.flatnonzero(counts):
            metrics[f"member_{k}/rollout/episode_return"] = sums[k] / counts[k]
        if counts.any():
            means = torch.as_tensor(sums[counts > 0] / counts[counts > 0])
            metrics["rollout/episode_return_iqm"] = float(interquartile_mean(means))
    metrics["time/env_steps"] = metrics["step"] = float(module.env_steps)  # "step": Lightning's x-axis
    module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
    steps = "env_steps" if members == 1 else "member_env_steps"
    progress = {steps: float(module.env_steps), "steps/s": metrics["time/env_steps_per_second"]}
    if totals[2] > 0:
        progress["return"] = metrics["rollout/episode_return"]
    module.log_dict(progress, prog_bar=True, logger=False, batch_size=1)


def gather_member_metrics(module: Any, metrics: dict[str, Tensor | float]) -> dict[str, Tensor | float]:
    """``metrics`` with each of this rank's members' ``(population,)`` tensors as every member's (one gather for
    all of them), where the members are split across ranks; as they are otherwise."""
    if not module.splits_members:
        return metrics
    keys = [k for k, v in metrics.items() if isinstance(v, Tensor) and v.dim() == 1 and len(v) == module.population]
    if not keys:
        return metrics
    every = module.gather_members(torch.stack([metrics[k].float() for k in keys], dim=1))  # (N, metrics)
    return {**metrics, **dict(zip(keys, every.unbind(1), strict=True))}


def split_members(metrics: dict[str, Tensor | float], members: int) -> dict[str, Tensor | float]:
    """``metrics`` with each ``(members,)`` tensor (one value per population member) replaced by its mean,
    and its members' values added as ``member_k/<name>``."""
    out: dict[str, Tensor | float] = {}
    for name, value in metrics.items():
        if isinstance(value, Tensor) and value.dim() == 1 and len(value) == members:
            out[name] = value.float().mean()
            out.update({f"member_{k}/{name}": v for k, v in enumerate(value.unbind())})
        else:
            out[name] = value
    return out


def should_log(trainer: Any) -> bool:
    """True on the training steps whose metrics reach the logger (``Trainer(log_every_n_steps)``): each
    ``self.log`` costs about as much as a small optimizer step, so the others skip it."""
    every = trainer.log_every_n_steps
    # The loop's count of steps that reached the logger, Lightning's own rule for log_every_n_steps; no
    # public API exposes it (tests/test_lightning_private.py fails if it is renamed).
    return every > 0 and (trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % every == 0
