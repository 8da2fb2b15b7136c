"""GPU throughput and checks: one prepared run on a CUDA machine (not run by the test suite or CI).

    python benchmarks/gpu.py --out DIR                 # every section below, within --budget-s seconds
    python benchmarks/gpu.py --sections update,atari   # some of them
    python benchmarks/gpu.py --smoke-cpu --out DIR     # the same code paths on CPU, tiny sizes (checks the script)

Sections, run in this order (the most wanted first); each appends its markdown to ``DIR/gpu.md`` and its
raw numbers to ``DIR/gpu.json`` as soon as it ends, so a run cut short keeps what it finished, and a
section that would not fit in the time left is skipped with a note:

1. ``update``: gradient steps/s of the Atari networks alone (no envs, no Lightning): PPO's minibatch
   update (Nature-CNN actor-critic, loss, backward, clipping, Adam) at the minibatch of
   configs/ppo/atari.yaml (256) and at 2048; DQN's (Nature-CNN Q-network, target forward, Huber loss,
   backward, clipping, Adam) at the batch of configs/dqn/atari.yaml (32) and at 512; each in float32,
   bfloat16 autocast (what ``precision: bf16-mixed`` does), ``torch.compile`` (what ``compile: true``
   does), ``torch.compile(mode="reduce-overhead")`` (CUDA graphs of the loss) and ``cuda-graph``:
   the whole update as one CUDA graph, as ``cuda_graphs: true`` runs it in fits.
2. ``graphs``: fits with and without CUDA graphs (``cuda_graphs: true``: each update captured once
   and replayed) for PPO, DQN, PQN and Rainbow on Pong (envpool), A2C on CartPole, SAC, TD3, TQC and
   CrossQ (the zoo's 2048-wide critics) on HalfCheetah: env-steps/s, gradient steps/s, and per update
   function the graphs captured, the calls replayed, the calls run eagerly (warm-up) and whether capture
   failed (then the run fell back to eager).
3. ``torch_envs``: ``benchmarks/torch_envs.py --device cuda --num-envs 65536``: raw stepping of every
   torch-native env on the GPU, and PPO on 1024 torch CartPoles on the GPU to its config's budget,
   without and with CUDA graphs (each vector step and each update one graph).
4. ``transfers``: host<->device copies in one PPO rollout on the GPU (torch.profiler): expected one
   host-to-device copy per vector step (the observations), two more per step with a truncation, three
   per rollout, and one device-to-host copy per vector step (the actions).
5. ``atari``: PPO-Atari (Breakout, configs/ppo/atari.yaml) and DQN-Atari (Pong, configs/dqn/atari.yaml
   with ``learning_starts`` cut to reach training quickly) fits through the Lightning Trainer, each a
   fresh process: steady-state env-steps/s and gradient steps/s (after the first 48 optimizer steps,
   evaluation off), float32 vs bf16-mixed vs compile; PPO's 8 emulators stepped in the training
   process (``sync``) or in 8 worker processes (``async``).
6. ``cartpole``: PPO CartPole-v1 env-steps/s (benchmarks/scaling.py's runs): CPU vs GPU, float32 vs
   bf16-mixed vs compile, 8 vs 64 envs.
7. ``learn_bf16``: PPO CartPole-v1 in bf16-mixed on the GPU to 100k env steps (seed 0): eval >= 475
   expected (it solves in float32).
8. ``population``: ``run.population`` on the GPU (docs/population.md; ``benchmarks/population.py``'s fits,
   each a fresh process): PPO on torch CartPoles (configs/ppo/cartpole.yaml, env.backend torch) as one run
   and as populations of 8, 32 and 128 members, and SAC on Pendulum (configs/sac/pendulum.yaml) as one run
   and a population of 8, at a short budget per member: wall and training time, each population's time
   over one run's (8 seeds in at most 2x one run's time is the goal), and the members' final returns.
9. ``pong``: PPO on Pong (configs/ppo/atari_envpool.yaml: envpool, 8 envs) with CUDA graphs, for the
   time left of the budget (up to its 10M frames): the training return along the env steps, and
   the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common import (  # benchmarks/ is on sys.path: the script's own directory
    ROOT,
    WINDOW_FROM_GRAD_STEP,
    child_env,
    child_result,
    fit_worker,  # noqa: F401 (tests)
    load_config,
    make_model,
    measure_cartpole,
    quiet_trainer,
    run_fit,
)

SECTIONS = ["update", "graphs", "torch_envs", "transfers", "atari", "cartpole", "learn_bf16", "population", "pong"]
# Rough GPU-machine durations (s), used to skip a section that would not end before the deadline.
SECTION_S = {
    "transfers": 15,
    "update": 90,
    "atari": 150,
    "graphs": 420,
    "pong": 120,
    "torch_envs": 60,
    "cartpole": 80,
    "learn_bf16": 40,
    "population": 240,
}
UPDATE_MODES = ["fp32", "bf16", "compile", "compile-cudagraphs", "cuda-graph"]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------- transfers
def count_transfers(device: str, vector_steps: int = 256) -> dict[str, Any]:
    """Profile one PPO collection of ``vector_steps`` steps on ``device``; count copies by direction."""
    from torch.profiler import ProfilerActivity, profile

    from rl_lightning.data.rollout import RolloutCollector
    from rl_lightning.envs.make import EnvConfig, make_vector_env
    from rl_lightning.networks.policies import ActorCritic

    envs = make_vector_env(EnvConfig("CartPole-v1", num_envs=8))
    agent = ActorCritic(envs.single_observation_space, envs.single_action_space).to(device)
    collector = RolloutCollector(envs, vector_steps, torch.device(device), seed=0)
    collector.rollout(agent)  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        rollout = collector.rollout(agent)
        sync(device)
    truncation_steps = int(rollout.truncated.any(dim=1).sum())
    names = [e.name for e in prof.events()]
    envs.close()
    return {
        "vector_steps": vector_steps,
        "truncation_steps": truncation_steps,
        "htod": sum("HtoD" in n for n in names),
        "dtoh": sum("DtoH" in n for n in names),
    }


def section_transfers(ctx: Context) -> list[str]:
    t = count_transfers(ctx.device)
    ctx.record("transfers", t)
    lines = [
        "| vector steps | steps with a truncation | host->device copies | device->host copies |",
        "|---:|---:|---:|---:|",
        f"| {t['vector_steps']} | {t['truncation_steps']} | {t['htod']} | {t['dtoh']} |",
    ]
    if ctx.gpu:
        within = t["htod"] <= t["vector_steps"] + 2 * t["truncation_steps"] + 3 and (t["dtoh"] <= t["vector_steps"] + 1)
        lines += ["", f"Within the expected bound (one copy each way per vector step): {'yes' if within else 'NO'}."]
    return lines


# ------------------------------------------------------------------------------------------ update
def atari_module(algo: str, device: str) -> tuple[Any, Any, Any]:
    """The algorithm with its Atari config's hyperparameters, networks built, on ``device``, and the
    env's observation and action spaces."""
    cls, init, _ = load_config(f"configs/{algo}/atari.yaml")
    model = make_model(cls, init)
    spaces = model.build_for_env()
    return model.to(device), *spaces


def update_step(algo: str, batch: int, mode: str, device: str) -> tuple[Callable[[], None], Any]:
    """One gradient step of ``algo``'s Atari networks on a fixed random batch, as the fit does it."""
    from rl_lightning.algorithms.dqn import dqn_loss, dqn_target
    from rl_lightning.cuda_graphs import GraphedUpdate

    model, obs_space, action_space = atari_module(algo, device)
    hp = model.hparams
    if mode == "cuda-graph":
        model.enable_cuda_graphs()  # a capturable Adam, as cuda_graphs: true builds it
    if mode.startswith("compile"):
        model.compile_networks(mode="reduce-overhead" if mode == "compile-cudagraphs" else None)
    autocast = mode == "bf16"
    params = [p for p in model.parameters() if p.requires_grad]
    opt = model.configure_optimizers()  # the fit's: fused Adam ...
    if autocast:  # ... except under mixed precision with gradient clipping (RLModule.adam)
        for group in opt.param_groups:
            group["fused"] = False
    g = torch.Generator(device=device).manual_seed(0)
    shape, n_actions = obs_space.shape, int(action_space.n)

    def frames() -> torch.Tensor:
        return torch.randint(0, 256, (batch, *shape), generator=g, device=device, dtype=torch.uint8)

    actions = torch.randint(0, n_actions, (batch,), generator=g, device=device)
    floats = [torch.randn(batch, generator=g, device=device) for _ in range(4)]
    obs, next_obs = frames(), frames()
    max_norm = hp.max_grad_norm

    def update(obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, *floats: torch.Tensor) -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
            if algo == "ppo":
                logprobs = -1.4 + 0.1 * floats[0]
                loss = model.minibatch_loss(obs, actions, logprobs, floats[1], floats[2], floats[3]).loss
            else:
                with torch.no_grad():
                    rewards, discounts = floats[0].sign(), torch.full_like(floats[0], hp.gamma)
                    target = dqn_target(rewards, discounts, torch.zeros_like(rewards), model.q_target(next_obs).float())
                q = model.q_net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
                loss, _ = dqn_loss(q.float(), target, torch.ones_like(target), hp.loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        opt.step()

    if mode == "cuda-graph":  # the whole update (loss, backward, clipping, Adam) as one graph
        graphed = GraphedUpdate(update)
        return (lambda: graphed(obs, next_obs, actions, *floats)), model
    return (lambda: update(obs, next_obs, actions, *floats)), model


def time_update(algo: str, batch: int, mode: str, device: str, iters: int) -> dict[str, Any]:
    step, _ = update_step(algo, batch, mode, device)
    t0 = time.perf_counter()
    step()
    sync(device)
    first_s = time.perf_counter() - t0  # includes compilation
    for _ in range(10):
        step()
    sync(device)
    per_step = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync(device)
        per_step.append((time.perf_counter() - t0) / iters)
    us = sorted(per_step)[len(per_step) // 2] * 1e6
    return {"algo": algo, "batch": batch, "mode": mode, "us_per_step": us, "first_step_s": first_s}


def section_update(ctx: Context) -> list[str]:
    lines = [
        "Median of 5 timings of " + str(ctx.update_iters) + " steps each, after 10 warm-up steps; "
        '"first step" includes compilation. Samples/s = batch x gradient steps/s.',
        "",
        "| algorithm | batch | mode | us / gradient step | gradient steps/s | samples/s | vs fp32 | first step s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    # The configs' batches in every mode; a larger batch (where the GPU starts to fill) without compiling.
    grid = [("ppo", 256, UPDATE_MODES), ("ppo", 2048, ["fp32", "bf16"]), ("dqn", 32, UPDATE_MODES)]
    grid += [("dqn", 512, ["fp32", "bf16"])]
    if not ctx.gpu:
        grid = [("ppo", 32, ["fp32", "bf16", "compile", "cuda-graph"]), ("dqn", 32, ["fp32", "bf16", "cuda-graph"])]
    for algo, batch, modes in grid:
        base = None
        for mode in modes:
            try:
                r = time_update(algo, batch, mode, ctx.device, ctx.update_iters)
            except Exception as e:  # one failing mode (say, CUDA graphs) must not cost the others
                lines.append(
                    f"| {algo.upper()} | {batch} | {mode} | failed: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:120]} | | | | |"
                )
                continue
            ctx.record("update", r)
            base = base or r["us_per_step"]
            rate = 1e6 / r["us_per_step"]
            lines.append(
                f"| {algo.upper()} | {batch} | {mode} | {r['us_per_step']:,.0f} | {rate:,.0f} | "
                f"{rate * batch:,.0f} | {base / r['us_per_step']:.2f}x | {r['first_step_s']:.1f} |"
            )
            print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------------- fits
def atari_specs(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    accel = "gpu" if ctx.gpu else "cpu"
    if ctx.gpu:
        ppo = {"config": "configs/ppo/atari.yaml", "model": {"total_env_steps": 16 * 1024}}
        dqn = {
            "config": "configs/dqn/atari.yaml",
            "model": {"total_env_steps": 12_000, "learning_starts": 2_000, "buffer_size": 100_000},
        }
    else:  # tiny: checks the code path only
        ppo = {"config": "configs/ppo/atari.yaml", "model": {"total_env_steps": 8 * 128, "num_steps": 16}}
        dqn = {
            "config": "configs/dqn/atari.yaml",
            "model": {"total_env_steps": 1_000, "learning_starts": 500, "buffer_size": 2_000},
        }
    runs = [
        ("PPO, sync, fp32", {**ppo, "accelerator": accel}),
        ("PPO, async, fp32", {**ppo, "accelerator": accel, "env": {"vectorization": "async"}}),
        (
            "PPO, async, bf16-mixed",
            {**ppo, "accelerator": accel, "env": {"vectorization": "async"}, "precision": "bf16-mixed"},
        ),
        ("PPO, async, compile", {**ppo, "accelerator": accel, "env": {"vectorization": "async"}, "compile": True}),
        ("DQN, fp32", {**dqn, "accelerator": accel}),
        ("DQN, bf16-mixed", {**dqn, "accelerator": accel, "precision": "bf16-mixed"}),
        ("DQN, compile", {**dqn, "accelerator": accel, "compile": True}),
    ]
    return runs


def section_atari(ctx: Context) -> list[str]:
    lines = [
        "PPO: BreakoutNoFrameskip-v4, configs/ppo/atari.yaml (8 envs x 128 steps, 4 epochs x 4 minibatches of 256), "
        "16 rollouts. DQN: ALE/Pong-v5, configs/dqn/atari.yaml (1 env, a gradient step of 32 every 4 env steps) "
        "with learning_starts 2,000, 12,000 env steps. Rates over the steady-state window (from optimizer step "
        f"{WINDOW_FROM_GRAD_STEP} to the end, evaluation off); CPU s/s = the training process's CPU seconds per "
        "second (the async env workers not included).",
        "",
        "| run | env steps/s | gradient steps/s | CPU s/s | fit s (start-up, compile incl.) |",
        "|---|---:|---:|---:|---:|",
    ]
    return lines + fit_rows(
        ctx,
        "atari",
        atari_specs(ctx),
        lambda r: (
            f"{r['env_steps_per_s']:,.0f} | {r['grad_steps_per_s']:,.1f} | {r['cpu_s_per_s']:.2f} | {r['fit_s']:.1f}"
        ),
    )


def fit_rows(
    ctx: Context, section: str, specs: list[tuple[str, dict[str, Any]]], cells: Callable[[dict[str, Any]], str]
) -> list[str]:
    """One table row per ``(name, spec)``: ``run_fit(spec)`` in a fresh process, its result recorded
    under ``section`` and written by ``cells``; skipped when out of time, ``failed`` with the error."""
    lines = []
    for name, spec in specs:
        if ctx.remaining() < 25:
            lines.append(f"| {name} | skipped: out of time |")
            continue
        try:
            r = run_fit(spec, min(240, ctx.remaining() - 5))
        except Exception as e:
            lines.append(f"| {name} | failed: {str(e).splitlines()[-1][:150]} |")
            print(f"{name} failed: {e}", file=sys.stderr, flush=True)
            continue
        ctx.record(section, {"run": name, **r})
        lines.append(f"| {name} | {cells(r)} |")
        print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------ CUDA graphs
def graph_specs(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    accel = "gpu" if ctx.gpu else "cpu"
    scale = 1 if ctx.gpu else 0  # tiny runs on CPU: the code paths only
    # Pong's budgets: 16 rollouts of 8 envs (PPO, PQN), and a replay warm-up then updates (DQN, Rainbow).
    pong_rollouts = {"total_env_steps": 16 * 1024} if scale else {"total_env_steps": 2 * 8 * 16, "num_steps": 16}
    pong_replay = (
        {"total_env_steps": 12_000, "learning_starts": 2_000, "buffer_size": 100_000}
        if scale
        else {"total_env_steps": 600, "learning_starts": 300, "buffer_size": 1_000}
    )
    specs = {
        "PPO Pong (envpool)": {"config": "configs/ppo/atari_envpool.yaml", "model": pong_rollouts},
        "DQN Pong (envpool)": {"config": "configs/dqn/atari_envpool.yaml", "model": pong_replay},
        "A2C CartPole": {
            "config": "configs/a2c/cartpole.yaml",
            "model": {"total_env_steps": 50_000 if scale else 2_000},
        },
        "SAC HalfCheetah": {
            "config": "configs/sac/halfcheetah.yaml",
            "model": {"total_env_steps": 4_000 if scale else 300, "learning_starts": 1_000 if scale else 100},
        },
        "TD3 HalfCheetah": {
            "config": "configs/td3/halfcheetah.yaml",
            "model": {"total_env_steps": 4_000 if scale else 300, "learning_starts": 1_000 if scale else 100},
        },
        # The zoo's CrossQ setting, whose 2048-wide critics a 2-core CPU cannot train to 300k env steps
        # in a day (docs/benchmarks.md, "TQC and CrossQ"): its rate here sizes a GPU learning run.
        "CrossQ HalfCheetah (2048-wide critics)": {
            "config": "configs/crossq/halfcheetah.yaml",
            "model": {"total_env_steps": 4_000, "learning_starts": 1_000}
            if scale
            else {"total_env_steps": 300, "learning_starts": 100, "critic_hidden_sizes": [64, 64]},
        },
        "TQC HalfCheetah": {
            "config": "configs/tqc/halfcheetah.yaml",
            "model": {"total_env_steps": 4_000 if scale else 300, "learning_starts": 1_000 if scale else 100},
        },
        # The value-based Pong configs, too slow to learn on a 2-core CPU (docs/benchmarks.md, "Pong on
        # envpool: PQN's speed"): their rates here size GPU learning runs. Last, so the
        # rows above keep their turn in a short lease.
        "PQN Pong (envpool)": {"config": "configs/pqn/pong_envpool.yaml", "model": pong_rollouts},
        "Rainbow Pong (envpool)": {"config": "configs/rainbow/atari_envpool.yaml", "model": pong_replay},
    }
    runs = []
    for name, spec in specs.items():
        for graphs in (False, True):
            runs.append(
                (
                    f"{name}, {'CUDA graphs' if graphs else 'eager'}",
                    {**spec, "accelerator": accel, "cuda_graphs": graphs},
                )
            )
    return runs


def section_graphs(ctx: Context) -> list[str]:
    lines = [
        "Fits through the Trainer, each a fresh process, evaluation off; rates over the steady-state window "
        f"(from optimizer step {WINDOW_FROM_GRAD_STEP}). graphs: per update function, captured / replayed / "
        "eager calls (warm-up) / capture failed.",
        "",
        "| run | env steps/s | gradient steps/s | fit s | graphs |",
        "|---|---:|---:|---:|---|",
    ]
    return lines + fit_rows(ctx, "graphs", graph_specs(ctx), graph_cells)


def graph_cells(r: dict[str, Any]) -> str:
    graphs = "; ".join(f"{k}: {'/'.join(map(str, v))}" for k, v in r["graphs"].items()) or "-"
    return f"{r['env_steps_per_s']:,.0f} | {r['grad_steps_per_s']:,.1f} | {r['fit_s']:.1f} | {graphs}"


def section_pong(ctx: Context) -> list[str]:
    seconds = max(10.0, ctx.remaining() - 60) if ctx.gpu else 20.0
    threads = 8 if ctx.gpu else 1
    spec = {
        "config": "configs/ppo/atari_envpool.yaml",
        "accelerator": "gpu" if ctx.gpu else "cpu",
        "cuda_graphs": True,
        "env": {"env_kwargs": {"num_threads": threads}},
        "model": {"total_env_steps": 2_500_000 if ctx.gpu else 2_048, **({} if ctx.gpu else {"num_steps": 16})},
        "max_time_s": seconds,
    }
    r = run_fit(spec, seconds + 120)
    ctx.record("pong", r)
    curve = r["curve"]
    marks = [
        c for i, c in enumerate(curve) if i == len(curve) - 1 or int(c[0]) // 250_000 != int(curve[i + 1][0]) // 250_000
    ]
    return [
        f"PPO, PongNoFrameskip-v4 on envpool (8 envs, {threads} threads), CUDA graphs, {r['env_steps']:,} env steps "
        f"({4 * r['env_steps']:,} frames) in {r['fit_s']:.0f} s: {r['env_steps_per_s']:,.0f} env steps/s in the "
        "steady state. Training return (the last logged before each 250k env steps):",
        "",
        "| env steps | training return |",
        "|---:|---:|",
        *(f"| {int(steps):,} | {ret:.1f} |" for steps, ret in marks),
    ]


# ----------------------------------------------------------------------------- other benchmarks
def section_torch_envs(ctx: Context) -> list[str]:
    md = ctx.out / "torch_envs.md"
    args = ["--device", ctx.device, "--num-envs", "65536" if ctx.gpu else "256", "--write", str(md)]
    args += ["--seconds", "1"] if ctx.gpu else ["--seconds", "0.2", "--skip-ppo"]
    cmd = [sys.executable, str(ROOT / "benchmarks/torch_envs.py"), *args]
    out = subprocess.run(
        ["timeout", "-s", "KILL", str(int(ctx.remaining() - 5)), *cmd], env=child_env(), capture_output=True, text=True
    )
    if out.returncode != 0:
        return [f"failed (rc {out.returncode}):", "", "```", out.stderr.strip()[-1500:], "```"]
    text = md.read_text()
    return text[text.index("### ") :].splitlines()[1:]  # the subsection, without its heading


def section_cartpole(ctx: Context) -> list[str]:
    accel = "gpu" if ctx.gpu else "cpu"
    steps = 30_720 if ctx.gpu else 10_240
    runs = ["devices=1"] + [
        f"accelerator={accel},{extra}"
        for extra in ("devices=1", "devices=1,precision=bf16-mixed", "devices=1,compile=1", "devices=1,num_envs=64")
    ]
    lines = [
        f"configs/ppo/cartpole.yaml hyperparameters, {steps:,} env steps per run; the first run is on the CPU.",
        "",
        "| run | env steps/s | CPU ms / 1k steps | fit s (start-up incl.) |",
        "|---|---:|---:|---:|",
    ]
    for spec in runs:
        if ctx.remaining() < 20:
            lines.append(f"| {spec} | skipped: out of time | | |")
            continue
        try:
            r = measure_cartpole(spec, steps, timeout_s=int(min(180, ctx.remaining() - 5)))
        except Exception as e:
            lines.append(f"| {spec} | failed: {str(e).splitlines()[-1][:150]} | | |")
            continue
        ctx.record("cartpole", r)
        lines.append(f"| {spec} | {r['steps_per_s']:,.0f} | {r['cpu_ms_per_1k_steps']:.0f} | {r['fit_s']:.1f} |")
        print(lines[-1], flush=True)
    return lines


def section_learn_bf16(ctx: Context) -> list[str]:
    import lightning as L

    cls, init, _ = load_config("configs/ppo/cartpole.yaml")
    steps = 100_000 if ctx.gpu else 2_048
    L.seed_everything(0, verbose=False)
    model = make_model(cls, init, total_env_steps=steps, env_steps_per_epoch=steps)  # one evaluation, at the end
    trainer = quiet_trainer(accelerator="gpu" if ctx.gpu else "cpu", precision="bf16-mixed")
    start = time.perf_counter()
    trainer.fit(model)
    ret = float(trainer.callback_metrics["val/episode_return"])
    wall = time.perf_counter() - start
    ctx.record("learn_bf16", {"eval_return": ret, "fit_s": wall, "env_steps": model.env_steps})
    return [f"Seed 0, {model.env_steps:,} env steps: eval return {ret:.1f} (20 episodes), fit {wall:.0f} s."]


def section_population(ctx: Context) -> list[str]:
    plans = [  # (config, env backend, env steps per member, population sizes)
        ("configs/ppo/cartpole.yaml", "torch", 50_000 if ctx.gpu else 1_024, [1, 8, 32, 128] if ctx.gpu else [1, 4]),
        ("configs/sac/pendulum.yaml", None, 3_000 if ctx.gpu else 300, [1, 8] if ctx.gpu else [1, 2]),
    ]
    lines = [
        "Env steps per member as listed; 20 evaluation episodes per member at each evaluation; seed 1.",
        "",
        "| config | members | wall s | train s | train s / one run's | final return: mean (min, max) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for config, backend, steps, sizes in plans:
        one = None
        for members in sizes:
            if ctx.remaining() < 30:
                lines.append(f"| {config} | {members} | skipped: out of time | | | |")
                continue
            spec = dict(config=config, seed=1, backend=backend, total_env_steps=steps, population=members)
            worker = [sys.executable, str(ROOT / "benchmarks/population.py"), "--worker", json.dumps(spec)]
            try:  # population.py's fit worker, in a fresh process per arm
                r = child_result(worker, child_env(OMP_NUM_THREADS="1"), f"population={members}")
            except Exception as e:
                lines.append(f"| {config} | {members} | failed: {str(e).splitlines()[-1][:150]} | | | |")
                continue
            ctx.record("population", {**spec, **r})
            one = r["train_s"] if members == 1 else one
            ratio = f"{r['train_s'] / one:.2f}x" if one else ""
            returns = r["returns"]
            spread = f"{sum(returns) / len(returns):.1f} ({min(returns):.1f}, {max(returns):.1f})"
            lines.append(
                f"| {config} ({backend or 'gymnasium'}, {steps:,} steps) | {members} | {r['wall_s']:.1f} | "
                f"{r['train_s']:.1f} | {ratio} | {spread} |"
            )
            print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------------- main
class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.gpu = not args.smoke_cpu
        self.device = "cuda" if self.gpu else "cpu"
        self.out = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.deadline = time.perf_counter() + args.budget_s
        self.update_iters = 50 if self.gpu else 3
        self.results: dict[str, Any] = {}

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def record(self, section: str, result: dict[str, Any]) -> None:
        self.results.setdefault(section, []).append(result)
        (self.out / "gpu.json").write_text(json.dumps(self.results, indent=1))

    def write(self, lines: list[str]) -> None:
        text = "\n".join(lines) + "\n"
        with open(self.out / "gpu.md", "a") as f:
            f.write(text)
        print(text, flush=True)


def machine_line(ctx: Context) -> str:
    import gymnasium
    import lightning

    try:
        import ale_py

        ale = f", ale-py {ale_py.__version__}"
    except ImportError:
        ale = ""
    where = torch.cuda.get_device_name() if ctx.gpu else "CPU only (--smoke-cpu)"
    return (
        f"{where}, {os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, torch {torch.__version__} "
        f"(CUDA {torch.version.cuda}), lightning {lightning.__version__}, gymnasium {gymnasium.__version__}{ale}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}; one torch thread per process."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--out", type=Path, default=Path("gpu_results"), help="where gpu.md and gpu.json go")
    parser.add_argument("--budget-s", type=float, default=480, help="stop starting work after this many seconds")
    parser.add_argument("--smoke-cpu", action="store_true", help="run every section on CPU at tiny sizes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ctx = Context(args)
    if ctx.gpu and not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU visible; use --smoke-cpu to check the script on CPU.")
    ctx.write(["## GPU run — `benchmarks/gpu.py`", "", machine_line(ctx)])
    titles = {
        "transfers": "Host-device copies in one PPO rollout (8 CartPole envs, 256 vector steps)",
        "update": "Atari networks: gradient steps/s of the update alone",
        "atari": "Atari fits through the Trainer: env steps/s and gradient steps/s",
        "graphs": "Fits with and without CUDA graphs (`cuda_graphs: true`)",
        "pong": "PPO on Pong with envpool and CUDA graphs, for the time left",
        "torch_envs": "Torch-native envs on the GPU (`benchmarks/torch_envs.py --device cuda --num-envs 65536`)",
        "cartpole": "PPO CartPole-v1: CPU vs GPU, precision, compile",
        "learn_bf16": "PPO CartPole-v1 in bf16-mixed on the GPU",
        "population": "Populations: 8 to 128 seeds as one batched model on the GPU",
    }
    sections = {
        "transfers": section_transfers,
        "update": section_update,
        "atari": section_atari,
        "graphs": section_graphs,
        "pong": section_pong,
        "torch_envs": section_torch_envs,
        "cartpole": section_cartpole,
        "learn_bf16": section_learn_bf16,
        "population": section_population,
    }
    for name in args.sections.split(","):
        start = time.perf_counter()
        if ctx.gpu and ctx.remaining() < SECTION_S[name] / 3:
            ctx.write([f"### {titles[name]}", "", f"Skipped: {ctx.remaining():.0f} s left of the budget."])
            continue
        try:
            lines = sections[name](ctx)
        except Exception as e:
            import traceback

            lines = ["Failed:", "", "```", traceback.format_exc()[-2000:], "```"]
            print(f"section {name} failed: {e}", file=sys.stderr, flush=True)
        ctx.write([f"### {titles[name]}", "", *lines, "", f"({time.perf_counter() - start:.0f} s)", ""])


if __name__ == "__main__":
    main()
