"""A population split across two DDP ranks (``run.population_ddp: split``) that checks itself; run by
tests/test_ddp.py in a subprocess (as tests/ddp_script.py, and for the same reason: a hang must not wedge pytest).

A PPO population of 4 CartPole members, each with its own learning rate; member 3 (rank 1's second) gets a
non-finite loss from its third rollout on. Checked on every rank as the run goes, or written to
``<out>/result.json`` by rank 0 for the test:
- no DDP wrapper, so nothing averages gradients across ranks; rank ``r`` holds members ``2r`` and ``2r + 1``,
  whose initial parameters are those of the whole population built in one process and whose sub-envs are
  first reset as those members' runs reset theirs;
- env steps count per member, each rank's own;
- member metrics are logged under their index in the whole population, with the values of the rank that
  holds the member; member 3 is frozen and reported as member 3;
- the checkpoint holds every member (gathered, optimizer state too); a 2-rank resume gives each rank its
  own block back, and its own RNG stream; after each fit every rank holds the whole population, the same on both.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, whatever is installed

import lightning as L  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from rl_lightning import PPO, EnvConfig  # noqa: E402
from rl_lightning.envs.make import make_vector_env  # noqa: E402
from tests.ddp_script import MemoryLogger, gather  # noqa: E402
from tests.helpers import build  # noqa: E402

ENV = EnvConfig("CartPole-v1", num_envs=2, seed=1)
LEARNING_RATES = [1e-3, 3e-4, 2e-3, 5e-4]


class PPOMember3Diverges(PPO):
    """Member 3, rank 1's second, gets a non-finite loss from the third rollout on (its own env steps)."""

    def minibatch_update(self, *minibatch):
        if self.member_offset == 2 and self.env_steps > 64:
            returns = minibatch[5].clone()
            returns[1] = float("nan")
            minibatch = (*minibatch[:5], returns)
        return super().minibatch_update(*minibatch)


def population(steps: int) -> PPO:
    return build(
        PPOMember3Diverges,
        env=ENV,
        total_env_steps=steps,
        population_variants={"learning_rate": LEARNING_RATES},
        num_steps=16,
        num_minibatches=2,
        update_epochs=2,
        env_steps_per_epoch=256,
        eval_episodes=3,
    )


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


class SplitChecks(L.Callback):
    def __init__(self) -> None:
        self.first_reset: torch.Tensor | None = None
        self.at_start: dict[str, torch.Tensor] = {}
        self.local_env_steps = 0
        self.eval_means: list[torch.Tensor] = []
        self.wrapped = True

    def on_fit_start(self, trainer, pl_module) -> None:
        envs = pl_module.envs
        reset, step = envs.reset, envs.step

        def recording_reset(*args, **kwargs):
            out = reset(*args, **kwargs)
            if self.first_reset is None:
                self.first_reset = torch.as_tensor(out[0], dtype=torch.float32)
            return out

        def counting_step(actions):
            self.local_env_steps += envs.num_envs // pl_module.population  # per member
            return step(actions)

        envs.reset, envs.step = recording_reset, counting_step
        play = pl_module.play_episodes

        def recording_play(seeds):
            returns, lengths = play(seeds)
            self.eval_means.append(torch.as_tensor(returns, dtype=torch.float32).unflatten(0, (-1, len(seeds))).mean(1))
            return returns, lengths

        pl_module.play_episodes = recording_play

    def on_train_start(self, trainer, pl_module) -> None:
        self.wrapped = isinstance(trainer.strategy.model, DistributedDataParallel)
        self.at_start = state(pl_module)
        self.rng_at_start = torch.get_rng_state()


def make_trainer(out: Path, logger: MemoryLogger, checks: SplitChecks) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60)),
        max_epochs=-1,
        logger=logger,
        log_every_n_steps=1,
        callbacks=[checks, ModelCheckpoint(dirpath=out / "ckpt", save_last=True)],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)

    L.seed_everything(0, verbose=False)
    model, checks, logger = population(512), SplitChecks(), MemoryLogger()
    trainer = make_trainer(args.out, logger, checks)
    trainer.fit(model)
    rank, world = dist.get_rank(), dist.get_world_size()
    own = slice(2 * rank, 2 * rank + 2)

    # The whole population built in one process: this rank's members are its members 2r and 2r + 1.
    whole = population(512)
    whole.build_for_env()
    same_init = all(torch.equal(whole.state_dict()[k][own], v) for k, v in checks.at_start.items())
    envs = make_vector_env(ENV, ENV.num_envs * 4)
    whole_reset = torch.as_tensor(envs.reset(seed=ENV.seed)[0], dtype=torch.float32)
    envs.close()
    same_reset = torch.equal(whole_reset[4 * rank : 4 * rank + 4], checks.first_reset)

    # After the fit: every rank holds every member, the same ones.
    united = state(model)
    same_across_ranks = all(bool((gather(v) == v).all()) for v in united.values())
    local_eval = checks.eval_means[-1]  # this rank's 2 members' last evaluation
    every_eval = gather(local_eval).flatten().tolist()
    local_steps = gather(torch.tensor(checks.local_env_steps)).tolist()
    wrapped = gather(torch.tensor(checks.wrapped)).tolist()
    checks_ok = gather(torch.tensor([same_init, same_reset, same_across_ranks])).all(0).tolist()

    # Resume on 2 ranks from the checkpoint: each rank gets its own block of it back.
    last = args.out / "ckpt" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    resumed, resume_checks = population(768), SplitChecks()
    make_trainer(args.out / "resumed", MemoryLogger(), resume_checks).fit(resumed, ckpt_path=last)
    restored = all(
        torch.equal(ckpt["state_dict"][k][own], v) for k, v in resume_checks.at_start.items() if k in ckpt["state_dict"]
    )
    restored = gather(torch.tensor(restored)).all().item()
    # Each rank's RNG stream restored as it was saved (two streams), not rank 0's on every rank (one stream).
    saved_differ = not torch.equal(*(r["torch"] for r in ckpt["rl_lightning"]["rng_ranks"]))
    resumed_differ = not torch.equal(*gather(resume_checks.rng_at_start))
    resumed_steps = gather(torch.tensor(resumed.env_steps)).tolist()
    dist.destroy_process_group()
    if rank != 0:
        return

    logged_eval = {}
    for _, row in logger.rows:
        logged_eval.update(
            {k: v for k, v in row.items() if k.startswith("member_") and k.endswith("/val/episode_return")}
        )
    result = {
        "world_size": world,
        "ddp_wrapped": wrapped,
        "same_init_as_whole": checks_ok[0],
        "same_first_reset_as_whole": checks_ok[1],
        "united_equal_across_ranks": checks_ok[2],
        "population_after_fit": model.population,
        "env_steps": model.env_steps,
        "local_env_steps_per_member": local_steps,
        "eval_by_rank": every_eval,
        "logged_eval": [logged_eval.get(f"member_{k}/val/episode_return") for k in range(4)],
        "logged_keys": sorted({k for _, row in logger.rows for k in row}),
        "logged_diverged": max(row.get("population/diverged_members", 0.0) for _, row in logger.rows),
        "logged_val_return": float(trainer.callback_metrics["val/episode_return"]),
        "diverged_members": model.diverged_members.tolist(),
        "checkpoint_shapes": sorted({int(v.shape[0]) for v in ckpt["state_dict"].values()}),
        "checkpoint_equals_united": all(torch.equal(ckpt["state_dict"][k], v) for k, v in united.items()),
        "optimizer_state_shapes": sorted(
            {int(v.shape[0]) for st in ckpt["optimizer_states"][0]["state"].values() for v in st.values()}
        ),
        "checkpoint_lr_shape": list(ckpt["optimizer_states"][0]["param_groups"][0]["lr"].shape),
        "resume_restored_own_block": restored,
        "resume_keeps_rank_rng_streams": saved_differ and resumed_differ,
        "resumed_env_steps": resumed_steps,
        "last_ckpt": str(last),
        "eval_mean_all": float(np.mean(every_eval)),
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
