"""Stop a run whose loss or parameters went non-finite or exploded, instead of training on them."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.errors import DivergenceError


class DivergenceCheck(Callback):
    """After every training step (one sync): raise ``DivergenceError`` naming the env step, the loss and
    the last good checkpoint if the step's loss is non-finite or a parameter is non-finite or larger in
    magnitude than ``max_abs_weight``. Every algorithm adds it (``RLModule.configure_callbacks``) unless
    the trainer has one already (``--trainer.callbacks+=rl_lightning.callbacks.DivergenceCheck
    --trainer.callbacks.max_abs_weight 1e9`` sets another limit); Lightning runs it before the checkpoint
    callbacks, so a diverged model is never saved, and ``LastCheckpoint`` skips its save on the way out.

    Args:
        max_abs_weight: The largest magnitude a parameter may reach; ``None`` checks finiteness only.
            A weight of 1e6 is far past what a network trained stably holds (PPO's CartPole config ends
            its 100k env steps with a largest weight of 1.13) and is what a runaway learning rate produces
            (PPO on CartPole with a learning rate of 1e6: weights past 1e6 within 20 updates, which
            otherwise trained on to a "best" checkpoint of a broken policy).
    """

    def __init__(self, max_abs_weight: float | None = 1e6) -> None:
        if max_abs_weight is not None and not max_abs_weight > 0:
            raise ValueError(f"max_abs_weight must be > 0 or None, got {max_abs_weight}.")
        self.max_abs_weight = max_abs_weight

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        params = list(pl_module.parameters())
        limit = float("inf") if self.max_abs_weight is None else self.max_abs_weight
        # The largest magnitude of any entry: NaN fails the comparison, so one sync checks everything.
        with torch.no_grad():
            largest = torch.stack(torch._foreach_norm(params, float("inf"))).max()
        ok = largest <= limit
        if loss is not None:
            ok = ok & loss.isfinite().all()
        if getattr(pl_module, "splits_members", False):  # ranks with members of their own: all stop, or none
            ok = trainer.strategy.reduce(ok.float(), reduce_op="sum") == trainer.world_size
        if bool(ok):
            return
        largest = float(largest)
        if largest != largest or largest == float("inf"):
            weights = ", a parameter is non-finite"
        elif largest > limit:
            weights = f", a parameter reached {largest:.3g} (max_abs_weight={self.max_abs_weight:g})"
        else:
            weights = ""
        good = [p for cb in trainer.checkpoint_callbacks if (p := cb.last_model_path or cb.best_model_path)]
        raise DivergenceError(
            f"{type(pl_module).__name__} diverged at env step {pl_module.env_steps} (optimizer step "
            f"{trainer.global_step}): {'loss = ' + str(loss.tolist()) if loss is not None else 'loss finite'}"
            f"{weights}. Last good checkpoint: "
            f"{good[-1] if good else 'none written yet'}. Lower the learning rate or tighten max_grad_norm, "
            "then resume from it with --ckpt_path."
        )
