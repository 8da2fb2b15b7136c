"""Time one SAC, TD3, TQC and CrossQ update of this checkout outside Lightning: the Pendulum configs'
networks, a fixed batch of 256, one torch thread, the minimum over 5 x 60 updates; or, with ``--config``,
that config's algorithm, networks and batch size. Run it in two checkouts (alternating) to compare their
update code without env or Lightning noise.

    python benchmarks/update_time.py                 # sac td3
    python benchmarks/update_time.py --algos sac tqc crossq
    python benchmarks/update_time.py --config configs/tqc/mountaincarcontinuous.yaml
    python benchmarks/update_time.py --algos sac td3 --bf16   # also under bf16 autocast, as bf16-mixed runs it
    python benchmarks/update_time.py --algos sac td3 --sb3    # beside SB3's (sb3-contrib's) update, alternated
    python benchmarks/update_time.py --algos sac --sb3 --in-fit 3000   # each update timed inside a fit, both

``--sb3`` times SB3's ``train`` on the same networks and batch size (its replay's ``sample`` returns one fixed
batch, as ours gets one), ``gradient_steps`` per call as in benchmarks/compare.py's Pendulum spec (TD3: 200
per call, SAC, TQC and CrossQ: 1), alternating with ours three times; and, with both, the share of each
update's CPU time in matrix products (``torch.profiler``: ``mm``, ``addmm``, ``bmm``, ``baddbmm``), which
both libraries compute alike: what is left to make faster.

``--in-fit N`` times the updates where a fit runs them instead: a fit of N env steps of the algorithm's
Pendulum config (``configs/<algo>/pendulum.yaml``, as ``benchmarks/compare.py`` fits it) with every update
timed (its replay sampling included, as SB3's ``train`` samples inside), and with ``--sb3`` SB3's ``learn``
on the same env steps with every ``train`` call timed; the median over the last three quarters of the
updates, each library in a fresh process, ours first. The fixed batch's minimum above is a best case; this is
what a fit's updates cost on the same host at the same time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from common import child_env, child_result, load_config, make_model  # also puts this checkout first on sys.path


def update_of(name: str, config: str | None = None) -> Callable[[], None]:
    """One update of algorithm ``name`` with the Pendulum settings, or of ``config``'s algorithm with its
    settings (``name`` then unused)."""
    import torch

    from rl_lightning import SAC, TD3, TQC, CrossQ, EnvConfig

    torch.manual_seed(0)
    if config is None:
        cls = {"sac": SAC, "td3": TD3, "tqc": TQC, "crossq": CrossQ}[name]
        kw = {"policy_delay": 2, "critic_hidden_sizes": (256, 256)} if cls is CrossQ else {}
        model, b = cls(env=EnvConfig("Pendulum-v1", num_envs=1, seed=0), **kw), 256
    else:
        cls, init, _ = load_config(config)
        model = make_model(cls, init)
        b = model.replay_config.batch_size
    observation_space, action_space = model.build_for_env()
    optimizers = [torch.optim.Adam(p.parameters(), 1e-3, fused=True) for p in (model.actor, model.critic)]
    if cls is not TD3:
        optimizers.append(torch.optim.Adam([model.log_alpha], 1e-3, fused=True))

    def gradient_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float | None = None) -> None:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    model.optimizers, model.gradient_step = lambda: optimizers, gradient_step  # no Trainer
    (obs_dim,), (act_dim,) = observation_space.shape, action_space.shape
    obs, actions, next_obs = torch.randn(b, obs_dim), torch.rand(b, act_dim) * 2 - 1, torch.randn(b, obs_dim)
    rewards, discounts, terminated = torch.randn(b), torch.full((b,), 0.99), torch.zeros(b)
    if cls is TD3:

        def step() -> None:
            model.critic_update(obs, actions, rewards, discounts, terminated, next_obs)
            model.num_updates += 1
            if model.num_updates % model.policy_frequency == 0:
                model.actor_update(obs)

        return step
    if cls is CrossQ:
        model.run_update = lambda update, *inputs: update(*inputs)
        batch = type("Batch", (), dict(obs=obs, actions=actions, rewards=rewards, discounts=discounts))
        batch.terminated, batch.next_obs = terminated, next_obs

        def step() -> None:
            model.update(batch)
            model.num_updates += 1

        return step
    return lambda: model.batch_update(obs, actions, rewards, discounts, terminated, next_obs)


# SB3's and sb3-contrib's algorithms with the networks of ``update_of``'s (their defaults are ours otherwise:
# batch 256; SAC, TQC: 256-256; TD3: 400-300), and compare.py's gradient steps per ``train`` call.
SB3 = {
    "sac": ("stable_baselines3", "SAC", {}, 1),
    "td3": ("stable_baselines3", "TD3", {"policy_kwargs": {"net_arch": [400, 300]}}, 200),
    "tqc": ("sb3_contrib", "TQC", {}, 1),
    "crossq": ("sb3_contrib", "CrossQ", {"policy_delay": 2, "policy_kwargs": {"net_arch": [256, 256]}}, 1),
}


def sb3_update_of(name: str) -> tuple[Callable[[], None], int]:
    """SB3's ``train`` for algorithm ``name`` on Pendulum, its replay sampling one fixed batch of 256; and
    the gradient steps each call takes."""
    import importlib

    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.logger import Logger

    module, algo, kwargs, gradient_steps = SB3[name]
    model = getattr(importlib.import_module(module), algo)("MlpPolicy", "Pendulum-v1", device="cpu", seed=0, **kwargs)
    model.set_logger(Logger(folder=None, output_formats=[]))
    env, rng = gym.make("Pendulum-v1"), np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(256):
        action = rng.uniform(-1.0, 1.0, size=(1, 1)).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(2.0 * action[0])
        model.replay_buffer.add(obs[None], next_obs[None], action, np.array([reward]), np.array([terminated]), [{}])
        obs = next_obs if not (terminated or truncated) else env.reset()[0]
    batch = model.replay_buffer.sample(256)
    model.replay_buffer.sample = lambda *args, **kwargs: batch
    return lambda: model.train(gradient_steps, batch_size=256), gradient_steps


def in_fit_update_ms(name: str, library: str, env_steps: int) -> float:
    """The median time of an update (SB3: of a ``train`` call, one gradient step in these settings) over the last
    three quarters of the updates of a Pendulum fit of ``env_steps`` env steps, in ms; ``library`` "ours" or "sb3"."""
    import statistics

    times: list[float] = []

    def timed(method: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            out = method(*args, **kwargs)
            times.append((time.perf_counter() - t0) * 1e3)
            return out

        return wrapper

    if library == "ours":
        from common import fit_config

        from rl_lightning import SAC, TQC, CrossQ
        from rl_lightning.data.replay import Replay

        cls = {"sac": SAC, "tqc": TQC, "crossq": CrossQ}[name]
        cls.update, Replay.sample = timed(cls.update), timed(Replay.sample)  # sampling counted with its update
        fit_config(f"configs/{name}/pendulum.yaml", 0, total_env_steps=env_steps, env_steps_per_epoch=env_steps)
        times = [a + b for a, b in zip(times[::2], times[1::2], strict=True)]  # sample, then its update
    else:
        import importlib

        module, algo, kwargs, _ = SB3[name]
        cls = getattr(importlib.import_module(module), algo)
        cls.train = timed(cls.train)
        cls("MlpPolicy", "Pendulum-v1", device="cpu", seed=0, **kwargs).learn(env_steps)
    return statistics.median(times[len(times) // 4 :])


def gemm_share(step: Callable[[], None], calls: int) -> float:
    """The share of ``calls`` calls' CPU time (self time of every op) spent in matrix products."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events)
    gemm = sum(
        e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
    )
    return gemm / total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=["sac", "td3"])
    p.add_argument("--config", default=None, help="time this config's update instead (its batch size)")
    p.add_argument("--bf16", action="store_true", help="also time it under bf16 autocast (Lightning's bf16-mixed)")
    p.add_argument("--sb3", action="store_true", help="beside SB3's update (sb3-contrib's for tqc, crossq)")
    p.add_argument("--in-fit", type=int, default=0, metavar="N", help="time the updates of a fit of N env steps")
    p.add_argument("--in-fit-worker", nargs=3, help=argparse.SUPPRESS)  # name library env_steps: one fit
    args = p.parse_args()
    if args.in_fit_worker:
        name, library, env_steps = args.in_fit_worker
        import torch

        torch.set_num_threads(1)
        print(in_fit_update_ms(name, library, int(env_steps)))
        return
    if args.in_fit:
        if "td3" in args.algos:  # its zoo settings update 200 times per 200 env steps, SB3's train per env step
            p.error("--in-fit times sac, tqc and crossq (one update per env step in both libraries' settings).")
        for name in args.algos:
            ms = {}
            for library in ["ours", "sb3"] if args.sb3 else ["ours"]:  # a fresh process each: nothing shared
                worker = [sys.executable, __file__, "--in-fit-worker", name, library, str(args.in_fit)]
                ms[library] = float(child_result(worker, child_env(), f"{name} ({library})"))
            line = f"{name}: ours {ms['ours']:.2f} ms/update inside a fit of {args.in_fit} env steps (median)"
            if args.sb3:
                line += f", SB3 {ms['sb3']:.2f}: x{ms['sb3'] / ms['ours']:.2f}"
            print(line, flush=True)
        return
    import torch

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    for name in [args.config] if args.config else args.algos:
        step = update_of(name, args.config)
        if args.sb3 and not args.config:
            compare_with_sb3(name, step)
            continue
        print(f"{name}: {min_time(step):.2f} ms/update (min of 5 x 60)", flush=True)
        if args.bf16:

            def bf16_step(step: Callable[[], None] = step) -> None:
                # As Lightning's bf16-mixed: autocast without its weight-cast cache (weights change every step).
                with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                    step()

            print(f"{name}, bf16 autocast: {min_time(bf16_step):.2f} ms/update (min of 5 x 60)", flush=True)


def compare_with_sb3(name: str, step: Callable[[], None]) -> None:
    """Ours and SB3's update of ``name``, alternated three times (each the minimum over 3 timed repeats, and
    the minimum of the three rounds), and their matrix product shares."""
    sb3_step, per_call = sb3_update_of(name)
    ours, theirs = [], []
    for _ in range(3):
        ours.append(min_time(step, repeats=3))  # as many timed repeats as theirs below
        theirs.append(
            min_time(sb3_step, repeats=3, calls=max(1, 60 // per_call), warmup=max(1, 30 // per_call)) / per_call
        )
    share, sb3_share = gemm_share(step, 20), gemm_share(sb3_step, max(1, 20 // per_call))
    print(
        f"{name}: ours {min(ours):.2f} ms/update (matrix products {share:.0%} of the CPU time), SB3 "
        f"{min(theirs):.2f} ms/update ({sb3_share:.0%}; {per_call} per train call): x{min(theirs) / min(ours):.2f}; "
        f"per round {', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(ours, theirs, strict=True))}",
        flush=True,
    )


def min_time(step: Callable[[], None], repeats: int = 5, calls: int = 60, warmup: int = 30) -> float:
    """The minimum over ``repeats`` x ``calls`` calls of ``step`` (after ``warmup`` calls), in ms per call."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return min(times)


if __name__ == "__main__":
    main()
