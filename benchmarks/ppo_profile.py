"""Where a PPO CartPole update's time goes (configs/ppo/cartpole.yaml, one torch thread).

    python benchmarks/ppo_profile.py

1. Through ``Trainer.fit`` (50k env steps, no evaluation): timers around ``collect_rollout`` and
   ``training_step``; the rest is Lightning's loop, logging and GAE.
2. The same update in a bare loop on random data, cumulatively: forward + loss, + backward,
   + gradient clipping, + fused Adam; then the whole update with the loss compiled (``compile: true``).
3. The activation: ``torch.tanh`` vs ``torch.sigmoid`` on one 256x64 hidden layer, and whether MKL,
   which computes torch's float32 ``tanh``, ``exp`` and ``log`` on the CPU, runs its fast code path
   here: it takes it on Intel CPUs only, and on others (AMD) ``tanh`` costs ~6x more (see
   docs/benchmarks.md, "MKL's vector math on AMD CPUs").
4. The eager floor: the same update with the networks as plain functions of their weights (no
   ``nn.Module`` calls, no framework), and the ceiling it puts on any eager PPO with this config:
   ``256 / (collect + 20 x floor)`` env steps/s, with ``collect`` measured in 1.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import torch

from rl_lightning import PPO, EnvConfig
from rl_lightning.algorithms.ppo import ppo_loss
from rl_lightning.networks import ActorCritic

CARTPOLE = dict(num_steps=32, learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, update_epochs=20, num_minibatches=1)


def per_call_us(f, n: int = 300) -> float:
    for _ in range(30):
        f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6


def in_fit(env_steps: int = 50_000) -> float:
    """Returns the collection time per rollout, in seconds."""
    acc = {"collect": 0.0, "train": 0.0, "n": 0}

    class Timed(PPO):
        def collect_rollout(self):
            t0 = time.perf_counter()
            out = super().collect_rollout()
            acc["collect"] += time.perf_counter() - t0
            return out

        def training_step(self, batch, batch_idx):
            t0 = time.perf_counter()
            out = super().training_step(batch, batch_idx)
            acc["train"] += time.perf_counter() - t0
            acc["n"] += 1
            return out

    L.seed_everything(0, verbose=False)
    model = Timed(
        env=EnvConfig("CartPole-v1", num_envs=8),
        total_env_steps=env_steps,
        env_steps_per_epoch=10**9,
        eval_episodes=1,
        **CARTPOLE,
    )
    trainer = L.Trainer(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=10,
    )
    t0 = time.perf_counter()
    trainer.fit(model)
    wall, n, updates = time.perf_counter() - t0, acc["n"], CARTPOLE["update_epochs"]
    print(f"fit: {model.env_steps / wall:,.0f} env steps/s; per rollout: collect {acc['collect'] / n * 1e3:.2f} ms, ")
    print(
        f"  training_step {acc['train'] / n * 1e3:.2f} ms ({acc['train'] / n / updates * 1e6:.0f} us per update), "
        f"rest {(wall - acc['collect'] - acc['train']) / n * 1e3:.2f} ms"
    )
    return acc["collect"] / n


def bare_update(batch: int = 256) -> None:
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    agent = ActorCritic(obs_space, gym.spaces.Discrete(2))
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5, fused=True)
    obs, actions = torch.randn(batch, 4), torch.randint(0, 2, (batch,))
    old_logp, adv, values, returns = (
        torch.randn(batch) * 0.1 - 0.7,
        torch.randn(batch),
        torch.randn(batch),
        torch.randn(batch),
    )

    def loss():
        logp, ent, v = agent.evaluate(obs, actions)
        return ppo_loss(logp, old_logp, adv, v, values, returns, ent, 0.2, False, 0.0, 0.5).loss

    def backward():
        opt.zero_grad()
        loss().backward()

    def clip():
        backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)

    def step():
        clip()
        opt.step()

    for name, f in (("forward + loss", loss), ("+ backward", backward), ("+ clip", clip), ("+ fused Adam", step)):
        print(f"bare update, {name}: {per_call_us(f):.0f} us")
    # compile: true compiles the forward and the objective as one graph (PPO.minibatch_loss), so
    # AOTAutograd compiles the backward as one graph too.
    loss = torch.compile(loss, dynamic=False)  # backward() and step() call it through the closure
    t0 = time.perf_counter()
    step()
    compile_s = time.perf_counter() - t0
    print(f"bare update, compiled loss: {per_call_us(step):.0f} us (first call, with compilation: {compile_s:.1f} s)")
    x = torch.randn(batch, 64)
    print(
        f"256x64: torch.tanh {per_call_us(lambda: torch.tanh(x), 2000):.1f} us, "
        f"torch.sigmoid {per_call_us(lambda: torch.sigmoid(x), 2000):.1f} us; "
        f"MKL's fast (Intel) code path: {mkl_intel_path()}"
    )


def mkl_intel_path() -> str:
    """Whether the MKL linked into torch passes its Intel check (``mkl_serv_intel_cpu_true``), looked
    up as MKL's own calls resolve it: the process's global symbols first (an ``LD_PRELOAD`` override
    wins), then libtorch_cpu."""
    for library in (None, str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")):
        try:
            return "yes" if ctypes.CDLL(library).mkl_serv_intel_cpu_true() else "no"
        except (OSError, AttributeError):
            continue
    return "unknown (no MKL symbols found)"


def eager_floor(collect_s: float, batch: int = 256) -> None:
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def weights(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.1).requires_grad_()

    actor = [weights(64, 4), weights(64), weights(64, 64), weights(64), weights(2, 64), weights(2)]
    critic = [weights(64, 4), weights(64), weights(64, 64), weights(64), weights(1, 64), weights(1)]
    params = actor + critic
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-5, fused=True)
    obs, actions = torch.randn(batch, 4), torch.randint(0, 2, (batch, 1))
    old_logp, adv, values, returns = torch.randn(batch) * 0.1 - 0.7, *torch.randn(3, batch)

    def net(w: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(F.linear(torch.tanh(F.linear(x, w[0], w[1])), w[2], w[3]))
        return F.linear(x, w[4], w[5])

    def step() -> None:
        opt.zero_grad()
        logp_all = net(actor, obs).log_softmax(-1)
        logp, ent = logp_all.gather(-1, actions).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)
        v = net(critic, obs).squeeze(-1)
        ppo_loss(logp, old_logp, adv, v, values, returns, ent, 0.2, False, 0.0, 0.5).loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    floor_s = per_call_us(step) * 1e-6
    updates, rollout = CARTPOLE["update_epochs"], CARTPOLE["num_steps"] * 8
    print(
        f"eager floor: functional update {floor_s * 1e6:.0f} us; ceiling with {collect_s * 1e3:.2f} ms of "
        f"collection per rollout: {rollout / (collect_s + updates * floor_s):,.0f} env steps/s"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    collect_s = in_fit()
    bare_update()
    eager_floor(collect_s)
