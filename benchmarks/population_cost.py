"""What a population's members cost on this machine, outside Lightning: one update of ``configs/sac/pendulum.yaml``'s
SAC (256-256 networks, batch 256 per member) and one collection step (acting for every member's sub-env), each for
one run and for a population of N, one torch thread, the minimum over repeats. Where N members' update costs N
times one run's, the arithmetic is the cost and a population saves no time on this machine (docs/benchmarks.md,
"SAC on Pendulum: 8 seeds as one population").

``--algo ppo``: one minibatch update of ``configs/ppo/cartpole.yaml``'s PPO (64-64 tanh actor and critic, the
config's whole 8 x 32 rollout per member, the loss, backward, clipping and Adam), for one run and for N members,
beside its arithmetic floor: the same actor and critic forward and backward for N members written as batched
matrix products (``torch.baddbmm``, no ``vmap``, no optimizer), the least a population's update can cost.

    python benchmarks/population_cost.py [--algo sac|ppo] [--members 8] [--repeats 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from common import load_config, make_model


def timed(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """The minimum over ``repeats`` of the mean ms of ``calls`` calls (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
    return best


def stepped_by_hand(config: str, members: int) -> object:
    """``config``'s model as a population of ``members`` (1: a run), built, its optimizers stepped by hand
    (no Trainer)."""
    import torch

    cls, init, _ = load_config(config)
    torch.manual_seed(0)
    model = make_model(cls, init, env={"seed": 1}, population=members)
    model.build_for_env()
    optimizers = model.configure_optimizers()
    model.optimizers = lambda: optimizers
    model.manual_backward = lambda loss: loss.backward()
    return model


def sac_costs(members: int, calls: int, repeats: int, batch: int = 256) -> dict[str, float]:
    """ms of one SAC update (``batch_update``) and one collection step (``_explore``) of ``members`` members."""
    import torch

    model = stepped_by_hand("configs/sac/pendulum.yaml", members)
    lead = (members, batch) if members > 1 else (batch,)  # a population's batch is member-major
    obs, next_obs = torch.randn(*lead, 3), torch.randn(*lead, 3)
    fields = (obs, torch.rand(*lead, 1) * 2 - 1, torch.randn(lead), torch.full(lead, 0.99), torch.zeros(lead), next_obs)
    step_obs = torch.randn(members, 3)  # one sub-env per member

    def act() -> object:
        with torch.no_grad():
            return model._explore(step_obs)

    return {
        "update_ms": timed(lambda: model.batch_update(*fields), calls, repeats),
        "act_ms": timed(act, calls * 10, repeats),
    }


def ppo_costs(members: int, calls: int, repeats: int, batch: int = 256) -> dict[str, float]:
    """ms of one PPO minibatch update (``minibatch_update``) of ``members`` members, and of the arithmetic floor."""
    import torch

    model = stepped_by_hand("configs/ppo/cartpole.yaml", members)
    params = list(model.agent.parameters())
    model.clip_gradients = lambda o, gradient_clip_val, gradient_clip_algorithm: torch.nn.utils.clip_grad_norm_(
        params, gradient_clip_val
    )
    model.updating = torch.ones(members, dtype=torch.bool)
    lead = (members, batch) if members > 1 else (batch,)
    fields = (torch.randn(*lead, 4), torch.randint(0, 2, lead), -torch.rand(lead), torch.randn(lead))
    fields += (torch.randn(lead), torch.randn(lead))  # values, returns
    out = {"update_ms": timed(lambda: model.minibatch_update(*fields), calls, repeats)}

    def layers(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [
            (torch.randn(members, i, o, requires_grad=True), torch.zeros(members, 1, o, requires_grad=True))
            for i, o in zip(sizes[:-1], sizes[1:], strict=False)
        ]

    actor, critic = layers([4, 64, 64, 2]), layers([4, 64, 64, 1])
    x, a = torch.randn(members, batch, 4), torch.randint(0, 2, (members, batch, 1))

    def mlp(net: list[tuple[torch.Tensor, torch.Tensor]], h: torch.Tensor) -> torch.Tensor:
        for i, (w, b) in enumerate(net):
            h = torch.baddbmm(b, h, w)
            h = torch.tanh(h) if i < len(net) - 1 else h
        return h

    def floor() -> None:
        logp = torch.log_softmax(mlp(actor, x), -1)
        entropy = -(logp.exp() * logp).sum(-1)
        (logp.gather(-1, a).sum() + entropy.sum() + mlp(critic, x).square().sum()).backward()

    out["floor_ms"] = timed(floor, calls, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=["sac", "ppo"], default="sac")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.algo == "ppo":
        one, many = ppo_costs(1, args.calls, args.repeats), ppo_costs(args.members, args.calls, args.repeats)
        print(f"| PPO (configs/ppo/cartpole.yaml) | one run, ms | population of {args.members}, ms | ratio |")
        print("|---|---:|---:|---:|")
        print(
            f"| minibatch update (256 per member) | {one['update_ms']:.2f} | {many['update_ms']:.2f} | "
            f"{many['update_ms'] / one['update_ms']:.1f}x |"
        )
        print(
            f"| arithmetic floor (forward and backward, batched matmuls) | {one['floor_ms']:.2f} | "
            f"{many['floor_ms']:.2f} | {many['floor_ms'] / one['floor_ms']:.1f}x |"
        )
        return
    one = sac_costs(1, args.calls, args.repeats)
    many = sac_costs(args.members, args.calls, args.repeats)
    print(f"| SAC (configs/sac/pendulum.yaml) | one run, ms | population of {args.members}, ms | ratio |")
    print("|---|---:|---:|---:|")
    for key, what in (("update_ms", "update (batch 256 per member)"), ("act_ms", "collection step (acting)")):
        print(f"| {what} | {one[key]:.2f} | {many[key]:.2f} | {many[key] / one[key]:.1f}x |")


if __name__ == "__main__":
    main()
