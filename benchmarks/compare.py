"""Side by side: rl_lightning vs Stable-Baselines3 (and a plain-torch PPO, ``run_plain``), same hyperparameters,
same budget, same thread count, same evaluation protocol, interleaved in one invocation.

    python benchmarks/compare.py                        # PPO CartPole, seeds 0 1 2
    python benchmarks/compare.py --algos ppo,a2c,dqn,sac,td3 --seeds 0 --threads 1
    python benchmarks/compare.py --algos qrdqn --seeds 0 1 2   # QR-DQN CartPole vs sb3-contrib's QRDQN
    python benchmarks/compare.py --algos sac,td3 --seeds 0 1 2 --bf16   # + ours in bf16-mixed
    python benchmarks/compare.py --algos sac,tqc,crossq --seeds 0 --env-steps 4000   # throughput only
    python benchmarks/compare.py --algos tqc,crossq --seeds 0 1 2   # vs sb3-contrib
    python benchmarks/compare.py --algos crossq_mountaincar --seeds 1 2 --kinds sb3   # sb3-contrib's seeds only
    python benchmarks/compare.py --algos crossq_lunarlander_256 --seeds 0 --kinds ours   # ~1.5 h (sb3: ~2.5 h)
    python benchmarks/compare.py --algos sac_halfcheetah --seeds 0   # MuJoCo, ~40 min
    python benchmarks/compare.py --algos sac_halfcheetah,td3_halfcheetah --seeds 0 --env-steps 20000   # throughput
    python benchmarks/compare.py --algos ppo_hopper --seeds 0        # MuJoCo at 1M steps, ~20 min
    python benchmarks/compare.py --algos recurrent_ppo --seeds 0 --env-steps 10240   # LSTM, sb3-contrib: throughput
    python benchmarks/compare.py --algos ppo_halfcheetah,ppo_walker2d --seeds 0   # the zoo's PPO, ~2.5 h

Each run is a fresh subprocess (no shared caches or thread pools), so imports are not timed.
Reported per run: training env-steps/s (evaluation time excluded), wall time to the first evaluation
at or above the solve threshold (evaluation excluded), final evaluation return (20 deterministic
episodes). Needs the `bench` extra (stable-baselines3).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from common import EVAL_EPISODES, ROOT, child_env, child_result, fit_config


@dataclass
class Spec:
    """One comparison: our config, the same hyperparameters in SB3's vocabulary, the budget."""

    config: str
    env_id: str
    total_env_steps: int
    eval_every: int
    threshold: float
    sb3_algo: str
    sb3_kwargs: dict[str, Any]
    n_envs: int
    sb3_module: str = "stable_baselines3"  # sb3_contrib for RecurrentPPO, QRDQN, TQC, CrossQ
    sb3_policy: str = "MlpPolicy"
    wrapper: str | None = None  # a gymnasium wrapper's import path, around each sub-env of both libraries
    overrides: dict[str, Any] = field(default_factory=dict)  # our config's model arguments changed for this spec


SPECS: dict[str, Spec] = {
    "recurrent_ppo": Spec(  # the zoo's ppo_lstm CartPoleNoVel-v1
        config="configs/recurrent_ppo/cartpole_novel.yaml",
        env_id="CartPole-v1",
        total_env_steps=100_000,
        eval_every=10_000,
        threshold=475,
        sb3_algo="RecurrentPPO",
        sb3_kwargs=dict(
            normalize=True,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            vf_coef=0.5,  # SB3 weighs the whole squared error, ours half of it (ours: 1.0)
            learning_rate="lin_1e-3",
            clip_range="lin_0.2",
            policy_kwargs=dict(
                ortho_init=False,
                activation_fn="relu",
                lstm_hidden_size=64,
                enable_critic_lstm=True,
                net_arch=dict(pi=[64], vf=[64]),
            ),
        ),
        n_envs=8,
        sb3_module="sb3_contrib",
        sb3_policy="MlpLstmPolicy",
        wrapper="rl_lightning.envs.wrappers.MaskVelocity",
    ),
    "ppo": Spec(
        config="configs/ppo/cartpole.yaml",
        env_id="CartPole-v1",
        total_env_steps=100_000,
        eval_every=10_000,
        threshold=475,
        sb3_algo="PPO",
        sb3_kwargs=dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            vf_coef=0.25,  # SB3 weighs the whole squared error, our PPO half of it (ours: 0.5)
            learning_rate="lin_1e-3",
            clip_range=0.2,
        ),
        n_envs=8,
    ),
    "a2c": Spec(
        config="configs/a2c/cartpole.yaml",
        env_id="CartPole-v1",
        total_env_steps=100_000,
        eval_every=10_000,
        threshold=475,
        sb3_algo="A2C",
        sb3_kwargs=dict(
            n_steps=5,
            learning_rate=7e-4,
            gamma=0.99,
            gae_lambda=1.0,
            ent_coef=0.0,
            vf_coef=0.5,
            max_grad_norm=0.5,
            normalize_advantage=False,
        ),
        n_envs=8,
    ),
    "dqn": Spec(
        config="configs/dqn/cartpole.yaml",
        env_id="CartPole-v1",
        total_env_steps=100_000,
        eval_every=10_000,
        threshold=475,
        sb3_algo="DQN",
        sb3_kwargs=dict(
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.08,
            exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[256, 256]),
        ),
        n_envs=1,
    ),
    "sac": Spec(
        config="configs/sac/pendulum.yaml",
        env_id="Pendulum-v1",
        total_env_steps=20_000,
        eval_every=2_000,
        threshold=-200,
        sb3_algo="SAC",
        sb3_kwargs=dict(learning_rate=1e-3),
        n_envs=1,
    ),
    # MuJoCo (needs the mujoco extra): return after 100k env steps with the zoo's hyperparameters
    # (learning_starts 10k, SB3's defaults otherwise, which are also ours). ~20 min per library here.
    "sac_halfcheetah": Spec(
        config="configs/sac/halfcheetah.yaml",
        env_id="HalfCheetah-v5",
        total_env_steps=100_000,
        eval_every=10_000,
        threshold=3000,
        sb3_algo="SAC",
        sb3_kwargs=dict(learning_starts=10_000),
        n_envs=1,
    ),
    # PPO on MuJoCo at 1M env steps (mujoco extra; ~10 min per library here): the config's hyperparameters
    # (CleanRL's PPO defaults), VecNormalize with the algorithm's gamma for SB3.
    "ppo_hopper": Spec(
        config="configs/ppo/hopper.yaml",
        env_id="Hopper-v5",
        total_env_steps=1_000_000,
        eval_every=50_000,
        threshold=2410,
        sb3_algo="PPO",
        sb3_kwargs=dict(
            normalize=True,
            n_steps=2048,
            batch_size=64,
            n_epochs=10,
            learning_rate=lambda remaining: 3e-4 * remaining,  # annealed to 0, as anneal_lr
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.2,
            clip_range_vf=0.2,
            ent_coef=0.0,
            vf_coef=0.25,  # ours 0.5 on half the squared error
            max_grad_norm=0.5,
            policy_kwargs=dict(log_std_init=0.0, ortho_init=True, activation_fn="tanh", net_arch=[64, 64]),
        ),
        n_envs=1,
    ),
    # The zoo's own PPO settings (ppo.yml, HalfCheetah-v3 and Walker2d-v3; v5 envs here), as SB3 reads
    # them, so SB3 on this machine tells whether a shortfall against the zoo's single published run is
    # ours. ~40 min per library here.
    "ppo_halfcheetah": Spec(
        config="configs/ppo/halfcheetah.yaml",
        env_id="HalfCheetah-v5",
        total_env_steps=1_000_000,
        eval_every=50_000,
        threshold=5819,
        sb3_algo="PPO",
        sb3_kwargs=dict(
            normalize=True,
            n_steps=512,
            batch_size=64,
            n_epochs=20,
            learning_rate=2.0633e-05,
            gamma=0.98,
            gae_lambda=0.92,
            clip_range=0.1,
            ent_coef=0.000401762,
            vf_coef=0.58096,
            max_grad_norm=0.8,
            policy_kwargs=dict(
                log_std_init=-2.0, ortho_init=False, activation_fn="relu", net_arch=dict(pi=[256, 256], vf=[256, 256])
            ),
        ),
        n_envs=1,
    ),
    "ppo_walker2d": Spec(
        config="configs/ppo/walker2d.yaml",
        env_id="Walker2d-v5",
        total_env_steps=1_000_000,
        eval_every=50_000,
        threshold=3479,
        sb3_algo="PPO",
        sb3_kwargs=dict(
            normalize=True,
            n_steps=512,
            batch_size=32,
            n_epochs=20,
            learning_rate=5.05041e-05,
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.1,
            ent_coef=0.000585045,
            vf_coef=0.871923,
            max_grad_norm=1.0,
        ),
        n_envs=1,
    ),
    "td3": Spec(
        config="configs/td3/pendulum.yaml",
        env_id="Pendulum-v1",
        total_env_steps=20_000,
        eval_every=2_000,
        threshold=-200,
        sb3_algo="TD3",
        sb3_kwargs=dict(
            buffer_size=200_000,
            learning_rate=1e-3,
            gamma=0.98,
            learning_starts=10_000,
            train_freq=200,
            gradient_steps=200,
            action_noise_std=0.1,
            policy_kwargs=dict(net_arch=[400, 300]),
        ),
        n_envs=1,
    ),
}
# TD3 on HalfCheetah with the zoo's td3.yml MuJoCo settings (learning_starts 10k, noise 0.1; SB3's defaults
# otherwise, which are also ours: lr 1e-3, batch 256, [400, 300]), beside SAC's.
SPECS["td3_halfcheetah"] = replace(
    SPECS["sac_halfcheetah"],
    config="configs/td3/halfcheetah.yaml",
    sb3_algo="TD3",
    sb3_kwargs=dict(learning_starts=10_000, action_noise_std=0.1),
)
# The zoo's QR-DQN CartPole (qrdqn.yml) against sb3-contrib's QRDQN: DQN's zoo settings but for the budget,
# the exploration fraction and the quantiles.
SPECS["qrdqn"] = replace(
    SPECS["dqn"],
    config="configs/qrdqn/cartpole.yaml",
    total_env_steps=50_000,
    eval_every=5_000,
    sb3_algo="QRDQN",
    sb3_module="sb3_contrib",
    sb3_kwargs={
        **SPECS["dqn"].sb3_kwargs,
        "exploration_fraction": 0.16,
        "policy_kwargs": dict(net_arch=[256, 256], n_quantiles=10),
    },
)

# TQC and CrossQ against sb3-contrib's: SAC's Pendulum spec with the RL Zoo's settings (tqc.yml, crossq.yml).
SPECS["tqc"] = replace(SPECS["sac"], config="configs/tqc/pendulum.yaml", sb3_algo="TQC", sb3_module="sb3_contrib")
SPECS["crossq"] = replace(
    SPECS["sac"],
    config="configs/crossq/pendulum.yaml",
    sb3_algo="CrossQ",
    sb3_module="sb3_contrib",
    sb3_kwargs=dict(policy_delay=2, policy_kwargs=dict(net_arch=[256, 256])),
)
# The zoo's MountainCarContinuous-v0 entries for CrossQ and TQC (gSDE, 50k env steps): a task where exploration decides,
# so only many seeds of both libraries tell a defect from luck.
SPECS["crossq_mountaincar"] = replace(
    SPECS["crossq"],
    config="configs/crossq/mountaincarcontinuous.yaml",
    env_id="MountainCarContinuous-v0",
    total_env_steps=50_000,
    eval_every=5_000,
    threshold=90,
    sb3_kwargs=dict(
        learning_rate=7e-4,
        buffer_size=50_000,
        train_freq=32,
        gradient_steps=32,
        gamma=0.9999,
        learning_starts=100,
        use_sde=True,
        policy_delay=2,
        policy_kwargs=dict(use_expln=True, log_std_init=-1, net_arch=[64, 64]),
    ),
)
SPECS["tqc_mountaincar"] = replace(
    SPECS["crossq_mountaincar"],
    config="configs/tqc/mountaincarcontinuous.yaml",
    sb3_algo="TQC",
    sb3_kwargs=dict(
        learning_rate=3e-4,
        buffer_size=50_000,
        batch_size=512,
        ent_coef=0.1,
        train_freq=32,
        gradient_steps=32,
        gamma=0.9999,
        tau=0.01,
        learning_starts=0,
        use_sde=True,
        policy_kwargs=dict(use_expln=True, log_std_init=-3.67, net_arch=[64, 64]),
    ),
)
# The zoo's LunarLanderContinuous-v3 entry for CrossQ (200k env steps, sb3-contrib's defaults otherwise) with critics
# 256 wide instead of 1,024: the widest whose 200k updates fit about an hour and a half of one core here (1,024: 16x
# the products of the hidden layer). The full width is configs/crossq/lunarlandercontinuous.yaml as it stands.
SPECS["crossq_lunarlander_256"] = replace(
    SPECS["crossq"],
    config="configs/crossq/lunarlandercontinuous.yaml",
    env_id="LunarLanderContinuous-v3",
    total_env_steps=200_000,
    eval_every=20_000,
    threshold=200,
    sb3_kwargs=dict(
        buffer_size=1_000_000, learning_starts=10_000, policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[256, 256]))
    ),
    overrides=dict(critic_hidden_sizes=[256, 256]),
)


# ------------------------------------------------------------------------------------------ runners
def run_ours(spec: Spec, seed: int, precision: str = "32-true") -> dict[str, Any]:
    env_steps, curve, train_time = fit_config(
        spec.config,
        seed,
        precision,
        total_env_steps=spec.total_env_steps,
        env_steps_per_epoch=spec.eval_every,
        **spec.overrides,
    )
    return summarize(curve, spec, env_steps, train_time)


def run_ours_bf16(spec: Spec, seed: int) -> dict[str, Any]:
    """Ours with ``trainer.precision: bf16-mixed``: the same hyperparameters, matmuls in bfloat16
    (2x float32 on CPUs with AVX512-BF16; float32 output layers)."""
    return run_ours(spec, seed, "bf16-mixed")


def run_sb3(spec: Spec, seed: int) -> dict[str, Any]:
    import importlib

    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.utils import get_linear_fn
    from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization

    kwargs = dict(spec.sb3_kwargs)
    for key, value in kwargs.items():
        if isinstance(value, str) and value.startswith("lin_"):
            start = float(value[4:])
            kwargs[key] = get_linear_fn(start, 0.0, 1.0)
    wrapper = None
    if spec.wrapper is not None:
        module, _, name = spec.wrapper.rpartition(".")
        wrapper = getattr(importlib.import_module(module), name)
    env = make_vec_env(spec.env_id, n_envs=spec.n_envs, seed=seed, wrapper_class=wrapper)
    if "action_noise_std" in kwargs:  # independent noise per action dimension, as ours
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        std, (dims,) = kwargs.pop("action_noise_std"), env.action_space.shape
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dims), std * np.ones(dims))
    eval_env = make_vec_env(spec.env_id, n_envs=1, seed=seed + 1_000_000, wrapper_class=wrapper)
    if kwargs.pop("normalize", False):  # the zoo's VecNormalize; evaluation with the training statistics, frozen
        env = VecNormalize(env, gamma=kwargs.get("gamma", 0.99))
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    policy_kwargs = kwargs.get("policy_kwargs", {})
    if isinstance(policy_kwargs.get("activation_fn"), str):  # "relu", "tanh": torch's module of that name
        import torch

        modules = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}
        policy_kwargs["activation_fn"] = modules[policy_kwargs["activation_fn"]]
    algorithm = getattr(importlib.import_module(spec.sb3_module), spec.sb3_algo)
    model = algorithm(spec.sb3_policy, env, seed=seed, device="cpu", verbose=0, **kwargs)

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.eval_time, self.curve = spec.eval_every, 0.0, []

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += spec.eval_every
                self.evaluate()
            return True

        def evaluate(self) -> None:
            v0 = time.perf_counter()
            if isinstance(eval_env, VecNormalize):
                sync_envs_normalization(self.training_env, eval_env)
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
            self.curve.append((v0 - self.t0 - self.eval_time, self.num_timesteps, float(mean)))
            self.eval_time += time.perf_counter() - v0

    clock = Clock()
    model.learn(spec.total_env_steps, callback=clock)
    if not clock.curve or clock.curve[-1][1] != model.num_timesteps:
        clock.evaluate()
    train_time = time.perf_counter() - clock.t0 - clock.eval_time
    return summarize(clock.curve, spec, model.num_timesteps, train_time)


def summarize(curve: list[tuple[float, int, float]], spec: Spec, env_steps: int, train_time: float) -> dict[str, Any]:
    solved = next(((t, s) for t, s, r in curve if r >= spec.threshold), (None, None))
    # DQN's greedy CartPole policy swings between 500 and ~100 after solving, in SB3 as in ours:
    # the mean over the second half of the run compares them better than the last evaluation.
    late = [r for _, s, r in curve if s > env_steps / 2]
    return {
        "env_steps": env_steps,
        "train_s": round(train_time, 2),
        "env_steps_per_s": round(env_steps / train_time),
        "solve_s": None if solved[0] is None else round(solved[0], 2),
        "solve_steps": solved[1],
        "final_return": round(curve[-1][2], 1) if curve else None,
        "late_mean_return": round(sum(late) / len(late), 1) if late else None,
        "curve": curve,
    }


# ---------------------------------------------------------------------------------- plain-torch PPO
def run_plain(spec: Spec, seed: int) -> dict[str, Any]:
    """PPO in a plain torch loop (CleanRL-style), no Lightning: the reference that isolates Lightning's
    cost. It uses the very same pieces as ``rl_lightning.PPO`` (gymnasium vector env, ``RolloutCollector``,
    GAE, ``ActorCritic``, ``ppo_loss``, Adam with eps 1e-5, linear lr annealing, global-norm clipping),
    so any speed difference between the two is the price of the Lightning Trainer around them."""
    import torch
    import yaml

    from rl_lightning.algorithms.ppo import ppo_loss
    from rl_lightning.data.rollout import RolloutCollector, gae_batch
    from rl_lightning.envs import EnvConfig, make_vector_env
    from rl_lightning.networks import ActorCritic

    cfg = yaml.safe_load((ROOT / spec.config).read_text())["model"]["init_args"]
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
    eval_seeds = [seed + 1_000_000 + i for i in range(EVAL_EPISODES)]

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
            curve.append((v0 - t0 - eval_time, env_steps, plain_evaluate(agent, env_config, eval_seeds)))
            eval_time += time.perf_counter() - v0
    envs.close()
    return summarize(curve, spec, env_steps, time.perf_counter() - t0 - eval_time)


def plain_evaluate(agent: Any, env_config: Any, seeds: list[int]) -> float:
    """The mean return of ``agent``'s deterministic actions, one episode per seed."""
    import numpy as np
    import torch

    from rl_lightning.envs import episode_stats, make_vector_env

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


RUNNERS = {"ours": run_ours, "ours_bf16": run_ours_bf16, "sb3": run_sb3, "plain": run_plain}


def raw_env_throughput(env_id: str, n_envs: int, steps: int = 20_000) -> float:
    """Random actions through the same gymnasium vector env our PPO uses: the ceiling."""
    import gymnasium as gym

    envs = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="sync")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(256)]
    t0 = time.perf_counter()
    for i in range(steps // n_envs):
        envs.step(actions[i % 256])
    return steps / (time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------- main
def child(kind: str, algo: str, seed: int, threads: int, env_steps: int) -> None:
    import torch

    torch.set_num_threads(threads)
    print(json.dumps(RUNNERS[kind](budget(SPECS[algo], env_steps), seed)))


def budget(spec: Spec, env_steps: int) -> Spec:
    """``spec`` with ``env_steps`` of budget (0: its own) and two evaluations: for throughput checks."""
    return replace(spec, total_env_steps=env_steps, eval_every=env_steps // 2) if env_steps else spec


def launch(kind: str, algo: str, seed: int, threads: int, env_steps: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, algo, str(seed), str(threads), str(env_steps)]
    env = child_env(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return child_result(cmd, env, f"{kind} {algo} seed {seed}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default="ppo", help=f"comma-separated, from {sorted(SPECS)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (same for every library)")
    p.add_argument("--bf16", action="store_true", help="also run ours with trainer.precision bf16-mixed")
    p.add_argument("--json", type=Path, help="also write all results here")
    p.add_argument(
        "--env-steps",
        type=int,
        default=0,
        help="budget of every run instead of the spec's (throughput checks: returns are not comparable then; "
        "TD3's spec has 10k random warm-up steps)",
    )
    p.add_argument(
        "--kinds",
        default="",
        help=f"comma-separated, from {sorted(RUNNERS)} (default: ours, sb3, and plain for ppo): to add a "
        "library's seeds to runs already made",
    )
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if unknown := set(filter(None, args.kinds.split(","))) - set(RUNNERS):
        p.error(f"--kinds: no runner {sorted(unknown)}; choose from {sorted(RUNNERS)}")
    if args.child:
        kind, algo, seed, threads, env_steps = args.child
        child(kind, algo, int(seed), int(threads), int(env_steps))
        return

    results: list[dict[str, Any]] = []
    for algo in args.algos.split(","):
        spec = SPECS[algo]
        kinds = ["ours"] + (["ours_bf16"] if args.bf16 else []) + ["sb3"] + (["plain"] if algo == "ppo" else [])
        if args.kinds:
            kinds = args.kinds.split(",")
        for seed in args.seeds:
            for kind in kinds:  # interleaved: machine drift hits every library alike
                r = launch(kind, algo, seed, args.threads, args.env_steps)
                r.update(algo=algo, kind=kind, seed=seed)
                results.append(r)
                print(
                    f"{algo:5s} {kind:9s} seed {seed}: {r['env_steps_per_s']:>7} env-steps/s, "
                    f"solve {r['solve_s']} s, final {r['final_return']}, 2nd-half mean {r['late_mean_return']}",
                    flush=True,
                )
        raw = raw_env_throughput(spec.env_id, spec.n_envs)
        print(f"{algo:5s} raw {spec.env_id} x{spec.n_envs} random actions: {raw:,.0f} env-steps/s")
        results.append({"algo": algo, "kind": "raw_env", "env_steps_per_s": round(raw)})

    print(
        "\n| algo | library | env-steps/s (mean) | time to solve, s (per seed) | final return (per seed) "
        "| mean return, 2nd half of the run (per seed) |"
    )
    print("|---|---|---|---|---|---|")
    for algo in args.algos.split(","):
        rows_of = {k: [r for r in results if r["algo"] == algo and r["kind"] == k] for k in RUNNERS}
        sps_of = {k: sum(r["env_steps_per_s"] for r in rows) / len(rows) for k, rows in rows_of.items() if rows}
        for kind, rows in rows_of.items():
            if not rows:
                continue
            sps = sps_of[kind]
            ratios = [f"{k.replace('_', ' ')} x{sps_of[k] / sps:.2f}" for k in ("ours", "ours_bf16") if k in sps_of]
            ratio = f" ({', '.join(ratios)})" if kind in ("sb3", "plain") and ratios else ""
            solves, finals, late = (
                ", ".join(str(r[key]) for r in rows) for key in ("solve_s", "final_return", "late_mean_return")
            )
            print(f"| {algo} | {kind.replace('_', ' ')} | {sps:,.0f}{ratio} | {solves} | {finals} | {late} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
