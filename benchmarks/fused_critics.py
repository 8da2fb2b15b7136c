"""Twin critics as one batched network (stacked weights, one ``baddbmm`` per layer) vs two separate MLPs
(``rl_lightning.networks.continuous.QEnsemble``, what SAC/TD3/DDPG use).

Times the critic's share of a SAC gradient step (critic loss forward/backward + fused Adam step, then
the actor loss's pass through the frozen critic and back to the actions), A/B interleaved in one
process so load on the machine hits both alike. Prints microseconds per update (median of rounds),
wall-clock and CPU time (``time.process_time``: on a busy machine the steadier of the two).

    python benchmarks/fused_critics.py [--threads 1] [--obs 3 --act 1] [--hidden 256 256] [--bf16] [--denormals]

Last, the hidden layer's matrix product alone in float32 and in bfloat16 (bf16-mixed's arithmetic).

Denormals are flushed to zero, as in a fit (``RLModule.on_fit_start``), unless ``--denormals``. Both
forms keep the output layer in float32 under autocast, as the library does (with a bfloat16 output
layer the batched form looked better under ``--bf16``, 0.68-0.70, than like for like).

Measured on the shared 2-core CPU, 1 thread, batch 256. Intel Xeon with AMX (2026-12-04, 8 rounds),
fused / separate (the last lines): 256x256 0.95 in float32, 0.81 with ``--bf16``; 400x300 0.99 and
0.86. AMD EPYC (2026-12-03, 15-20 rounds of 30 updates, float32): 256x256 0.94-1.04 depending on
load, 400x300 1.01-1.06, 64x64 0.84. In whole fits (``compare.py --child ours[_bf16] ALGO 0 1``, a
batched ``QEnsemble`` against this one, A/B alternating, 2026-12-04) the batched form was 1.6 %
(SAC) and 2.3 % (TD3) slower in float32, 6 % (SAC, one pair) and 1 % (TD3) faster in bf16-mixed: the
critics' share shrinks less in a fit than alone, and float32 is the default, so the library keeps
separate critics.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from ppo_profile import per_call_us  # benchmarks/ is the script's directory, hence on sys.path
from torch import nn

from rl_lightning.networks.continuous import QEnsemble


class BatchedCritics(nn.Module):
    """``n`` critics as stacked ``[n, in, out]`` weights, each layer one ``baddbmm`` for all of them;
    each critic initialized like an ``nn.Linear`` stack. Returns ``[n, B]``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], n: int = 2) -> None:
        super().__init__()
        self.n = n
        dims = [obs_dim + act_dim, *hidden, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
            bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default
            self.weights.append(nn.Parameter(torch.empty(n, d_in, d_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(n, 1, d_out).uniform_(-bound, bound)))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, actions], -1)
        h = x.unsqueeze(0).expand(self.n, *x.shape)
        *hidden, (w_out, b_out) = zip(self.weights, self.biases, strict=True)
        for w, b in hidden:
            h = torch.relu(torch.baddbmm(b, h, w))
        with torch.autocast("cpu", enabled=False):  # float32 output layer, as QEnsemble's Float32Linear
            return torch.baddbmm(b_out, h.float(), w_out).squeeze(-1)


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
    p.add_argument("--bf16", action="store_true", help="run the updates under bfloat16 autocast (bf16-mixed)")
    p.add_argument("--denormals", action="store_true", help="leave denormals on (fits flush them to zero)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(not args.denormals)  # as RLModule does while fitting
    torch.manual_seed(0)
    b, hidden = args.batch, tuple(args.hidden)
    obs, actions, target = torch.randn(b, args.obs), torch.rand(b, args.act) * 2 - 1, torch.randn(b)
    variants = {"fused": BatchedCritics(args.obs, args.act, hidden), "separate": QEnsemble(args.obs, args.act, hidden)}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3, fused=True) for k, m in variants.items()}
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.rounds + 1):
        for k, critic in variants.items():
            actions_pi = (torch.rand(b, args.act) * 2 - 1).requires_grad_(True)
            t, c = time.perf_counter(), time.process_time()
            with torch.autocast("cpu", torch.bfloat16, enabled=args.bf16):
                for _ in range(args.steps):
                    update(critic, opts[k], obs, actions, target, actions_pi)
            if r > 0:  # round 0 warms up
                times[k].append((time.perf_counter() - t) / args.steps * 1e6)
                cpu[k].append((time.process_time() - c) / args.steps * 1e6)
    for k in variants:
        ts, cs = times[k], cpu[k]
        print(
            f"{k:9s} wall {statistics.median(ts):7.0f} us/update (min {min(ts):.0f})   "
            f"cpu {statistics.median(cs):7.0f} us/update (min {min(cs):.0f})"
        )
    for name, d in (("wall", times), ("cpu", cpu)):
        print(f"fused / separate ({name}): {statistics.median(d['fused']) / statistics.median(d['separate']):.3f}")
    matmul_precisions(b, hidden)


def matmul_precisions(batch: int, hidden: tuple[int, ...], calls: int = 500) -> None:
    """A hidden layer's matrix product in float32 and in bfloat16 (what bf16-mixed autocast runs):
    on CPUs with AVX512-BF16 the bfloat16 one is ~2x faster, which is what SAC/TD3 gain from it."""
    for d_in, d_out in zip(hidden[:-1], hidden[1:], strict=True):
        line = []
        for dtype in (torch.float32, torch.bfloat16):
            x, w = torch.randn(batch, d_in, dtype=dtype), torch.randn(d_in, d_out, dtype=dtype)
            us = per_call_us(lambda: x @ w, calls)  # noqa: B023 (called at once, before x and w change)
            line.append(
                f"{str(dtype).removeprefix('torch.')} {us:.0f} us ({2 * batch * d_in * d_out / us / 1e3:.0f} GFLOP/s)"
            )
        print(f"{batch}x{d_in} @ {d_in}x{d_out}: " + ", ".join(line))


if __name__ == "__main__":
    main()
