"""Evaluation: deterministic episodes of a policy on fixed seeds, in an env without training-only
wrappers. ``RLModule``'s validation and test steps, ``RLModule.play_episodes`` and the
``RecordEpisodes`` video callback all play through here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from rl_lightning.envs.make import EnvConfig, episode_stats, eval_env_config, make_vector_env
from rl_lightning.envs.spaces import to_env_actions_tensor
from rl_lightning.errors import naming_env_faults
from rl_lightning.networks.population import interquartile_mean

# Evaluation episodes use their own seeds, far from any training env's.
EVAL_SEED_OFFSET = 1_000_000
# An env with no time limit can play an episode a policy never ends (MinAtar Seaquest's sub idling at the
# surface): evaluation would never return. Such envs' evaluation episodes are cut at this many steps.
EVAL_STEP_LIMIT = 100_000


def eval_seed_base(env_config: EnvConfig) -> int:
    """The seed of evaluation episode 0 (episode ``i`` plays ``base + i``): fixed per run, so
    evaluations are comparable."""
    return (env_config.seed or 0) + EVAL_SEED_OFFSET


def eval_seeds(env_config: EnvConfig, episodes: int, rank: int = 0, world_size: int = 1) -> list[int]:
    """The seeds of the evaluation episodes one rank plays: dealt round-robin over ranks."""
    return [eval_seed_base(env_config) + i for i in range(rank, episodes, world_size)]


def make_eval_env(env_config: EnvConfig, num_envs: int, render_mode: str | None = None) -> gym.vector.VectorEnv:
    """The training env's backend without training-only wrappers (Atari: true game scores); gymnasium's
    env when training on the torch backend, or to render (envpool does not)."""
    config = eval_env_config(env_config, render_mode)
    return make_vector_env(config, num_envs=num_envs, render_mode=render_mode, training=False)


@torch.no_grad()
def play_episodes(
    act: Callable[[Tensor], Tensor], env_config: EnvConfig, seeds: list[int], device: torch.device | str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """Play one episode per seed, all at once in a vector env, with ``act(obs) -> env actions``
    (observations as the env gives them, as a tensor on ``device``). Returns each episode's return and
    length. In an env with no time limit (``max_episode_steps``) episodes end at ``EVAL_STEP_LIMIT`` steps,
    with a warning."""
    envs = make_eval_env(env_config, len(seeds))
    step_limit = EVAL_STEP_LIMIT if getattr(envs, "time_limit", None) is None else None
    try:
        obs, _ = envs.reset(seed=seeds)
        returns, lengths = np.zeros(len(seeds)), np.zeros(len(seeds), dtype=np.int64)
        running_return, running_length = np.zeros(len(seeds)), np.zeros(len(seeds), dtype=np.int64)
        pending = np.ones(len(seeds), dtype=bool)
        while pending.any():
            obs, rewards, terminated, truncated, infos = envs.step(
                act(torch.as_tensor(obs, device=device)).cpu().numpy()
            )
            running_return += rewards
            running_length += 1
            ended = (terminated | truncated) & pending
            # The env's own statistics (innermost: true scores whatever the wrappers do); the rewards seen
            # here only where a user's wrapper ended the episode outside them (a TimeLimit in env.wrappers).
            returns[ended], lengths[ended] = running_return[ended], running_length[ended]
            if (final := episode_stats(infos)) is not None:
                recorded, r, ln = final
                use = ended & recorded
                returns[use], lengths[use] = r[use], ln[use]
            pending &= ~ended
            if step_limit is not None and (cut := pending & (running_length >= step_limit)).any():
                returns[cut], lengths[cut] = running_return[cut], running_length[cut]
                pending &= ~cut
                rank_zero_warn(
                    f"Evaluation cut {cut.sum()} episode(s) of {env_config.env_id} at {step_limit:,} steps: the env "
                    "has no time limit and the policy did not end them. Give it one: env.env_kwargs.max_episode_steps "
                    "(gymnasium.make's), or gymnasium.wrappers.TimeLimit in env.wrappers."
                )
            running_return[terminated | truncated] = 0.0
            running_length[terminated | truncated] = 0
        return returns, lengths
    finally:
        envs.close()


def log_evaluation(module: Any, seeds: list[int], prefix: str) -> None:
    """``RLModule``'s validation and test step: one deterministic episode per seed of this rank, their
    returns and lengths into the module's torchmetrics (reduced across ranks at the epoch's end), logged
    as ``<prefix>/episode_return`` and ``<prefix>/episode_length`` against env steps."""
    if seeds:
        with naming_env_faults("Evaluation", module.env_config.env_id, module.env_steps):
            returns, lengths = module.play_episodes(seeds)
        module.eval_return.update(torch.as_tensor(returns, dtype=torch.float32, device=module.device))
        module.eval_length.update(torch.as_tensor(lengths, dtype=torch.float32, device=module.device))
        if module.population > 1:  # member-major: each member's episodes on its own run's seeds
            member_returns = torch.as_tensor(returns, dtype=torch.float32, device=module.device).unflatten(
                0, (-1, len(seeds))
            )
            if module.splits_members:  # every episode on this rank: each member's mean, every rank's members
                module.member_eval_means = module.gather_members(member_returns.mean(1))
            else:
                for metric, member_return in zip(module.member_eval_returns, member_returns, strict=True):
                    metric.update(member_return)
    module.log(f"{prefix}/episode_return", module.eval_return, prog_bar=True, batch_size=max(len(seeds), 1))
    module.log(f"{prefix}/episode_length", module.eval_length, batch_size=max(len(seeds), 1))
    if module.splits_members:  # the same values on every rank (gathered)
        for k, value in enumerate(module.member_eval_means.unbind()):
            module.log(f"member_{k}/{prefix}/episode_return", value, batch_size=1, sync_dist=True)
    elif module.population > 1:
        for k, metric in enumerate(module.member_eval_returns):
            module.log(f"member_{k}/{prefix}/episode_return", metric, batch_size=max(len(seeds), 1))
    if prefix == "val" and not module.trainer.sanity_checking:
        # Same value on every rank; sync_dist only silences Lightning's epoch-level DDP warning.
        module.log("step", float(module.env_steps), batch_size=1, sync_dist=True)
        if module.trainer.state.fn == "fit":  # marks the run as a fit, also one too short to log training
            module.log("time/env_steps", float(module.env_steps), batch_size=1, sync_dist=True)


def log_member_aggregate(module: Any, prefix: str) -> None:
    """At the end of a population's evaluation: the interquartile mean over members of their mean returns
    (``<prefix>/episode_return_iqm``; ``<prefix>/episode_return`` is the mean over all members' episodes)."""
    if module.splits_members:
        means = module.member_eval_means
    else:
        means = torch.stack([metric.compute() for metric in module.member_eval_returns])
    # The same value on every rank (from synced or gathered means); sync_dist only silences Lightning's warning.
    module.log(f"{prefix}/episode_return_iqm", interquartile_mean(means), batch_size=1, sync_dist=True)


def env_actions(module: Any, obs: Tensor) -> Tensor:
    """The actions evaluation, videos and exported policies play: the module's deterministic actions,
    clipped to the bounds of a Box action space (PPO's Gaussian mean is unbounded), or discrete ones as
    the env takes them (``Discrete.start``, ``MultiBinary`` bits as integers)."""
    return as_env_actions(module, module(obs, deterministic=True))


def as_env_actions(module: Any, actions: Tensor) -> Tensor:
    """The module's actions as the env takes them (``env_actions`` after the forward)."""
    if hasattr(module, "action_low"):
        return torch.clamp(actions, module.action_low, module.action_high)
    return to_env_actions_tensor(module.action_space, actions)
