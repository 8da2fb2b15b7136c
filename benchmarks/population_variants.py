"""What hyperparameter variants (``run.population_variants``, docs/population.md) cost a population's update:
PPO's minibatch update and GAE, and A2C's update (RMSprop, each member's learning rate applied by
``step_members``), each timed for a population of N members with and without every variable argument
varied, outside Lightning, one torch thread, alternating the two arms, the minimum over repeats of 50 calls.
CartPole networks (64, 64); PPO's batch is ``configs/ppo/cartpole.yaml``'s rollout (8 sub-envs x 32 steps per
member, one minibatch), A2C's its default 8 x 5.

    python benchmarks/population_variants.py [--members 8] [--repeats 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from common import ROOT  # noqa: F401 (puts this checkout first on sys.path)


def variants_of(cls: type, members: int) -> dict[str, list[float]]:
    """Every argument ``cls`` can vary, spread over the members around its default."""
    values = dict(learning_rate=1e-3, gamma=0.98, gae_lambda=0.9, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
    values["max_grad_norm"] = 0.5
    return {
        n: [v * (1 - 0.01 * k) for k in range(members)] for n, v in values.items() if n in cls.member_hyperparameters
    }


def calls(algo: str, members: int, varied: bool) -> dict[str, Callable[[], object]]:
    import torch

    from rl_lightning import A2C, PPO, EnvConfig, RunConfig
    from rl_lightning.algorithms import on_policy
    from rl_lightning.data.rollout import Rollout

    cls, steps, kw = (PPO, 32, {"num_minibatches": 1}) if algo == "ppo" else (A2C, 5, {})
    run = RunConfig(population=members, population_variants=variants_of(cls, members) if varied else {})
    torch.manual_seed(0)
    model = cls(env=EnvConfig("CartPole-v1", num_envs=8, seed=0), run=run, num_steps=steps, **kw)
    model.build_for_env()
    opt = model.configure_optimizers()
    model.optimizers = lambda: opt
    model.manual_backward = lambda loss: loss.backward()
    model.updating = torch.ones(members, dtype=torch.bool)
    n, s = members, 8 * steps
    obs, actions = torch.randn(n, s, 4), torch.randint(0, 2, (n, s))
    logprobs, advantages, values, returns = (
        torch.randn(n, s) - 0.7,
        torch.randn(n, s),
        torch.randn(n, s),
        torch.randn(n, s),
    )
    shape = (steps, n * 8)
    rollout = Rollout(
        torch.randn(*shape, 4),
        torch.randint(0, 2, shape),
        torch.randn(shape),
        torch.randn(shape),
        torch.randn(shape),
        torch.rand(shape) < 0.02,
        torch.rand(shape) < 0.01,
        torch.randn(shape),
    )
    if algo == "ppo":
        update = lambda: model.minibatch_update(obs, actions, logprobs, advantages, values, returns)  # noqa: E731
    else:
        update = lambda: model.rollout_update(obs, actions, advantages, returns)  # noqa: E731
    return {"update": update, "gae": lambda: on_policy.gae_member_batch(model, rollout)}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for algo in ("ppo", "a2c"):
        arms = {varied: calls(algo, args.members, varied) for varied in (False, True)}
        best = {(varied, name): float("inf") for varied in arms for name in arms[varied]}
        for _ in range(args.repeats):
            for varied, fns in arms.items():
                for name, fn in fns.items():
                    fn()  # warm-up
                    start = time.perf_counter()
                    for _ in range(50):
                        fn()
                    best[varied, name] = min(best[varied, name], (time.perf_counter() - start) / 50)
        for name in arms[False]:
            shared, varied = best[False, name] * 1e3, best[True, name] * 1e3
            print(
                f"{algo} {name:6s} members={args.members}: shared {shared:.3f} ms, varied {varied:.3f} ms "
                f"({varied / shared:.2f}x)"
            )


if __name__ == "__main__":
    main()
