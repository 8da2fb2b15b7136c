"""Env-steps/s of PPO on CartPole-v1: one rank vs DDP ranks, and precision / compile on or off.

    python benchmarks/scaling.py                                    # devices=1 vs devices=2 on CPU (gloo)
    python benchmarks/scaling.py --all                              # + compile, + bf16-mixed
    python benchmarks/scaling.py --runs devices=1 devices=1,compile=1 --env-steps 100000
    python benchmarks/scaling.py --allreduce                        # gloo all-reduce cost per call
    python benchmarks/scaling.py --work                             # DDP where each step carries work

``--work``: 1 rank vs 2 DDP ranks (one torch thread each) on PPO-Atari (Pong on envpool, one envpool
thread per rank, Nature CNN) and SAC-HalfCheetah (256x256 networks), and on PPO CartPole for contrast.
The 2-rank runs keep the algorithm of the 1-rank run: each rank has half the sub-envs (PPO) or half the
batch and twice the gradient steps per own env step (SAC), so the global batch, the optimizer steps per
env step and the budget are the same, and only the work is split (through ``common.run_fit``).

Each run is a fresh process (a fit through the Lightning Trainer with the SB3-zoo hyperparameters of
configs/ppo/cartpole.yaml, one torch thread per rank). Reported:
- ``steps/s``: steady-state env steps per second, all ranks together (the global counter), from the
  end of the third training step (compilation and DDP start-up done) to the end of the last one;
  a single evaluation at the very end is outside the window.
- ``fit s``: the whole ``trainer.fit`` (start-up, compilation, evaluation included).
- ``CPU ms / 1k steps``: CPU time of all ranks together in the same window, per 1000 env steps: the
  work DDP adds (gradient all-reduce, synchronization), independent of how busy the machine is.
DDP on CPU scales only if the machine has a free core per rank; on a shared machine the steps/s are
indicative (the CPU-time column is not).
A run spec is ``key=value`` pairs: devices, accelerator, precision, compile, num_envs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from common import cpu_seconds_of_all_ranks, run_fit  # benchmarks/ is on sys.path: the script's own directory

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ["devices=1", "devices=2"]
MORE_RUNS = ["devices=1,compile=1", "devices=1,precision=bf16-mixed"]
WARMUP_STEPS = 3


def parse_spec(spec: str) -> dict[str, str]:
    out = {"devices": "1", "accelerator": "cpu", "precision": "32-true", "compile": "0", "num_envs": "8"}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        if key not in out:
            raise ValueError(f"Unknown run key {key!r}; known: {sorted(out)}")
        out[key] = value
    return out


def measure(spec: str, env_steps: int, timeout_s: int = 900) -> dict:
    """Run one configuration in a fresh process (Lightning's DDP launcher re-runs it per rank)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--worker", spec, "--env-steps", str(env_steps), "--json", str(result)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        out = subprocess.run(["timeout", "-s", "KILL", str(timeout_s), *cmd], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{spec} failed:\n{out.stderr[-3000:]}")
        return json.loads(result.read_text())


def worker(spec: str, env_steps: int, json_path: Path) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from rl_lightning import PPO, EnvConfig, RunConfig
    from rl_lightning.callbacks import CompileNetworks

    torch.set_num_threads(1)
    s = parse_spec(spec)
    devices = int(s["devices"])

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.marks: list[tuple[float, float, int]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize()
            self.marks.append((time.perf_counter(), time.process_time(), pl_module.env_steps))

    L.seed_everything(0, verbose=False)
    model = PPO(
        env=EnvConfig("CartPole-v1", num_envs=int(s["num_envs"])),
        # one evaluation, at the end, outside the timed window
        run=RunConfig(total_env_steps=env_steps, env_steps_per_epoch=env_steps, eval_episodes=devices),
        # configs/ppo/cartpole.yaml (SB3 zoo)
        num_steps=32,
        learning_rate=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        update_epochs=20,
        num_minibatches=1,
        ent_coef=0.0,
    )
    clock = Clock()
    callbacks: list[L.Callback] = [clock] + ([CompileNetworks()] if s["compile"] == "1" else [])
    strategy = DDPStrategy(timeout=timedelta(seconds=120)) if devices > 1 else "auto"
    trainer = L.Trainer(
        accelerator=s["accelerator"],
        devices=devices,
        strategy=strategy,
        precision=s["precision"],
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    trainer.fit(model)
    fit_s = time.perf_counter() - start
    (t0, c0, s0), (t1, c1, s1) = clock.marks[WARMUP_STEPS - 1], clock.marks[-1]
    cpu_s = cpu_seconds_of_all_ranks(c1 - c0, devices)
    if trainer.global_rank != 0:
        return
    result = {
        "spec": spec,
        "env_steps": model.env_steps,
        "steps_per_s": (s1 - s0) / (t1 - t0),
        "cpu_ms_per_1k_steps": 1e6 * sum(cpu_s) / (s1 - s0),
        "fit_s": fit_s,
        "val_return": float(trainer.callback_metrics["val/episode_return"]),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
    }
    json_path.write_text(json.dumps(result))


def allreduce_worker(rank: int, port: int, numel: int, calls: int) -> None:
    """One rank of the gloo all-reduce micro-benchmark: wall and CPU time per ``all_reduce``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.randn(numel)
    for _ in range(3):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            dist.all_reduce(x)
        wall, cpu = (time.perf_counter() - t0) / calls * 1e6, (time.process_time() - c0) / calls * 1e6
        print(f"rank {rank}: all_reduce of {numel} floats: {wall:.0f} us wall, {cpu:.0f} us CPU", flush=True)
    dist.destroy_process_group()


def work_runs() -> list[tuple[str, dict, dict]]:
    """(name, 1-rank spec, 2-rank spec) of ``--work``."""
    pong = {
        "config": "configs/ppo/atari_envpool.yaml",
        "model": {"total_env_steps": 8 * 1024},
        "window_from_grad_step": 32,  # after 2 rollouts
    }
    pong_env = {"env_kwargs": {"num_threads": 1}}
    sac = {
        "config": "configs/sac/halfcheetah.yaml",
        "model": {"total_env_steps": 3_000, "learning_starts": 1_000, "batch_size": 256, "gradient_steps": 1},
        "window_from_grad_step": 300,
    }
    cartpole = {
        "config": "configs/ppo/cartpole.yaml",
        "model": {"total_env_steps": 51_200},
        "window_from_grad_step": 60,
    }
    return [
        (
            "PPO Pong (envpool), 8 envs",
            {**pong, "env": {**pong_env, "num_envs": 8}},
            {**pong, "devices": 2, "env": {**pong_env, "num_envs": 4}},
        ),
        (
            "SAC HalfCheetah-v5, batch 256",
            sac,
            {**sac, "devices": 2, "model": {**sac["model"], "batch_size": 128, "gradient_steps": 2}},
        ),
        (
            "PPO CartPole-v1, 8 envs",
            {**cartpole, "env": {"num_envs": 8}},
            {**cartpole, "devices": 2, "env": {"num_envs": 4}},
        ),
    ]


def work_table() -> None:
    print("| workload | 1 rank env steps/s | 2 ranks env steps/s | speed-up | CPU s/s (1 / 2) | train return (1 / 2) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, one, two in work_runs():
        r1, r2 = run_fit(one, timeout_s=900), run_fit(two, timeout_s=900)
        ret = " / ".join("-" if r["train_return"] is None else f"{r['train_return']:.1f}" for r in (r1, r2))
        print(
            f"| {name} | {r1['env_steps_per_s']:,.0f} | {r2['env_steps_per_s']:,.0f} "
            f"| {r2['env_steps_per_s'] / r1['env_steps_per_s']:.2f}x "
            f"| {r1['cpu_s_per_s']:.2f} / {r2['cpu_s_per_s']:.2f} | {ret} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=None, help="run specs, e.g. devices=2 or devices=1,compile=1")
    parser.add_argument("--all", action="store_true", help="also compile and bf16-mixed runs")
    parser.add_argument("--env-steps", type=int, default=51_200, help="env steps per run (all ranks together)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", action="store_true", help="1 vs 2 ranks on PPO-Atari, SAC-HalfCheetah, CartPole")
    parser.add_argument(
        "--allreduce", action="store_true", help="only time gloo all-reduces of PPO's 9,155 parameters (2 ranks)"
    )
    args = parser.parse_args()
    if args.allreduce:  # the cost DDP adds to every optimizer step
        import torch.multiprocessing as mp

        mp.spawn(allreduce_worker, args=(29571, 9155, 2000), nprocs=2)
        return
    if args.work:
        work_table()
        return
    if args.worker is not None:
        worker(args.worker, args.env_steps, args.json)
        return
    runs = args.runs or DEFAULT_RUNS + (MORE_RUNS if args.all else [])
    print(f"PPO CartPole-v1, {args.env_steps} env steps per run, {os.cpu_count()} CPUs\n")
    print("| run | env steps/s | vs first | CPU ms / 1k steps | fit s (start-up incl.) | final eval return |")
    print("|---|---:|---:|---:|---:|---:|")
    first = None
    for spec in runs:
        r = measure(spec, args.env_steps)
        first = first or r["steps_per_s"]
        print(
            f"| {spec} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / first:.2f}x | {r['cpu_ms_per_1k_steps']:.0f} "
            f"| {r['fit_s']:.1f} "
            f"| {r['val_return']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
