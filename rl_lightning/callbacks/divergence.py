"""Stop a run whose loss or parameters went non-finite, instead of training on NaNs."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.errors import DivergenceError


class DivergenceCheck(Callback):
    """After every training step (one sync): raise ``DivergenceError`` naming the env step, the loss and
    the last good checkpoint if the step's loss or any parameter is non-finite. Every algorithm adds it
    (``RLModule.configure_callbacks``); Lightning runs it before the checkpoint callbacks, so a diverged
    model is never saved, and ``LastCheckpoint`` skips its save on the way out."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        params = list(pl_module.parameters())
        # A norm is non-finite if an entry is, or if it overflows, which the exact check then tells apart.
        finite = torch.stack(torch._foreach_norm(params)).isfinite().all()
        if loss is not None:
            finite = finite & loss.isfinite().all()
        loss_ok = loss is None or bool(loss.isfinite().all())
        if bool(finite) or (loss_ok and all(bool(p.isfinite().all()) for p in params)):
            return
        good = [p for cb in trainer.checkpoint_callbacks if (p := cb.last_model_path or cb.best_model_path)]
        raise DivergenceError(
            f"{type(pl_module).__name__} diverged at env step {pl_module.env_steps} (optimizer step "
            f"{trainer.global_step}): {'loss = ' + str(loss.tolist()) if loss is not None else 'loss finite'}"
            f"{', a parameter is non-finite' if loss_ok else ''}. Last good checkpoint: "
            f"{good[-1] if good else 'none written yet'}. Lower the learning rate or tighten max_grad_norm, "
            "then resume from it with --ckpt_path."
        )
