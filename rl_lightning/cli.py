"""``rl-lightning``: LightningCLI with RL defaults.

    rl-lightning fit --config configs/ppo/cartpole.yaml
    rl-lightning fit --config configs/ppo/cartpole.yaml --model.learning_rate 3e-4 --seed_everything 1
    rl-lightning validate --config configs/ppo/cartpole.yaml --ckpt_path runs/.../checkpoints/last.ckpt
    rl-lightning fit --config configs/ppo/cartpole.yaml --config configs/trainer/bf16.yaml   # + a preset

Defaults differ from Lightning's where RL needs it: no epoch limit (the module stops at its env-step
budget), a TensorBoard logger under ``runs/``, checkpoints of the best evaluation return
(``best-epoch*.ckpt``) and of the latest state (``last.ckpt``), no sanity validation, and logging
every 10 training steps.

Beyond Lightning's own options: ``compile: true`` (``--compile true``) compiles the networks with
``torch.compile`` (the ``CompileNetworks`` callback). ``precision: 16-mixed`` on CPU is refused
with a message: Lightning would run bfloat16 instead of the float16 asked for.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from rl_lightning.algorithms.base import RLModule
from rl_lightning.callbacks.compile import CompileNetworks


class RLCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Two checkpoints: the best evaluation so far, and the latest (to resume from). Lightning 2.6
        # updates `save_last` only when the monitored metric improved, so "last" is its own callback.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "last_checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/episode_return",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best-epoch{epoch}",
                "checkpoint.auto_insert_metric_name": False,
                "last_checkpoint.filename": "last",
                "last_checkpoint.enable_version_counter": False,
            }
        )
        parser.add_argument(
            "--compile", type=bool, default=False, help="torch.compile the networks (the CompileNetworks callback)."
        )

    def before_instantiate_classes(self) -> None:
        trainer = self._get(self.config, "trainer")
        precision, accelerator = str(trainer.get("precision")), str(trainer.get("accelerator"))
        gpu_available = torch.cuda.is_available() or torch.backends.mps.is_available()
        on_cpu = accelerator == "cpu" or (accelerator == "auto" and not gpu_available)
        if precision in ("16", "16-mixed") and on_cpu:
            raise ValueError(
                f"precision={precision!r} (float16 mixed precision) is not supported on CPU, and Lightning would "
                "silently run bfloat16 instead. On CPU use --trainer.precision bf16-mixed "
                "(configs/trainer/bf16.yaml); keep 16-mixed for CUDA GPUs (with --trainer.accelerator gpu)."
            )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        if self._get(self.config_init, "compile", default=False):
            trainer.callbacks.append(CompileNetworks())
        return trainer


def trainer_defaults() -> dict[str, Any]:
    return {
        "max_epochs": -1,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 10,
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": "runs", "name": "default"},
        },
    }


def main(args: list[str] | None = None) -> None:
    RLCLI(
        RLModule,
        subclass_mode_model=True,
        trainer_defaults=trainer_defaults(),
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )
    # Under DDP, a process group left open can abort the process at interpreter exit (SIGABRT).
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
