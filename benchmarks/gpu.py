"""GPU checks and throughput: run on a machine with a CUDA GPU (not run by the test suite or CI).

    python benchmarks/gpu.py                 # everything below, markdown on stdout
    python benchmarks/gpu.py --quick         # transfers + one throughput run per configuration, 20k steps
    python benchmarks/gpu.py --smoke-cpu     # the same code paths on CPU (to check the script itself)

1. Host<->device copies per vector step of PPO collection on the GPU, counted with torch.profiler:
   expected one host-to-device copy (the observations) per vector step, plus two per step in which
   a sub-env was truncated (its final observation and the sub-env indices), three per rollout
   (rewards and done flags), and one device-to-host copy per vector step (the actions).
2. PPO CartPole-v1 env-steps/s (benchmarks/scaling.py's runs, each a fresh process): CPU vs GPU,
   fp32 vs bf16-mixed vs compile, 8 vs 64 envs, and DDP over every GPU when there are several.
3. PPO CartPole-v1 in bf16-mixed on the GPU: evaluation return after 100k env steps (seed 0), >= 475
   expected (it solves in fp32).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("scaling", ROOT / "benchmarks/scaling.py")
scaling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scaling)


def count_transfers(device: str, vector_steps: int = 256) -> dict[str, float]:
    """Profile one PPO collection of ``vector_steps`` steps on ``device``; count copies by direction."""
    from torch.profiler import ProfilerActivity, profile

    from rl_lightning.data.rollout import RolloutCollector
    from rl_lightning.envs.make import EnvConfig, make_vector_env
    from rl_lightning.networks.policies import ActorCritic

    envs = make_vector_env(EnvConfig("CartPole-v1", num_envs=8))
    agent = ActorCritic(envs.single_observation_space, envs.single_action_space).to(device)
    collector = RolloutCollector(envs, vector_steps, torch.device(device), seed=0)
    collector.collect(agent, 0.99, 0.95)  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        collector.collect(agent, 0.99, 0.95)
        if device == "cuda":
            torch.cuda.synchronize()
    truncation_steps = int(collector.truncated.any(axis=1).sum())
    names = [e.name for e in prof.events()]
    envs.close()
    return {
        "vector_steps": vector_steps,
        "truncation_steps": truncation_steps,
        "htod": sum("HtoD" in n for n in names),
        "dtoh": sum("DtoH" in n for n in names),
    }


def learn_bf16(accelerator: str) -> tuple[float, float]:
    import lightning as L

    from rl_lightning import PPO, EnvConfig

    L.seed_everything(0, verbose=False)
    model = PPO(
        env=EnvConfig("CartPole-v1", num_envs=8),
        total_env_steps=100_000,
        num_steps=32,
        learning_rate=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        update_epochs=20,
        num_minibatches=1,
    )
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision="bf16-mixed",
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model)
    return float(trainer.callback_metrics["val/episode_return"]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer env steps, no learning run")
    parser.add_argument("--smoke-cpu", action="store_true", help="run every section on CPU (checks the script)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gpu = not args.smoke_cpu
    if gpu and not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU visible; use --smoke-cpu to check the script on CPU.")
    device, accelerator = ("cuda", "gpu") if gpu else ("cpu", "cpu")
    n_gpus = torch.cuda.device_count() if gpu else 0
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, " + (torch.cuda.get_device_name() if gpu else "CPU"))

    t = count_transfers(device)
    print("\n### Host-device copies in one PPO rollout (8 CartPole envs)\n")
    print("| vector steps | steps with a truncation | host->device | device->host |\n|---:|---:|---:|---:|")
    print(f"| {t['vector_steps']} | {t['truncation_steps']} | {t['htod']} | {t['dtoh']} |")
    if gpu:
        assert t["htod"] <= t["vector_steps"] + 2 * t["truncation_steps"] + 3, t
        assert t["dtoh"] <= t["vector_steps"] + 1, t

    steps = 20_480 if args.quick or args.smoke_cpu else 102_400
    runs = ["devices=1"] + [
        f"accelerator={accelerator},{extra}"
        for extra in ("devices=1", "devices=1,precision=bf16-mixed", "devices=1,compile=1", "devices=1,num_envs=64")
    ]
    if n_gpus > 1:
        runs.append(f"accelerator=gpu,devices={n_gpus}")
    print(f"\n### PPO CartPole-v1 env-steps/s ({steps} env steps per run)\n")
    print("| run | env steps/s | fit s (start-up incl.) | final eval return |\n|---|---:|---:|---:|")
    for spec in runs:
        r = scaling.measure(spec, steps)
        print(f"| {spec} | {r['steps_per_s']:,.0f} | {r['fit_s']:.1f} | {r['val_return']:.0f} |", flush=True)

    if not args.quick and not args.smoke_cpu:
        ret, wall = learn_bf16(accelerator)
        print(f"\n### PPO CartPole-v1, bf16-mixed on the GPU, seed 0, 100k env steps: eval {ret:.1f} in {wall:.0f} s")


if __name__ == "__main__":
    main()
