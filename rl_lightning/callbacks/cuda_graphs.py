"""Capture every training update as a CUDA graph (``rl_lightning.cuda_graphs``).

Switched on with ``cuda_graphs: true`` on the command line or in a config
(``configs/trainer/cudagraphs.yaml``, composed with ``configs/trainer/gpu.yaml``), or in Python with
``Trainer(callbacks=[CUDAGraphs()])``. Each algorithm's update (PPO's and A2C's minibatch or rollout
update, DQN's minibatch, SAC's whole update, TD3's critic and delayed actor updates: forward, loss,
backward, gradient clipping, optimizer step, target networks) is then recorded once and replayed,
and so is on-policy collection: the policy's acting forward, or with ``env.backend: torch`` each
whole vector step (policy, env, rollout storage).

Without a CUDA device the updates run eagerly through the same code, after a one-line message.
Refused, with the reason: DDP (its gradient all-reduce runs from Python hooks a replay would skip)
and ``16-mixed`` precision (its gradient scaler reads the scale on the host every step); bf16-mixed
works. Lightning's hooks around backward and the optimizer step (``on_before_backward``,
``on_after_backward``, ``on_before_optimizer_step``) do not run for graphed updates; the optimizer
steps are still counted (``global_step``).
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from rl_lightning.errors import ConfigError


class CUDAGraphs(L.Callback):
    """Run the module's updates as CUDA graphs (see the module docstring)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not hasattr(pl_module, "enable_cuda_graphs"):  # an rl_lightning algorithm (RLModule)
            raise TypeError(f"CUDAGraphs works with rl_lightning algorithms, got {type(pl_module).__name__}.")
        if trainer.world_size > 1:
            raise ConfigError(
                "cuda_graphs with DDP: a replayed update would skip DDP's gradient all-reduce. Train on one "
                "device with CUDA graphs, or with DDP without them."
            )
        if str(trainer.precision) in ("16", "16-mixed"):
            raise ConfigError(
                "cuda_graphs with precision 16-mixed: its gradient scaler syncs with the host every step. Use "
                "bf16-mixed or 32-true."
            )
        device = trainer.strategy.root_device
        if device.type != "cuda":
            rank_zero_info(f"cuda_graphs: no CUDA device (this run is on {device.type}); the updates run eagerly.")
        pl_module.enable_cuda_graphs()
