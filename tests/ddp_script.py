"""A short DDP fit that checks itself on every rank; run by tests/test_ddp.py in a subprocess.

Not a test file (pytest does not collect it): a DDP hang must not wedge pytest, so the test launches
this script under ``timeout -s KILL``. Lightning's DDP launcher re-runs this same command line for
every other local rank; under ``torchrun`` (``--num-nodes 2``) torchrun starts the ranks instead.

Checked on every rank, as the run goes (a failed check exits non-zero):
- gradients identical on all ranks before every optimizer step (DDP all-reduced each
  ``manual_backward``), parameters identical after every training step;
- env steps: each rank's own steps summed over ranks equal the module's global counter;
- logged episode returns equal the mean over all ranks' episodes of that step;
- evaluation: the ranks play disjoint seeds covering all episodes, and the logged mean equals the mean
  over all episodes (not the mean of per-rank means);
- checkpoints are written by rank 0 only.
A population with ``run.population_ddp: replicate`` (``ppo_population``) is checked the same way: every rank
holds every member, whose gradients DDP averages across ranks member by member; env steps count per member.
(A population split across ranks, the default: tests/ddp_members_script.py.)
Rank 0 writes what it saw to ``<out>/result.json``; the test asserts on it.

Adding an algorithm to the DDP tests is one entry in ``ALGOS``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, whatever is installed

import lightning as L  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.loggers import Logger  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402

from rl_lightning import A2C, PPO, SAC, TD3, EnvConfig, RecurrentPPO, RLModule  # noqa: E402
from rl_lightning.checkpointing import AtomicCheckpointIO  # noqa: E402
from rl_lightning.data.rollout import gae_batch  # noqa: E402
from rl_lightning.envs.make import episode_stats  # noqa: E402
from tests.helpers import build  # noqa: E402


class PPOTwoLosses(PPO):
    """PPO whose actor and critic are updated by separate backward passes and optimizers, the way
    SAC, TD3 and DDPG update theirs: each backward reaches only part of the parameters, which plain
    DDP cannot handle (``ddp_find_unused_parameters`` makes it work)."""

    ddp_find_unused_parameters = True

    def training_step(self, iterations: int, batch_idx: int) -> None:
        actor_opt, critic_opt = self.optimizers()
        agent = self.agent
        batch = gae_batch(self.collect_rollout(agent), self.hparams.gamma, self.hparams.gae_lambda)
        losses = []
        for opt, loss in (
            (actor_opt, lambda: -agent.evaluate(batch.obs, batch.actions)[0].float().mul(batch.advantages).mean()),
            (critic_opt, lambda: (agent.value(batch.obs).float() - batch.returns).pow(2).mean()),
        ):
            opt.zero_grad()
            losses.append(loss())
            self.manual_backward(losses[-1])
            opt.step()
        if self.should_log():
            self.log_training({"train/policy_loss": losses[0].detach(), "train/value_loss": losses[1].detach()})

    def configure_optimizers(self):
        actor = [*self.agent.actor_body.parameters(), *self.agent.head.parameters()]
        return torch.optim.Adam(actor, lr=1e-3), torch.optim.Adam(self.agent.critic.parameters(), lr=1e-3)


class PPOMemberDivergesOnOneRank(PPO):
    """A population whose member 1 gets a non-finite loss on rank 1 only, from the third rollout on: both
    ranks must freeze it alike (their divergence decisions reduced across ranks) or their members drift."""

    def minibatch_update(self, *minibatch):
        if self.global_rank == 1 and self.env_steps > 256:
            returns = minibatch[5].clone()
            returns[1] = float("nan")
            minibatch = (*minibatch[:5], returns)
        return super().minibatch_update(*minibatch)


PPO_ARGS = dict(num_steps=16, num_minibatches=2, update_epochs=2, env_steps_per_epoch=256, eval_episodes=3)

PENDULUM_16 = EnvConfig("Pendulum-v1", num_envs=2, env_kwargs={"max_episode_steps": 16})


def off_policy_args(steps: int) -> dict:
    return dict(
        total_env_steps=steps,
        buffer_size=2000,
        batch_size=32,
        learning_starts=min(128, steps),  # at most the budget (test_ddp also builds one with 1 step)
        train_freq=16,
        gradient_steps=2,
        hidden_sizes=(16, 16),
        env_steps_per_epoch=256,
        eval_episodes=3,
    )


# name -> factory(total_env_steps) of a small model; tests/test_ddp.py runs each one. A new entry needs:
# 1024 env steps reachable exactly with 2 ranks (1536 with 1), eval_episodes=3 (split 2 + 1), and
# log_training called on every training step (the run logs every step). PPO: 64 env steps per rank a rollout.
ALGOS: dict[str, Callable[[int], RLModule]] = {
    "ppo": lambda steps: build(PPO, env=EnvConfig("CartPole-v1", num_envs=4), total_env_steps=steps, **PPO_ARGS),
    # target_kl: the early-stop decision uses the KL averaged over ranks, so ranks stop together.
    "ppo_target_kl": lambda steps: build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=steps,
        **{**PPO_ARGS, "update_epochs": 6, "learning_rate": 0.01},
        target_kl=0.005,
    ),
    # envpool's C++ vector env: per-rank seeds and evaluation seeds on a pool that fixes seeds when built.
    "ppo_envpool": lambda steps: build(
        PPO, env=EnvConfig("CartPole-v1", num_envs=4, backend="envpool"), total_env_steps=steps, **PPO_ARGS
    ),
    # Memory per sub-env on each rank (2 sequences of 2 sub-envs per minibatch); resume on one device.
    "recurrent_ppo": lambda steps: build(
        RecurrentPPO, env=EnvConfig("CartPole-v1", num_envs=4), total_env_steps=steps, hidden_size=16, **PPO_ARGS
    ),
    # A population under DDP, replicated: every rank holds all members; each member's gradients averaged across ranks
    # (data parallelism per member, as a single run's DDP). Members differ in seed and hyperparameters.
    "ppo_population": lambda steps: build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=steps,
        population_variants={"learning_rate": [1e-3, 3e-4], "ent_coef": [0.0, 0.01], "clip_coef": [0.2, 0.1]},
        population_ddp="replicate",
        **PPO_ARGS,
    ),
    # A2C's RMSprop with each member's learning rate (step_members), and each member's gamma. 64 env steps
    # per rollout over 2 ranks (32 with 1).
    "a2c_population": lambda steps: build(
        A2C,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=steps,
        num_steps=8,
        rollouts_per_step=2,
        env_steps_per_epoch=256,
        eval_episodes=3,
        population_variants={"learning_rate": [7e-4, 2e-3], "gamma": [0.99, 0.9]},
        population_ddp="replicate",
    ),
    "ppo_population_diverging": lambda steps: build(
        PPOMemberDivergesOnOneRank,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=steps,
        population=2,
        population_ddp="replicate",
        **PPO_ARGS,
    ),
    "ppo_two_losses": lambda steps: build(
        PPOTwoLosses, env=EnvConfig("CartPole-v1", num_envs=4), total_env_steps=steps, **PPO_ARGS
    ),
    # Off-policy: 64 env steps a phase with 2 ranks (32 with 1); the warm-up is two phases' worth, so the
    # first phase collects 192 and 1024 is reached exactly (1536 too, after a warm-up again on resume).
    # 16-step episodes end in every phase: Lightning re-emits a step metric's last value on later steps
    # of the epoch where it was not logged, so phases without an episode end would log stale returns.
    "sac": lambda steps: build(SAC, env=PENDULUM_16, **off_policy_args(steps)),
    "td3": lambda steps: build(TD3, env=PENDULUM_16, **off_policy_args(steps)),
    # An off-policy population: each member's own part of each rank's buffer, its own learning rate and tau.
    "sac_population": lambda steps: build(
        SAC,
        env=PENDULUM_16,
        population=2,
        population_variants={"learning_rate": [3e-4, 1e-3], "tau": [0.005, 0.02]},
        population_ddp="replicate",
        **off_policy_args(steps),
    ),
}


def gather(x: torch.Tensor) -> torch.Tensor:
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x)
    return torch.stack(out)


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


class RankChecks(L.Callback):
    """Cross-rank checks on every optimizer step and training step (all collective: every rank calls)."""

    def __init__(self) -> None:
        self.grad_checks = self.param_checks = 0
        self.local_env_steps = 0
        self.episodes = [0.0, 0.0]  # return sum, count since the last training step
        self.expected_returns: dict[int, float] = {}  # global env steps -> mean over all ranks' episodes
        self.first_obs: torch.Tensor | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.ddp_find_unused_parameters = trainer.strategy.model.find_unused_parameters
        envs, step = pl_module.envs, pl_module.envs.step

        def counting_step(actions):
            out = step(actions)
            self.local_env_steps += envs.num_envs // pl_module.population  # a population's count per member
            if (stats := episode_stats(out[4])) is not None:
                ended, returns, _ = stats
                self.episodes[0] += float(returns[ended].sum())
                self.episodes[1] += float(ended.sum())
            if self.first_obs is None:
                self.first_obs = torch.as_tensor(out[0], dtype=torch.float32)
            return out

        envs.step = counting_step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = torch.cat(
            [p.grad.reshape(-1) for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        )
        everyone = gather(grads)
        for other in everyone[1:]:  # NaN alike: a diverged population member's, all-reduced
            same = (everyone[0] == other) | (everyone[0].isnan() & other.isnan())
            assert bool(same.all()), "gradients differ across ranks: no DDP all-reduce"
        self.grad_checks += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        everyone = gather(flat_params(pl_module))
        for other in everyone[1:]:
            assert torch.equal(everyone[0], other), f"parameters differ across ranks after step {batch_idx}"
        self.param_checks += 1
        total = gather(torch.tensor(self.episodes, dtype=torch.float64)).sum(0)
        if total[1] > 0:
            self.expected_returns[pl_module.env_steps] = float(total[0] / total[1])
        self.episodes = [0.0, 0.0]


class MemoryLogger(Logger):
    """Keeps what Lightning logs (rank 0 only, like every logger)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict[str, float]]] = []

    name, version = "memory", 0

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((int(step), {k: float(v) for k, v in metrics.items()}))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


def first_values(rows: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Each logged key's first value."""
    first: dict[str, float] = {}
    for _, row in rows:
        for name, value in row.items():
            first.setdefault(name, value)
    return first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", choices=sorted(ALGOS), default="ppo")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--total-env-steps", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(1)

    L.seed_everything(0, verbose=False)
    model = ALGOS[args.algo](args.total_env_steps)
    evals: list[tuple[list[int], np.ndarray]] = []
    play = model.play_episodes

    def recording_play(seeds):
        returns, lengths = play(seeds)
        evals.append((list(seeds), returns))
        return returns, lengths

    model.play_episodes = recording_play
    saves = []
    save = AtomicCheckpointIO.save_checkpoint  # what RLModule installs on the strategy
    AtomicCheckpointIO.save_checkpoint = lambda io, ckpt, path, **kw: (
        saves.append(str(path)),
        save(io, ckpt, path, **kw),
    )
    checks, logger = RankChecks(), MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60)),
        max_epochs=-1,
        logger=logger,
        log_every_n_steps=1,
        callbacks=[checks, ModelCheckpoint(dirpath=args.out / "ckpt", save_last=True)],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model)

    # Everything below runs on every rank: collectives first, then rank 0 writes the result.
    rank, world = dist.get_rank(), dist.get_world_size()
    local_steps = gather(torch.tensor(checks.local_env_steps)).tolist()
    save_counts = gather(torch.tensor(len(saves))).tolist()
    first_obs = gather(checks.first_obs)
    last_eval = [None] * world
    dist.all_gather_object(last_eval, evals[-1] if evals else ([], np.zeros(0)))
    dist.destroy_process_group()  # else the process sometimes aborts at exit
    if rank != 0:
        return

    seeds = [s for seeds, _ in last_eval for s in seeds]
    returns = np.concatenate([r for _, r in last_eval])
    result = {
        "world_size": world,
        "env_steps": model.env_steps,
        "local_env_steps": local_steps,
        "global_step": trainer.global_step,
        "grad_checks": checks.grad_checks,
        "param_checks": checks.param_checks,
        "checkpoint_saves_per_rank": save_counts,
        "last_ckpt": str(args.out / "ckpt" / "last.ckpt"),
        "distinct_first_obs": not torch.equal(first_obs[0], first_obs[1]),
        "eval_seeds_per_rank": [len(s) for s, _ in last_eval],
        "eval_seeds": sorted(seeds),
        "eval_mean_all_episodes": float(returns.mean()),
        "eval_mean_of_rank_means": float(np.mean([r.mean() for _, r in last_eval if len(r)])),
        "logged_val_return": float(trainer.callback_metrics["val/episode_return"]),
        "expected_rollout_returns": {str(k): v for k, v in checks.expected_returns.items()},
        "logged_rollout_returns": {
            str(step): row["rollout/episode_return"] for step, row in logger.rows if "rollout/episode_return" in row
        },
        "logged_env_steps": max(row.get("time/env_steps", 0.0) for _, row in logger.rows),
        "ddp_find_unused_parameters": checks.ddp_find_unused_parameters,
        "logged": first_values(logger.rows),
        "diverged_members": model.diverged_members.tolist() if model.population > 1 else [],
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
