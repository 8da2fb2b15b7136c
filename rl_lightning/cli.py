"""``rl-lightning``: LightningCLI with RL defaults.

    rl-lightning fit --config configs/ppo/cartpole.yaml
    rl-lightning fit --config configs/ppo/cartpole.yaml --model.learning_rate 3e-4 --seed_everything 1
    rl-lightning validate --config configs/ppo/cartpole.yaml --ckpt_path runs/.../checkpoints/last.ckpt

Defaults differ from Lightning's where RL needs it: no epoch limit (the module stops at its env-step
budget), a TensorBoard logger under ``runs/``, checkpoints of the best evaluation return
(``best-epoch*.ckpt``) and of the latest state (``last.ckpt``), no sanity validation, and logging
every 10 training steps.
"""

from __future__ import annotations

import sys
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from rl_lightning.algorithms.base import RLModule


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


if __name__ == "__main__":
    main(sys.argv[1:])
