"""What the benchmark scripts share: reading a YAML config as ``rl-lightning fit`` does, building its
model with overrides, a quiet Trainer, child processes (their environment and JSON result), evaluated
fits of a config (compare.py, learning.py), timed fits in a fresh process (gpu.py, scaling.py,
backends.py) and the PPO CartPole runs of scaling.py and gpu.py. Scripts run from the repository root
or anywhere: ``benchmarks/`` is on ``sys.path`` when a script in it runs. A script imports this module
and no other script (tests/test_architecture.py checks it)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, whatever is installed


def load_config(path: str | Path) -> tuple[type, dict[str, Any], dict[str, Any]]:
    """``(algorithm class, init args, trainer args)`` of a YAML config (relative to the repository
    root), with ``env`` as an ``EnvConfig``."""
    import yaml

    from rl_lightning.envs import EnvConfig

    full = yaml.safe_load((ROOT / path).read_text())
    module_path, cls_name = full["model"]["class_path"].rsplit(".", 1)
    cls = getattr(__import__(module_path, fromlist=[cls_name]), cls_name)
    init = dict(full["model"]["init_args"])
    init["env"] = EnvConfig(**init["env"])
    return cls, init, full.get("trainer", {}) or {}


def make_model(cls: type, init: dict[str, Any], **overrides: Any) -> Any:
    """``cls(**init)`` with ``overrides`` on top. ``init`` may hold ``run`` and ``replay`` as the dicts
    a YAML config has; an override named like one of their fields (``total_env_steps``,
    ``learning_starts``, ...) goes into it; ``env`` overrides are a dict of ``EnvConfig`` fields."""
    from rl_lightning import ReplayConfig, RunConfig
    from rl_lightning.config import constructor_defaults

    params = constructor_defaults(cls)  # a variant's inherited arguments too (it takes them as **kwargs)
    args = {k: v for k, v in init.items() if k not in ("run", "replay")}
    env = overrides.pop("env", None)
    if isinstance(env, dict):
        env = dataclasses.replace(args["env"], **env)
    if env is not None:
        args["env"] = env
    for name, config_cls in (("run", RunConfig), ("replay", ReplayConfig)):
        if name not in params:
            continue
        fields = {f.name for f in dataclasses.fields(config_cls)}
        given = {**(init.get(name) or {}), **{k: overrides.pop(k) for k in list(overrides) if k in fields}}
        args[name] = dataclasses.replace(params[name], **given)
    return cls(**{**args, **overrides})


def quiet_trainer(**kwargs: Any) -> Any:
    """A Trainer on one device with no logger, checkpoints, progress bar, summary or sanity check."""
    import lightning as L

    defaults: dict[str, Any] = {
        "devices": 1,
        "max_epochs": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    return L.Trainer(**{**defaults, **kwargs})


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this one's, with this checkout first on ``PYTHONPATH``
    (whatever is installed), and ``extra`` on top (``OMP_NUM_THREADS=...``)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def child_result(cmd: list[str], env: dict[str, str], what: str) -> Any:
    """Run ``cmd`` (a fresh process: no shared thread pools or caches, imports not timed) and return
    the JSON of the last line it prints; if it fails, raise with ``what`` and the end of its stderr."""
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------- evaluated fits
EVAL_EPISODES = 20


def fit_config(
    config: str, seed: int, precision: str = "32-true", **overrides: Any
) -> tuple[int, list[tuple[float, int, float]], float]:
    """Train ``config`` (a YAML path) as ``rl-lightning fit`` would, with ``EVAL_EPISODES`` evaluation
    episodes, the Trainer's ``precision`` and ``overrides`` of its model arguments. Returns ``(env
    steps, curve, training time)``: the curve has ``(training s, env steps, eval return)`` per
    evaluation; evaluation time is excluded."""
    import lightning as L

    cls, init, trainer_args = load_config(config)
    log_every = trainer_args.get("log_every_n_steps", 10)  # the CLI's default is 10
    L.seed_everything(seed, verbose=False)
    model = make_model(cls, init, eval_episodes=EVAL_EPISODES, **overrides)
    clock = EvalClock()
    # devices: the CLI's default, where quiet_trainer's is 1
    trainer = quiet_trainer(devices="auto", precision=precision, callbacks=[clock], log_every_n_steps=log_every)
    clock.start()
    trainer.fit(model)
    return model.env_steps, clock.curve, clock.train_time()


class EvalClock:
    """Lightning callback: training time with evaluation excluded, and the return at each evaluation."""

    def __new__(cls):  # built lazily so that a process that never fits (compare.py's SB3 runs) never imports Lightning
        from lightning.pytorch.callbacks import Callback

        class _EvalClock(Callback):
            def start(self) -> None:
                self.t0, self.eval_time, self.curve = time.perf_counter(), 0.0, []

            def on_validation_start(self, trainer, pl_module) -> None:
                self.v0 = time.perf_counter()

            def on_validation_end(self, trainer, pl_module) -> None:
                now = time.perf_counter()
                self.eval_time += now - self.v0
                ret = float(trainer.callback_metrics["val/episode_return"])
                self.curve.append((self.v0 - self.t0 - (self.eval_time - (now - self.v0)), pl_module.env_steps, ret))

            def train_time(self) -> float:
                return time.perf_counter() - self.t0 - self.eval_time

        return _EvalClock()


# ------------------------------------------------------------------------------------ timed fits
WINDOW_FROM_GRAD_STEP = 48  # steady state: compilation, CUDA and DDP warm-up are over by then


def fit_worker(spec: dict[str, Any]) -> dict[str, Any] | None:
    """One fit of ``spec["config"]`` with ``spec``'s overrides (``model``, ``env``, ``accelerator``,
    ``devices``, ``precision``, ``compile``, ``cuda_graphs``, ``window_from_grad_step``, ``max_time_s``),
    one torch thread per rank, evaluation off; steady-state rates from the optimizer step
    ``window_from_grad_step`` to the end.
    ``devices > 1`` on CPU is DDP over gloo (every rank runs this; rank 0 returns the result, with
    the CPU seconds of all ranks)."""
    from datetime import timedelta

    import lightning as L
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from rl_lightning.callbacks import CompileNetworks, CUDAGraphs

    torch.set_num_threads(1)
    cls, init, trainer_args = load_config(spec["config"])
    total = spec["model"]["total_env_steps"]
    devices = int(spec.get("devices", 1))

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.marks: list[tuple[float, float, int, int]] = []
            self.curve: list[list[float]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize()
            self.marks.append((time.perf_counter(), time.process_time(), pl_module.env_steps, trainer.global_step))
            if (r := trainer.callback_metrics.get("rollout/episode_return")) is not None and self.curve[-1:] != [
                [pl_module.env_steps, float(r)]
            ]:
                self.curve.append([pl_module.env_steps, float(r)])  # the training return as logged

    L.seed_everything(0, verbose=False)
    model = make_model(cls, init, env=spec.get("env", {}), **spec.get("model", {}), env_steps_per_epoch=total)
    clock = Clock()
    trainer = quiet_trainer(
        accelerator=spec.get("accelerator", "cpu"),
        devices=devices,
        strategy=DDPStrategy(timeout=timedelta(seconds=120)) if devices > 1 else "auto",
        precision=spec.get("precision", "32-true"),
        limit_val_batches=0,  # no evaluation: an untrained Atari policy can play for 27k steps
        max_time=timedelta(seconds=spec["max_time_s"]) if "max_time_s" in spec else None,
        log_every_n_steps=trainer_args.get("log_every_n_steps", 10),
        callbacks=[clock]
        + ([CompileNetworks()] if spec.get("compile") else [])
        + ([CUDAGraphs()] if spec.get("cuda_graphs") else []),
    )
    start = time.perf_counter()
    trainer.fit(model)
    fit_s = time.perf_counter() - start
    marks = clock.marks
    window_from = spec.get("window_from_grad_step", WINDOW_FROM_GRAD_STEP)
    first = next((i for i, m in enumerate(marks) if m[3] >= window_from), len(marks) - 2)
    (t0, c0, e0, g0), (t1, c1, e1, g1) = marks[min(first, len(marks) - 2)], marks[-1]
    cpu_s = cpu_seconds_of_all_ranks(c1 - c0, devices)
    if trainer.global_rank != 0:
        return None
    last_return = trainer.callback_metrics.get("rollout/episode_return")  # the last training episodes logged
    return {
        "env_steps_per_s": (e1 - e0) / (t1 - t0),  # the global counter: all ranks' env steps
        "grad_steps_per_s": (g1 - g0) / (t1 - t0),
        "cpu_s_per_s": sum(cpu_s) / (t1 - t0),
        "window_env_steps": e1 - e0,
        "env_steps": model.env_steps,
        "grad_steps": trainer.global_step,
        "fit_s": fit_s,
        "train_return": None if last_return is None else float(last_return),
        "curve": clock.curve,  # [env steps, training return] at each logging step
        # CUDA graphs: per update function, graphs captured, calls replayed, calls run eagerly, failed
        "graphs": {k: [g.captures, g.replays, g.eager_calls, g.failed] for k, g in model.graphs.graphed.items()},
    }


def cpu_seconds_of_all_ranks(cpu_s: float, devices: int) -> list[float]:
    """This rank's CPU seconds, gathered from every rank under DDP (then the process group ends: a
    worker calls it once, after its fit)."""
    if devices == 1:
        return [cpu_s]
    import torch.distributed as dist

    gathered: list[Any] = [None] * devices
    dist.all_gather_object(gathered, cpu_s)
    dist.destroy_process_group()
    return gathered


def run_fit(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``fit_worker`` in a fresh process (no compile caches, thread pools or CUDA state shared; with
    ``devices > 1`` Lightning's launcher starts the other ranks from it)."""
    env = child_env()
    for var in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"):
        env.pop(var, None)
    cmd = [sys.executable, __file__, "--fit-worker", json.dumps(spec)]
    out = subprocess.run(
        ["timeout", "-s", "KILL", str(int(timeout_s)), *cmd], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"rc {out.returncode}: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------- PPO CartPole runs
# scaling.py's runs (gpu.py's cartpole section too): a run spec is ``key=value`` pairs, e.g.
# ``devices=2`` or ``accelerator=gpu,devices=1,precision=bf16-mixed``.
WARMUP_STEPS = 3


def parse_cartpole_spec(spec: str) -> dict[str, str]:
    out = {"devices": "1", "accelerator": "cpu", "precision": "32-true", "compile": "0", "num_envs": "8"}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        if key not in out:
            raise ValueError(f"Unknown run key {key!r}; known: {sorted(out)}")
        out[key] = value
    return out


def measure_cartpole(spec: str, env_steps: int, timeout_s: int = 900) -> dict:
    """``cartpole_worker`` in a fresh process (Lightning's DDP launcher re-runs it per rank): its result."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--cartpole-worker", spec, str(env_steps), str(result)]
        out = subprocess.run(
            ["timeout", "-s", "KILL", str(timeout_s), *cmd], env=child_env(), capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"{spec} failed:\n{out.stderr[-3000:]}")
        return json.loads(result.read_text())


def cartpole_worker(spec: str, env_steps: int, json_path: Path) -> None:
    """PPO on CartPole-v1 (configs/ppo/cartpole.yaml's hyperparameters) as ``spec`` says, ``env_steps``
    in all; steady-state env steps/s and CPU time of all ranks from the end of training step
    ``WARMUP_STEPS`` on, written to ``json_path`` by rank 0."""
    from datetime import timedelta

    import lightning as L
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from rl_lightning import PPO, EnvConfig, RunConfig
    from rl_lightning.callbacks import CompileNetworks

    torch.set_num_threads(1)
    s = parse_cartpole_spec(spec)
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
    trainer = quiet_trainer(
        accelerator=s["accelerator"], devices=devices, strategy=strategy, precision=s["precision"], callbacks=callbacks
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


if __name__ == "__main__" and sys.argv[1:2] == ["--fit-worker"]:
    if (result := fit_worker(json.loads(sys.argv[2]))) is not None:
        print(json.dumps(result), flush=True)
elif __name__ == "__main__" and sys.argv[1:2] == ["--cartpole-worker"]:
    cartpole_worker(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
