"""PPO in a plain torch loop (CleanRL-style), no Lightning: the reference that isolates Lightning's cost.

It uses the very same pieces as `rl_lightning.PPO` (gymnasium vector env, `RolloutCollector`, GAE,
`ActorCritic`, `ppo_loss`, Adam with eps 1e-5, linear lr annealing, global-norm clipping), so any
speed difference between the two is the price of the Lightning Trainer around them.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import yaml

from rl_lightning.algorithms.ppo import ppo_loss
from rl_lightning.data.rollout import RolloutCollector, gae_batch
from rl_lightning.envs import EnvConfig, episode_stats, make_vector_env
from rl_lightning.networks import ActorCritic


def evaluate(agent: ActorCritic, env_config: EnvConfig, seeds: list[int]) -> float:
    import numpy as np

    envs = make_vector_env(env_config, num_envs=len(seeds))
    obs, _ = envs.reset(seed=seeds)
    returns, pending = np.zeros(len(seeds)), np.ones(len(seeds), dtype=bool)
    with torch.no_grad():
        while pending.any():
            obs, _, _, _, infos = envs.step(agent(torch.as_tensor(obs)).numpy())
            if (stats := episode_stats(infos)) is not None:
                ended, r, _ = stats
                first = ended & pending
                returns[first] = r[first]
                pending &= ~first
    envs.close()
    return float(returns.mean())


def train(spec: Any, seed: int, eval_episodes: int, summarize) -> dict[str, Any]:
    from pathlib import Path

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / spec.config).read_text())["model"]["init_args"]
    hp = dict(
        gamma=0.99,
        gae_lambda=0.95,
        update_epochs=4,
        num_minibatches=4,
        clip_coef=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        learning_rate=2.5e-4,
        num_steps=128,
    )
    hp.update({k: v for k, v in cfg.items() if k != "env"})
    env_config = EnvConfig(**cfg["env"], seed=seed)
    torch.manual_seed(seed)
    envs = make_vector_env(env_config)
    agent = ActorCritic(envs.single_observation_space, envs.single_action_space)
    opt = torch.optim.Adam(agent.parameters(), lr=hp["learning_rate"], eps=1e-5)
    collector = RolloutCollector(envs, hp["num_steps"], torch.device("cpu"), seed)
    rollout_size = env_config.num_envs * hp["num_steps"]
    mb_size = rollout_size // hp["num_minibatches"]
    eval_seeds = [seed + 1_000_000 + i for i in range(eval_episodes)]

    t0, eval_time, curve, env_steps, next_eval = time.perf_counter(), 0.0, [], 0, spec.eval_every
    while env_steps < spec.total_env_steps:
        batch = gae_batch(collector.rollout(agent), hp["gamma"], hp["gae_lambda"])
        env_steps += rollout_size
        for group in opt.param_groups:
            group["lr"] = hp["learning_rate"] * max(1.0 - env_steps / spec.total_env_steps, 0.0)
        for _ in range(hp["update_epochs"]):
            for mb in torch.randperm(rollout_size).split(mb_size):
                adv = batch.advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                logp, ent, v = agent.evaluate(batch.obs[mb], batch.actions[mb])
                out = ppo_loss(
                    logp,
                    batch.logprobs[mb],
                    adv,
                    v,
                    batch.values[mb],
                    batch.returns[mb],
                    ent,
                    hp["clip_coef"],
                    False,
                    hp["ent_coef"],
                    hp["vf_coef"],
                )
                opt.zero_grad()
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), hp["max_grad_norm"])
                opt.step()
        collector.episodes.pop()
        if env_steps >= next_eval or env_steps >= spec.total_env_steps:
            next_eval += spec.eval_every
            v0 = time.perf_counter()
            curve.append((v0 - t0 - eval_time, env_steps, evaluate(agent, env_config, eval_seeds)))
            eval_time += time.perf_counter() - v0
    envs.close()
    return summarize(curve, spec, env_steps, time.perf_counter() - t0 - eval_time)
