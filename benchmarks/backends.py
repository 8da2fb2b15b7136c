"""Env backends side by side: envpool vs gymnasium (sync and async vector envs), in fits and raw;
the torch backend vs gymnasium for the off-policy algorithms.

    python benchmarks/backends.py                       # the fits and raw tables, on this machine
    python benchmarks/backends.py --tables raw --threads 1,2,4,8,16 --num-envs 16   # a many-core host
    python benchmarks/backends.py --tables replay,collection   # off-policy: gymnasium vs torch envs

``fits``: env-steps/s of whole fits through the Trainer, each in a fresh process with one torch
thread, evaluation off, over the steady-state window (from the optimizer step given per run to the
end): PPO and DQN on Pong (PongNoFrameskip-v4, configs/ppo/atari.yaml and configs/dqn/atari.yaml) and
PPO and SAC on HalfCheetah-v5 (their configs), on each backend. envpool runs with ``num_threads`` 1
and 2. ``raw``: vector steps with random actions and no policy (Pong, 8 envs): what the envs alone
cost, and how envpool scales with its threads. ``replay``: DQN on CartPole-v1 and SAC on Pendulum-v1
(their shipped configs, cut short) on gymnasium's envs and on the torch backend's, as fits (same
settings as ``fits``); ``collection``: the same envs collected alone (``ReplayCollector`` phases of
random actions into a replay buffer, no updates) at 1 and 64 sub-envs.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import datetime, timezone
from typing import Any

from common import run_fit

PONG = "PongNoFrameskip-v4"


def fit_runs() -> list[tuple[str, dict[str, Any]]]:
    ppo_pong = {
        "config": "configs/ppo/atari.yaml",
        "model": {"total_env_steps": 6 * 1024},
        "window_from_grad_step": 32,  # after 2 rollouts
    }
    dqn_pong = {
        "config": "configs/dqn/atari.yaml",
        "model": {"total_env_steps": 6_000, "learning_starts": 2_000, "buffer_size": 10_000},
        "window_from_grad_step": 100,
    }
    ppo_cheetah = {
        "config": "configs/ppo/halfcheetah.yaml",
        "model": {"total_env_steps": 6 * 512},
        "window_from_grad_step": 320,  # after 2 rollouts
    }
    sac_cheetah = {
        "config": "configs/sac/halfcheetah.yaml",
        "model": {"total_env_steps": 2_500, "learning_starts": 1_000},
        "window_from_grad_step": 200,
    }
    runs = []
    for name, spec, env_id in (
        ("PPO Pong (8 envs)", ppo_pong, PONG),
        ("DQN Pong (1 env)", dqn_pong, PONG),
        ("PPO HalfCheetah (1 env)", ppo_cheetah, "HalfCheetah-v5"),
        ("SAC HalfCheetah (1 env)", sac_cheetah, "HalfCheetah-v5"),
    ):
        env = {"env_id": env_id}
        runs.append((f"{name}, gymnasium sync", {**spec, "env": {**env, "vectorization": "sync"}}))
        if name.startswith("PPO Pong"):
            runs.append((f"{name}, gymnasium async", {**spec, "env": {**env, "vectorization": "async"}}))
        for threads in (1, 2):
            pool = {**env, "backend": "envpool", "env_kwargs": {"num_threads": threads}}
            runs.append((f"{name}, envpool {threads} thread{'s' * (threads > 1)}", {**spec, "env": pool}))
    return runs


def replay_runs() -> list[tuple[str, dict[str, Any]]]:
    dqn_cartpole = {
        "config": "configs/dqn/cartpole.yaml",
        "model": {"total_env_steps": 6_000, "learning_starts": 1_000},
        "window_from_grad_step": 256,  # after the first phase of updates
    }
    sac_pendulum = {
        "config": "configs/sac/pendulum.yaml",
        "model": {"total_env_steps": 3_000, "learning_starts": 500},
        "window_from_grad_step": 200,
    }
    runs = []
    for name, spec, env_id in (
        ("DQN CartPole (1 env)", dqn_cartpole, "CartPole-v1"),
        ("SAC Pendulum (1 env)", sac_pendulum, "Pendulum-v1"),
    ):
        for backend in ("gymnasium", "torch"):
            runs.append((f"{name}, {backend}", {**spec, "env": {"env_id": env_id, "backend": backend}}))
    return runs


def collection_steps_per_s(env_id: str, backend: str, num_envs: int, seconds: float) -> tuple[float, float]:
    """Env steps per second and per CPU second of ``ReplayCollector`` phases (256 vector steps of random
    actions into a buffer)."""
    import torch

    from rl_lightning.data.buffers import ReplayBuffer
    from rl_lightning.data.replay import ReplayCollector
    from rl_lightning.envs import EnvConfig, make_vector_env

    torch.set_num_threads(1)
    envs = make_vector_env(EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend))
    spaces = envs.single_observation_space, envs.single_action_space
    buffer = ReplayBuffer(100_000, num_envs, *spaces, seed=0)
    collector = ReplayCollector(envs, buffer, torch.device("cpu"), seed=0)
    collector.collect(collector.random_actions, 256)
    steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        steps += collector.collect(collector.random_actions, 256) * num_envs
    rates = steps / (time.perf_counter() - start), steps / (time.process_time() - cpu_start)
    envs.close()
    return rates


def raw_steps_per_s(backend: str, num_envs: int, seconds: float, **kwargs: Any) -> float:
    import numpy as np

    from rl_lightning.envs import EnvConfig, make_vector_env

    config = EnvConfig(env_id=PONG, num_envs=num_envs, backend=backend, **kwargs)
    envs = make_vector_env(config)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    n = envs.single_action_space.n
    for _ in range(20):
        envs.step(rng.integers(0, n, num_envs))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(rng.integers(0, n, num_envs))
        steps += num_envs
    rate = steps / (time.perf_counter() - start)
    envs.close()
    return rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", default="fits,raw", help="fits, raw, replay, collection, comma-separated")
    p.add_argument("--threads", default="1,2", help="envpool thread counts of the raw table")
    p.add_argument("--num-envs", type=int, default=8, help="sub-envs of the raw table")
    p.add_argument("--seconds", type=float, default=8.0, help="per raw measurement")
    args = p.parse_args()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{stamp}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load {os.getloadavg()}\n")
    if "fits" in args.tables:
        print("| run | env steps/s | gradient steps/s | CPU s/s | fit s |")
        print("|---|---:|---:|---:|---:|")
        for name, spec in fit_runs():
            try:
                r = run_fit(spec, timeout_s=600)
            except RuntimeError as e:
                print(f"| {name} | failed: {str(e).splitlines()[-1][:120]} | | | |", flush=True)
                continue
            print(
                f"| {name} | {r['env_steps_per_s']:,.0f} | {r['grad_steps_per_s']:,.1f} | {r['cpu_s_per_s']:.2f} "
                f"| {r['fit_s']:.0f} |",
                flush=True,
            )
        print()
    if "replay" in args.tables:
        # env steps per CPU second too: on a shared machine the process gets a varying share of a core
        print("| run | env steps/s | env steps per CPU s | gradient steps/s | CPU s/s | fit s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, spec in replay_runs():
            r = run_fit(spec, timeout_s=600)
            print(
                f"| {name} | {r['env_steps_per_s']:,.0f} | {r['env_steps_per_s'] / r['cpu_s_per_s']:,.0f} "
                f"| {r['grad_steps_per_s']:,.1f} | {r['cpu_s_per_s']:.2f} | {r['fit_s']:.0f} |",
                flush=True,
            )
        print()
    if "collection" in args.tables:
        print(f"Collection alone, random actions into a replay buffer, 1 torch thread ({args.seconds:.0f} s each):\n")
        print(
            "| env | sub-envs | gymnasium env steps/s | torch env steps/s | per CPU s: gymnasium | torch "
            "| torch / gymnasium |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for env_id in ("CartPole-v1", "Pendulum-v1"):
            for n in (1, 64):
                (g, gc), (t, tc) = (collection_steps_per_s(env_id, b, n, args.seconds) for b in ("gymnasium", "torch"))
                print(f"| {env_id} | {n} | {g:,.0f} | {t:,.0f} | {gc:,.0f} | {tc:,.0f} | {tc / gc:.1f}x |", flush=True)
        print()
    if "raw" in args.tables:
        n = args.num_envs
        print(f"Raw stepping, {PONG}, {n} envs, random actions ({args.seconds:.0f} s each):\n")
        print("| backend | env steps/s |")
        print("|---|---:|")
        for vectorization in ("sync", "async"):
            rate = raw_steps_per_s("gymnasium", n, args.seconds, vectorization=vectorization)
            print(f"| gymnasium {vectorization} | {rate:,.0f} |", flush=True)
        for threads in map(int, args.threads.split(",")):
            rate = raw_steps_per_s("envpool", n, args.seconds, env_kwargs={"num_threads": threads})
            print(f"| envpool, {threads} thread{'s' * (threads > 1)} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
