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
A run spec is ``key=value`` pairs: devices, accelerator, precision, compile, num_envs
(``common.parse_cartpole_spec``; each run is ``common.measure_cartpole``).
"""

from __future__ import annotations

import argparse
import os
import time

from common import measure_cartpole, run_fit  # benchmarks/ is on sys.path: the script's own directory

DEFAULT_RUNS = ["devices=1", "devices=2"]
MORE_RUNS = ["devices=1,compile=1", "devices=1,precision=bf16-mixed"]


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
    runs = args.runs or DEFAULT_RUNS + (MORE_RUNS if args.all else [])
    print(f"PPO CartPole-v1, {args.env_steps} env steps per run, {os.cpu_count()} CPUs\n")
    print("| run | env steps/s | vs first | CPU ms / 1k steps | fit s (start-up incl.) | final eval return |")
    print("|---|---:|---:|---:|---:|---:|")
    first = None
    for spec in runs:
        r = measure_cartpole(spec, args.env_steps)
        first = first or r["steps_per_s"]
        print(
            f"| {spec} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / first:.2f}x | {r['cpu_ms_per_1k_steps']:.0f} "
            f"| {r['fit_s']:.1f} "
            f"| {r['val_return']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
