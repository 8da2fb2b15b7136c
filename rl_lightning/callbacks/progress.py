"""A progress bar in RL units: env steps of the budget, env steps per second, latest returns.

Lightning's bar counts batches per epoch, which in RL means rollouts in an arbitrary slice of the
run. This one spans the whole ``fit``::

    PPO CartPole-v1  45%|████▌     | 45,056/100,000 env steps [00:09<00:11, 4,851 steps/s, return=123.4, eval=500.0]

``steps/s`` is the average env-step rate of this ``fit`` (evaluations included), so the remaining time
is an honest estimate. ``return`` is the mean return of the latest training episodes (logged every
``log_every_n_steps`` training steps), ``eval`` the latest deterministic evaluation.

It is the default of the ``rl-lightning`` command; in Python pass it yourself:
``Trainer(callbacks=[RLProgressBar()])``. Quiet: ``Trainer(enable_progress_bar=False)``
(``--trainer.enable_progress_bar false``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm


class _EnvStepTqdm(Tqdm):
    """Counts as ``45,056/100,000``, rate as ``4,851 steps/s`` (tqdm's unit scaling shows ``45.1k/100k``)."""

    @property
    def format_dict(self) -> dict[str, Any]:
        d = super().format_dict
        n, elapsed = d["n"], d["elapsed"]
        rate = (n - d.get("initial", 0)) / elapsed if elapsed else None
        d["steps"], d["budget"] = f"{n:,.0f}", f"{d['total']:,.0f}" if d["total"] else "?"
        d["steps_per_second"] = f"{rate:,.0f}" if rate else "?"
        return d


class RLProgressBar(TQDMProgressBar):
    """One bar over the env-step budget of a ``fit``; validation and test runs alone keep Lightning's bars.

    Args:
        refresh_seconds: Redraw at most this often. Between redraws a training step costs the bar one
            clock read.
        process_position: Offset of the bar in lines, for several bars at once.
    """

    ENV_STEP_BAR_FORMAT = (
        "{desc} {percentage:3.0f}%|{bar}| {steps}/{budget} env steps [{elapsed}<{remaining}, "
        "{steps_per_second} steps/s{postfix}]"
    )

    def __init__(self, refresh_seconds: float = 0.5, process_position: int = 0) -> None:
        super().__init__(refresh_rate=1, process_position=process_position)
        self.refresh_seconds = refresh_seconds
        self._next_refresh = 0.0

    def init_train_tqdm(self, total: int | None = None, desc: str | None = None) -> Tqdm:
        return _EnvStepTqdm(
            total=total,
            desc=desc,
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            smoothing=0,  # the average rate of the run, so the remaining time is right
            mininterval=self.refresh_seconds,
            file=sys.stdout,  # as Lightning's bars
            bar_format=self.ENV_STEP_BAR_FORMAT,
        )

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        desc = f"{type(pl_module).__name__} {pl_module.env_config.env_id}"
        if pl_module.population > 1:  # the bar counts each member's env steps, all members step together
            desc += f" x{pl_module.population_size} members (env steps per member)"  # every rank's
        bar = self.train_progress_bar = self.init_train_tqdm(pl_module.total_env_steps, desc)
        bar.initial = bar.n = min(
            pl_module.env_steps, pl_module.total_env_steps
        )  # a resumed run starts where it stopped
        self._next_refresh = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        pass  # one bar for the whole run, not one per epoch

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, *_: Any) -> None:
        now = time.monotonic()
        if now >= self._next_refresh and self.is_enabled:
            self._next_refresh = now + self.refresh_seconds
            self._redraw(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        pass

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._redraw(trainer, pl_module, refresh=False)
        self.train_progress_bar.close()  # draws the final state

    def _redraw(self, trainer: L.Trainer, pl_module: Any, refresh: bool = True) -> None:
        bar = self.train_progress_bar
        if bar.disable:
            return
        bar.n = min(pl_module.env_steps, pl_module.total_env_steps)
        metrics = trainer.callback_metrics
        postfix = [
            f"{name}={_short(float(metrics[key]))}"
            for name, key in (("return", "rollout/episode_return"), ("eval", "val/episode_return"))
            if key in metrics
        ]
        bar.set_postfix_str(", ".join(postfix), refresh=refresh)

    # Evaluations inside fit are one short batch: no bar of their own, the new return shows on the main bar.
    def on_validation_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.state.fn != "fit":
            super().on_validation_start(trainer, pl_module)
        elif not trainer.sanity_checking:
            self.val_progress_bar = Tqdm(disable=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking:
            super().on_validation_end(trainer, pl_module)
            return
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        self._redraw(trainer, pl_module)


def _short(x: float) -> str:
    """At least 3 significant digits, never an exponent: 500, 93.4, 0.95, -1622."""
    return f"{x:.{max(0, 3 - len(str(int(abs(x)))))}f}"
