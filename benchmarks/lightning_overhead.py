"""Lightning's fixed cost per optimizer step in our training loop.

    python benchmarks/lightning_overhead.py [--rollouts 300]

PPO with configs/ppo/cartpole.yaml's hyperparameters (20 Adam steps per 256-step rollout), one torch
thread. The fit collects one rollout and then trains on it again and again (the environment is out of
the measurement). Each of its training steps is timed from the end of the previous one: Lightning's
loop (fetching the batch, hooks, progress tracking), ``manual_backward``, ``clip_gradients``,
``LightningOptimizer.step`` and our own per-step work (finiteness check, learning-rate annealing,
logging). Right after each, a callback runs the same 20 updates in a plain torch loop (same module,
``minibatch_loss``, optimizer class and clipping) and times them. Pairing the two in time cancels
the VM's drift; the overhead per optimizer step is the median of ``(fit - plain) / 20``.

Three setups: a bare Trainer, where ``gradient_step`` runs in plain torch (nothing listens to Lightning's
hooks around backward and the step: ``rl_lightning.algorithms.base.lightning_steps_needed``); the same
forced through Lightning's ``manual_backward`` and ``LightningOptimizer.step`` (as a callback that
overrides those hooks, DDP or mixed precision make it); and what ``rl-lightning fit`` runs (TensorBoard
every 10 training steps, best and last checkpoints, the progress bar). A fourth, untimed run of the
CLI's setup through Lightning's path wraps Lightning's hook dispatch to attribute time to the hooks it
calls on every optimizer step.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import statistics
import tempfile
import time
import warnings
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer import call as lightning_call

from rl_lightning import PPO, EnvConfig, RunConfig
from rl_lightning.callbacks import LastCheckpoint, RLProgressBar
from rl_lightning.data.rollout import Rollout, gae_batch

# configs/ppo/cartpole.yaml (SB3 zoo)
CARTPOLE = dict(num_steps=32, learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, update_epochs=20, num_minibatches=1)


class FixedRolloutPPO(PPO):
    """PPO that collects one rollout per fit and then trains on it again and again."""

    fixed: Rollout | None = None

    def collect_rollout(self, policy: Any) -> Rollout:
        if self.fixed is None:
            self.fixed = super().collect_rollout(policy)
        return self.fixed


class PairedClock(L.Callback):
    """Times each training step of the fit, and right after it the same updates in a plain loop.

    The VM this runs on drifts by 10-40 % within minutes; pairing each Lightning step with a plain
    one next to it in time makes their difference immune to the drift. A fit step is timed from the
    end of the previous plain run to the end of the step (Lightning's loop between steps, its hooks
    and the module's own ``on_train_batch_end`` included)."""

    def __init__(self, model: FixedRolloutPPO) -> None:
        self.model = model
        self.optimizer = model.configure_optimizers()
        self.fit_s: list[float] = []
        self.plain_s: list[float] = []
        self.start: float | None = None

    def on_train_batch_end(self, *args: Any) -> None:
        now = time.perf_counter()
        if self.start is not None:  # the first step (collection, warm-up) is not timed
            self.fit_s.append(now - self.start)
            self.plain_s.append(self.plain_rollout())
        self.start = time.perf_counter()

    def plain_rollout(self) -> float:
        model, hp = self.model, self.model.hparams
        assert model.fixed is not None
        params = list(model.parameters())
        t0 = time.perf_counter()
        batch = gae_batch(model.fixed, hp.gamma, hp.gae_lambda)  # as the fit's training step does
        for _ in range(hp.update_epochs):
            out = model.minibatch_loss(
                batch.obs, batch.actions, batch.logprobs, batch.advantages, batch.values, batch.returns
            )
            self.optimizer.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, hp.max_grad_norm)
            self.optimizer.step()
        return time.perf_counter() - t0


def measure(
    rollouts: int, log_dir: str | None, cli_callbacks: bool, lightning_steps: bool = False
) -> tuple[list[float], list[float]]:
    """Per-rollout seconds of ``rollouts`` paired fit and plain training steps."""
    L.seed_everything(0, verbose=False)
    model = FixedRolloutPPO(
        EnvConfig("CartPole-v1", num_envs=8), RunConfig(total_env_steps=10**9, env_steps_per_epoch=10**9), **CARTPOLE
    )
    model.build_for_env()  # the networks exist before the plain loop's optimizer
    clock = PairedClock(model)
    logger = L.pytorch.loggers.TensorBoardLogger(log_dir, name="overhead") if log_dir else False
    callbacks: list[L.Callback] = [clock, *([LightningSteps()] if lightning_steps else [])]
    if cli_callbacks:  # what `rl-lightning fit` adds (rl_lightning/cli.py)
        callbacks += [ModelCheckpoint(monitor="val/episode_return", mode="max"), LastCheckpoint(), RLProgressBar()]
    trainer = L.Trainer(
        max_steps=(rollouts + 1) * model.hparams.update_epochs,  # optimizer steps
        max_epochs=-1,
        logger=logger,
        log_every_n_steps=10,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_checkpointing=cli_callbacks,
        default_root_dir=log_dir,
        enable_progress_bar=cli_callbacks,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    # The progress bar draws, and ModelCheckpoint warns that no evaluation ran: neither matters here.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model)
    assert len(clock.fit_s) == rollouts, len(clock.fit_s)
    return clock.fit_s, clock.plain_s


class LightningSteps(L.Callback):
    """Sends every ``gradient_step`` through Lightning's ``manual_backward`` and ``LightningOptimizer.step``."""

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        pl_module.plain_steps = False


class HookTimer:
    """Counts and times Lightning's hook dispatches (``lightning.pytorch.trainer.call``) while active.

    Wrapping adds its own cost, so the run that attributes time to hooks is not one of the timed ones."""

    NAMES = ("_call_callback_hooks", "_call_lightning_module_hook")

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> HookTimer:
        self.originals = {name: getattr(lightning_call, name) for name in self.NAMES}
        for name, original in self.originals.items():

            def timed(trainer: Any, hook: str, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _original(trainer, hook, *args, **kwargs)
                finally:
                    self.seconds[hook] += time.perf_counter() - t0
                    self.calls[hook] += 1

            setattr(lightning_call, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self.originals.items():
            setattr(lightning_call, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=300, help="paired training steps per fit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    updates = CARTPOLE["update_epochs"]
    print(
        f"torch {torch.__version__}, lightning {L.__version__}; per optimizer step, medians over {args.rollouts} "
        f"paired training steps of {updates} optimizer steps (quartiles of the difference in brackets)"
    )
    with tempfile.TemporaryDirectory() as log_dir:
        runs = (
            ("no logger, no callbacks", None, False, False),
            ("the same through Lightning's manual_backward and step", None, False, True),
            ("TensorBoard every 10 training steps, the CLI's callbacks", log_dir, True, False),
        )
        for name, logs, cli_callbacks, lightning_steps in runs:
            fit_s, plain_s = measure(args.rollouts, logs, cli_callbacks, lightning_steps)
            diff = [(f - p) / updates * 1e6 for f, p in zip(fit_s, plain_s, strict=True)]
            q1, median, q3 = statistics.quantiles(diff, n=4)
            print(
                f"{name}: fit {statistics.median(fit_s) / updates * 1e6:.0f} us, plain "
                f"{statistics.median(plain_s) / updates * 1e6:.0f} us; Lightning's overhead {median:.0f} us "
                f"[{q1:.0f}, {q3:.0f}]"
            )
        with HookTimer() as hooks:
            measure(args.rollouts, log_dir, True, lightning_steps=True)
    optimizer_steps = (args.rollouts + 1) * updates
    per_step = {
        hook: hooks.seconds[hook] / optimizer_steps * 1e6
        for hook in hooks.calls
        if hooks.calls[hook] >= optimizer_steps
    }
    print(
        "of which the hooks Lightning dispatches on every optimizer step on its path (callbacks and module, CLI's "
        "callbacks): "
        + ", ".join(f"{hook} {us:.0f} us" for hook, us in per_step.items())
        + f"; {sum(per_step.values()):.0f} us in all"
    )


if __name__ == "__main__":
    main()
