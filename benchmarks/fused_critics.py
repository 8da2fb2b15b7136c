"""Twin critics as one batched network (``QEnsemble``, one ``baddbmm`` per layer) vs two separate MLPs.

Times the critic's share of a SAC gradient step (critic loss forward/backward + fused Adam step, then
the actor loss's pass through the frozen critic and back to the actions), A/B interleaved in one
process so load on the machine hits both alike. Prints microseconds per update (median of rounds).

    python benchmarks/fused_critics.py [--threads 1] [--obs 3 --act 1] [--hidden 256 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from rl_lightning.networks.continuous import QEnsemble


class SeparateCritics(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], n: int = 2) -> None:
        super().__init__()

        def mlp() -> nn.Sequential:
            dims, layers = [obs_dim + act_dim, *hidden], []
            for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
                layers += [nn.Linear(d_in, d_out), nn.ReLU()]
            return nn.Sequential(*layers, nn.Linear(dims[-1], 1))

        self.qs = nn.ModuleList(mlp() for _ in range(n))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, actions], -1)
        return torch.stack([q(x).squeeze(-1) for q in self.qs])


def update(critic: nn.Module, opt: torch.optim.Optimizer, obs, actions, target, actions_pi) -> None:
    q = critic(obs, actions)
    loss = (q - target).pow(2).mean(1).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    critic.requires_grad_(False)
    q_pi = critic(obs, actions_pi).min(0).values
    (-q_pi.mean()).backward()
    critic.requires_grad_(True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--obs", type=int, default=3)
    p.add_argument("--act", type=int, default=1)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    b, hidden = args.batch, tuple(args.hidden)
    obs, actions, target = torch.randn(b, args.obs), torch.rand(b, args.act) * 2 - 1, torch.randn(b)
    variants = {"fused": QEnsemble(args.obs, args.act, hidden), "separate": SeparateCritics(args.obs, args.act, hidden)}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3, fused=True) for k, m in variants.items()}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.rounds + 1):
        for k, critic in variants.items():
            actions_pi = (torch.rand(b, args.act) * 2 - 1).requires_grad_(True)
            t = time.perf_counter()
            for _ in range(args.steps):
                update(critic, opts[k], obs, actions, target, actions_pi)
            if r > 0:  # round 0 warms up
                times[k].append((time.perf_counter() - t) / args.steps * 1e6)
    for k, ts in times.items():
        print(f"{k:9s} {statistics.median(ts):8.0f} us/update (min {min(ts):.0f}, max {max(ts):.0f})")
    print(f"fused / separate: {statistics.median(times['fused']) / statistics.median(times['separate']):.3f}")


if __name__ == "__main__":
    main()
