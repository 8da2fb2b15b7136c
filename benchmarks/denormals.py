"""What flushing denormals to zero (``RLModule.on_fit_start``) buys, one torch thread.

    python benchmarks/denormals.py

1. One ``tanh`` on 256x64 floats, normal inputs vs half of them denormal (below 1.2e-38).
2. DQN on CartPole (configs/dqn/cartpole.yaml, 30k env steps) with the flush disabled: then the
   Adam step on the state the run left behind, without and with the flush.
3. Fits with and without the flush: DQN CartPole 30k, TD3 Pendulum 16k, PPO CartPole 50k env steps
   (no evaluation), in env-steps/s.
"""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import torch
import yaml
from ppo_profile import per_call_us

import rl_lightning

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def fit(algo: str, env: str, env_steps: int, flush: bool) -> tuple[float, L.LightningModule]:
    init = yaml.safe_load((CONFIGS / algo / f"{env}.yaml").read_text())["model"]["init_args"]
    cls = getattr(rl_lightning, algo.upper())
    init.update(total_env_steps=env_steps, env_steps_per_epoch=10**9, eval_episodes=1)
    env_config = rl_lightning.EnvConfig(**init.pop("env"))
    L.seed_everything(0, verbose=False)
    model = cls(env=env_config, **init)
    original = torch.set_flush_denormal
    if not flush:  # what on_fit_start calls becomes a no-op
        torch.set_flush_denormal = lambda mode: True
    try:
        trainer = L.Trainer(
            max_epochs=-1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        t0 = time.perf_counter()
        trainer.fit(model)
        return env_steps / (time.perf_counter() - t0), model
    finally:
        torch.set_flush_denormal = original


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randn(256, 64)
    half_denormal = torch.where(torch.rand(256, 64) < 0.5, x, torch.full_like(x, 1e-39))
    print(
        f"tanh 256x64: normal inputs {per_call_us(lambda: torch.tanh(x), 2000):.1f} us, "
        f"half denormal {per_call_us(lambda: torch.tanh(half_denormal), 500):.1f} us"
    )

    _, dqn = fit("dqn", "cartpole", 30_000, flush=False)
    opt = dqn.optimizers().optimizer
    for p in dqn.q_net.parameters():  # a dead unit's gradient: its moments keep decaying
        p.grad = torch.zeros_like(p)
    no_flush = per_call_us(opt.step, 200)
    torch.set_flush_denormal(True)
    flushed = per_call_us(opt.step, 200)
    torch.set_flush_denormal(False)
    print(f"DQN's Adam step after 30k env steps without the flush: {no_flush:.0f} us; with it: {flushed:.0f} us")

    for algo, env, steps in (("dqn", "cartpole", 30_000), ("td3", "pendulum", 16_000), ("ppo", "cartpole", 50_000)):
        off, _ = fit(algo, env, steps, flush=False)
        on, _ = fit(algo, env, steps, flush=True)
        print(f"{algo} {env} {steps} env steps: {off:,.0f} env-steps/s without the flush, {on:,.0f} with it")


if __name__ == "__main__":
    main()
