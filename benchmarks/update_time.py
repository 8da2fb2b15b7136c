"""Time one SAC, TD3, TQC and CrossQ update of this checkout outside Lightning: the Pendulum configs'
networks, a fixed batch of 256, one torch thread, the minimum over 5 x 60 updates; or, with ``--config``,
that config's algorithm, networks and batch size. Run it in two checkouts (alternating) to compare their
update code without env or Lightning noise.

    python benchmarks/update_time.py                 # sac td3
    python benchmarks/update_time.py --algos sac tqc crossq
    python benchmarks/update_time.py --config configs/tqc/mountaincarcontinuous.yaml
    python benchmarks/update_time.py --algos sac td3 --bf16   # also under bf16 autocast, as bf16-mixed runs it
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from common import load_config, make_model  # also puts this checkout first on sys.path


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=["sac", "td3"])
    p.add_argument("--config", default=None, help="time this config's update instead (its batch size)")
    p.add_argument("--bf16", action="store_true", help="also time it under bf16 autocast (Lightning's bf16-mixed)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    for name in [args.config] if args.config else args.algos:
        step = update_of(name, args.config)
        print(f"{name}: {min_time(step):.2f} ms/update (min of 5 x 60)", flush=True)
        if args.bf16:

            def bf16_step(step: Callable[[], None] = step) -> None:
                # As Lightning's bf16-mixed: autocast without its weight-cast cache (weights change every step).
                with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                    step()

            print(f"{name}, bf16 autocast: {min_time(bf16_step):.2f} ms/update (min of 5 x 60)", flush=True)


def min_time(step: Callable[[], None]) -> float:
    """The minimum over 5 x 60 calls of ``step`` (after 30 to warm up), in ms per call."""
    for _ in range(30):
        step()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(60):
            step()
        times.append((time.perf_counter() - t0) / 60 * 1e3)
    return min(times)


if __name__ == "__main__":
    main()
