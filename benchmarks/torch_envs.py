"""Torch-native classic-control envs: raw stepping throughput, and PPO end to end, next to the
gymnasium-backed equivalents, in one invocation.

    python benchmarks/torch_envs.py                                   # CPU: 4096 torch envs, PPO pair
    python benchmarks/torch_envs.py --device cuda --num-envs 65536    # GPU (PPO on the GPU too)
    python benchmarks/torch_envs.py --write docs/benchmarks.md        # also write the markdown section

1. Raw stepping: env steps/s of each torch env (``--num-envs`` sub-envs on ``--device``) and of
   gymnasium's ``SyncVectorEnv`` of the same env (8 sub-envs, the layout our gymnasium-backed PPO
   uses), stepping a fixed pool of pre-drawn random actions (so action sampling is not timed).
2. PPO: training env-steps/s (evaluation excluded, as in benchmarks/compare.py) of
   configs/ppo/cartpole_torch.yaml (torch backend; once more with CUDA graphs, ``cuda_graphs: true``:
   each vector step and each update one graph on a GPU, eager on CPU) and of configs/ppo/cartpole.yaml
   (gymnasium backend), each for its config's full budget in a fresh subprocess, and the final
   deterministic evaluation return on gymnasium's CartPole-v1 (20 episodes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from common import child_env, child_result, load_config, make_model, quiet_trainer

ENV_IDS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]
PPO_CONFIGS = {"torch": "configs/ppo/cartpole_torch.yaml", "gymnasium": "configs/ppo/cartpole.yaml"}
SECTION = "## Torch-native environments"
INTRO = """Batched pure-torch ports of the classic-control envs (`env.backend: torch`, rl_lightning/envs/torch/)
next to gymnasium's. Written by `benchmarks/torch_envs.py --write docs/benchmarks.md`, one subsection per
device, envs and threads (a GPU run: `--device cuda --num-envs 65536`); timings on a shared machine are
indicative.

The PPO rows compare the two shipped CartPole configs, each run to its budget and each solving it. They
differ in more than the backend: 1024 torch envs make each policy call, env step and minibatch 128x
larger (per-call overhead amortized), and `cartpole_torch.yaml` does one pass of 16 minibatches over each
16k-step rollout where `cartpole.yaml` does 20 passes over each 256-step rollout, i.e. far fewer gradient
FLOPs per env step; it needs 20x the env steps to solve instead. Env steps/s is the throughput; the
train s column is the end-to-end time to a solved CartPole."""


# ------------------------------------------------------------------------------------ raw stepping
def torch_env_steps_per_s(env_id: str, num_envs: int, device: str, seconds: float) -> float:
    import torch

    from rl_lightning.envs.torch import make_torch_env

    envs = make_torch_env(env_id, num_envs, device=device)
    envs.reset(seed=0)
    space = envs.single_action_space
    g = torch.Generator(device=device).manual_seed(0)
    if hasattr(space, "n"):
        pool = [torch.randint(0, int(space.n), (num_envs,), generator=g, device=device) for _ in range(16)]
    else:
        pool = [2 * torch.rand(num_envs, 1, generator=g, device=device) - 1 for _ in range(16)]
    return _time_steps(envs, pool, num_envs, seconds, sync=torch.cuda.synchronize if device == "cuda" else None)


def gym_env_steps_per_s(env_id: str, num_envs: int, seconds: float) -> float:
    import gymnasium as gym

    from rl_lightning.envs.make import EnvConfig, make_vector_env

    envs = make_vector_env(EnvConfig(env_id, num_envs=num_envs))
    envs.reset(seed=0)
    envs.action_space.seed(0)
    pool = [envs.action_space.sample() for _ in range(256)]
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    return _time_steps(envs, pool, num_envs, seconds)


def _time_steps(envs: Any, pool: list, num_envs: int, seconds: float, sync: Any = None) -> float:
    for i in range(20):  # warm-up
        envs.step(pool[i % len(pool)])
    if sync:
        sync()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for i in range(50):
            envs.step(pool[i % len(pool)])
        steps += 50
        if sync:
            sync()
    return steps * num_envs / (time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------- PPO
def run_ppo(config: str, device: str, seed: int, graphs: bool = False) -> dict[str, Any]:
    import lightning as L
    import numpy as np
    from lightning.pytorch.callbacks import Callback

    from rl_lightning.callbacks import CUDAGraphs

    cls, init, _ = load_config(config)
    total = make_model(cls, init).total_env_steps

    class Clock(Callback):
        """Training time with evaluation excluded."""

        def on_train_start(self, trainer, pl_module) -> None:
            self.t0, self.eval_time = time.perf_counter(), 0.0
            self.c0, self.eval_cpu = time.process_time(), 0.0

        def on_validation_start(self, trainer, pl_module) -> None:
            self.v0, self.vc0 = time.perf_counter(), time.process_time()

        def on_validation_end(self, trainer, pl_module) -> None:
            self.eval_time += time.perf_counter() - self.v0
            self.eval_cpu += time.process_time() - self.vc0

        def on_train_end(self, trainer, pl_module) -> None:
            self.train_s = time.perf_counter() - self.t0 - self.eval_time
            self.train_cpu_s = time.process_time() - self.c0 - self.eval_cpu

    L.seed_everything(seed, verbose=False)
    model = make_model(cls, init, env_steps_per_epoch=total, eval_episodes=20)  # one evaluation, at the end
    clock = Clock()
    trainer = quiet_trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        callbacks=[clock, *([CUDAGraphs()] if graphs else [])],
        log_every_n_steps=10,
    )
    trainer.fit(model)
    returns, _ = model.play_episodes([10_000 + i for i in range(20)])
    return {
        "num_envs": model.env_config.num_envs,
        "env_steps": model.env_steps,
        "train_s": round(clock.train_s, 2),
        "train_cpu_s": round(clock.train_cpu_s, 2),  # ~train_s x threads on an idle machine
        "env_steps_per_s": round(model.env_steps / clock.train_s),
        "eval_return": round(float(np.mean(returns)), 1),
    }


def launch(args: argparse.Namespace, config: str, device: str, graphs: bool = False) -> dict[str, Any]:
    """One PPO run in a fresh subprocess (no shared thread pools or caches; imports not timed)."""
    env = child_env(OMP_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, __file__, "--child", config, "--device", device, "--threads", str(args.threads)]
    cmd += ["--seed", str(args.seed), *(["--cuda-graphs"] if graphs else [])]
    return child_result(cmd, env, config)


# -------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda, for the torch envs and the torch-env PPO")
    parser.add_argument("--num-envs", type=int, default=4096, help="torch sub-envs for raw stepping")
    parser.add_argument("--gym-num-envs", type=int, default=8, help="gymnasium sub-envs for raw stepping")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing window per raw-stepping measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-ppo", action="store_true")
    parser.add_argument("--skip-raw", action="store_true")
    parser.add_argument("--write", type=Path, help="replace (or append) the section in this markdown file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cuda-graphs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(run_ppo(args.child, args.device, args.seed, args.cuda_graphs)))
        return

    lines = [_subsection(args), "", _machine(args), ""]
    if not args.skip_raw:
        lines += [
            f"Raw stepping, random actions, env steps/s: torch envs ({args.num_envs} sub-envs, {args.device}) vs "
            f"gymnasium `SyncVectorEnv` ({args.gym_num_envs} sub-envs, CPU).",
            "",
            "| env | torch | gymnasium | speed-up |",
            "|---|---:|---:|---:|",
        ]
        for env_id in ENV_IDS:
            t = torch_env_steps_per_s(env_id, args.num_envs, args.device, args.seconds)
            g = gym_env_steps_per_s(env_id, args.gym_num_envs, args.seconds)
            lines.append(f"| {env_id} | {t:,.0f} | {g:,.0f} | {t / g:,.0f}x |")
            print(lines[-1], flush=True)
        lines.append("")
    if not args.skip_ppo:
        runs = {
            "torch": launch(args, PPO_CONFIGS["torch"], args.device),
            "torch, CUDA graphs": launch(args, PPO_CONFIGS["torch"], args.device, graphs=True),
            "gymnasium": launch(args, PPO_CONFIGS["gymnasium"], "cpu"),
        }
        base = runs["gymnasium"]["env_steps_per_s"]
        lines += [
            f"PPO on CartPole-v1, each config's full budget, seed {args.seed}: training wall time and env-steps/s "
            "(evaluation excluded); train CPU s = process CPU time (about train s x threads on an idle machine, "
            "less when others share the cores); eval = mean deterministic return of 20 episodes on gymnasium's "
            "CartPole-v1 after training.",
            "",
            "| config | backend | device | num_envs | env steps | train s | train CPU s | env steps/s "
            "| vs gymnasium | eval |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for backend, r in runs.items():
            dev = "cpu" if backend == "gymnasium" else args.device
            config = PPO_CONFIGS[backend.split(",")[0]]
            lines.append(
                f"| `{config}` | {backend} | {dev} | {r['num_envs']} | {r['env_steps']:,} | "
                f"{r['train_s']} | {r['train_cpu_s']} | {r['env_steps_per_s']:,} | "
                f"{r['env_steps_per_s'] / base:.1f}x | {r['eval_return']} |"
            )
            print(lines[-1], flush=True)
        lines.append("")
    text = "\n".join(lines)
    print("\n" + text)
    if args.write:
        _write_section(args.write, _subsection(args), text)


def _subsection(args: argparse.Namespace) -> str:
    threads = f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    return f"### {'GPU' if args.device == 'cuda' else 'CPU'}, {args.num_envs} torch sub-envs, {threads}"


def _machine(args: argparse.Namespace) -> str:
    import torch

    where = torch.cuda.get_device_name() if args.device == "cuda" else _cpu_name()
    return (
        f"Measured with `python benchmarks/torch_envs.py --device {args.device} --num-envs {args.num_envs}"
        f" --threads {args.threads}` on {where}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{args.threads} torch thread(s), {time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f} "
        "at the start (> 0 means other processes shared the cores)."
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def _write_section(path: Path, heading: str, text: str) -> None:
    """Replace this run's subsection (``heading`` to the next heading) inside this benchmark's own
    section, creating either if missing; the rest of the file is left as it is."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    if SECTION not in doc:
        doc = doc.rstrip("\n") + f"\n\n{SECTION}\n\n{INTRO}\n"
    start = doc.index(SECTION)
    end = doc.find("\n## ", start + len(SECTION))
    end = len(doc) if end < 0 else end + 1
    section = doc[start:end].rstrip("\n") + "\n"
    sub = section.find(heading + "\n")
    if sub < 0:
        section = section + "\n" + text.rstrip("\n") + "\n"
    else:
        sub_end = section.find("\n### ", sub + len(heading))
        rest = "" if sub_end < 0 else section[sub_end:]
        section = section[:sub] + text.rstrip("\n") + "\n" + rest
    tail = doc[end:]
    doc = doc[:start] + section + ("\n" + tail if tail else "")
    path.write_text(doc)


if __name__ == "__main__":
    main()
