"""On-policy rollouts: collection into a preallocated buffer, GAE, Monte-Carlo returns-to-go.

Shared by PPO, A2C and REINFORCE through ``Rollouts``, their rollout side. One rollout is
``num_steps`` vector steps of ``num_envs`` sub-envs. Done semantics are explicit: ``terminated``
means the true episode end (no bootstrap); ``truncated`` (time limit) bootstraps from the value of
the final observation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.cuda_graphs import GraphedUpdate, UpdateGraphs
from rl_lightning.data.experience import CollectorSide
from rl_lightning.envs.make import EpisodeLog, episode_stats, steps_on_device
from rl_lightning.envs.normalize import RunningMeanStd
from rl_lightning.envs.spaces import action_dtype, action_shape, to_env_actions
from rl_lightning.networks.population import Population


class Rollout(NamedTuple):
    """One rollout as collected, every field ``[num_steps, num_envs, ...]``.

    ``next_values[t]`` is V of transition ``t``'s true next state: ``values[t + 1]`` inside the
    rollout, V(final observation) where the episode was truncated, V(current observation) after the
    last step; it is meaningless (and unused) where ``terminated``. Observations are normalized and
    rewards scaled when the collector normalizes.
    """

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    next_values: Tensor


class RolloutBatch(NamedTuple):
    """One rollout, flattened over ``num_steps * num_envs``; yielded whole to ``training_step``."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor


class Policy(Protocol):
    """What a collector steps: ``act`` once per vector step (``(actions, log_probs, values)``), ``value``
    for V(final observation) of truncated sub-envs and V(current observation) after the last step.

    A policy with memory (``RecurrentPPO``'s) also has ``after_step(terminated, truncated)``, which
    ``RolloutCollector`` calls after every vector step, before it asks for the values of the truncated
    sub-envs' final observations: so it can value those from their memories and reset each ended
    sub-env's memory before its next episode. With a gymnasium or envpool env the flags are host arrays
    and ``value`` is then asked for the truncated sub-envs' final observations (in sub-env order); with a
    torch env they are device tensors and ``final_values(final_obs)`` is asked for every sub-env's (no
    host sync), of which the truncated ones are kept.


    A ``Population`` of actor-critics (``run.population``: each member acts in its own sub-envs) is a
    policy too: the collectors ask each truncated sub-env's final observation of its own member.
    """

    def act(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]: ...

    def value(self, obs: Tensor) -> Tensor: ...


def values_at(policy: Policy, obs: Tensor, sub_envs: Tensor, num_sub_envs: int) -> Tensor:
    """The values of ``obs``, row ``i`` from sub-env ``sub_envs[i]`` of ``num_sub_envs``: ``policy.value``,
    or for a ``Population`` each row's member's (member ``k``'s sub-envs are a ``1 / size`` block)."""
    if isinstance(policy, Population):
        return policy.per_row("value", sub_envs * policy.size // num_sub_envs, obs)
    return policy.value(obs)


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float | Tensor,
    gae_lambda: float | Tensor,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016), all inputs ``[T, N]`` (``gamma`` and
    ``gae_lambda`` floats, or ``[N]``: one per sub-env).

    ``next_values[t]`` is V of transition ``t``'s true next state (the final observation when the
    episode was truncated there). ``terminated`` cuts the bootstrap; ``dones = terminated |
    truncated`` cuts the trace, since the next row belongs to a new episode.

        delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

    Returns ``(advantages, returns)`` with ``returns = advantages + values`` (the TD(lambda) target).
    """
    not_terminated = 1.0 - terminated.float()
    not_done = 1.0 - dones.float()
    deltas = rewards + gamma * next_values * not_terminated - values
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + gamma * gae_lambda * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values


def gae_batch(rollout: Rollout, gamma: float | Tensor, gae_lambda: float | Tensor) -> RolloutBatch:
    """A rollout with GAE advantages and TD(lambda) returns, flattened (PPO, A2C)."""
    advantages, returns = gae(
        rollout.rewards,
        rollout.values,
        rollout.next_values,
        rollout.terminated,
        rollout.terminated | rollout.truncated,
        gamma,
        gae_lambda,
    )
    flat = [x.flatten(0, 1) for x in (rollout.obs, rollout.actions, rollout.logprobs, rollout.values)]
    return RolloutBatch(*flat, advantages.flatten(0, 1), returns.flatten(0, 1))


def returns_to_go(
    rewards: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
) -> tuple[Tensor, Tensor]:
    """Discounted Monte-Carlo returns-to-go over the episodes that end inside the rollout, ``[T, N]``.

        G_t = r_t                              if terminated_t
            = r_t + gamma * V(final obs_t)     if truncated_t   (``next_values``; 0 without a critic)
            = r_t + gamma * G_{t+1}            otherwise

    Returns ``(returns, complete)``: ``complete[t]`` is False for the steps after the last episode
    end of a sub-env (its unfinished tail), whose return is not known yet; their ``returns`` are
    partial sums and must not be used.
    """
    returns = torch.zeros_like(rewards)
    complete = torch.zeros_like(terminated, dtype=torch.bool)
    running = torch.zeros_like(rewards[0])
    ended = torch.zeros_like(complete[0])
    for t in reversed(range(rewards.shape[0])):
        tail = torch.where(truncated[t], next_values[t], torch.where(terminated[t], 0.0, running))
        running = rewards[t] + gamma * tail
        ended = ended | terminated[t] | truncated[t]
        returns[t], complete[t] = running, ended
    return returns, complete


def episode_batch(rollout: Rollout, gamma: float) -> RolloutBatch:
    """The steps of a rollout whose episode ends inside it, with Monte-Carlo returns-to-go and
    advantages ``G - V`` (REINFORCE); each sub-env's unfinished tail is dropped."""
    returns, complete = returns_to_go(
        rollout.rewards, rollout.next_values, rollout.terminated, rollout.truncated, gamma
    )
    keep = complete.flatten()
    obs, actions, logprobs, values, returns = (
        x.flatten(0, 1)[keep] for x in (rollout.obs, rollout.actions, rollout.logprobs, rollout.values, returns)
    )
    return RolloutBatch(obs, actions, logprobs, values, returns - values, returns)


class RolloutCollector:
    """Steps a vector env with a policy for ``num_steps``; keeps the env's current observation
    between rollouts.

    Observations, actions, log-probs and values live on ``device``. With a gymnasium env: one
    host-to-device copy of the observation per vector step; rewards and done flags stay in host
    numpy arrays and cross to the device once per rollout. With a torch env (``env.backend:
    torch``) everything stays on the device: tensors pass straight between the policy and the env,
    and the two steps that need a host sync (bootstrapping truncated episodes, gathering episode
    statistics) run once per rollout instead of once per step.

    Normalization (optional, statistics owned by the module, see ``envs/normalize.py``), as SB3's
    ``VecNormalize``: at every vector step the observation statistics take in the observations the env
    returns and the return statistics each sub-env's discounted return; each observation is normalized
    as it arrives, with the statistics that include it, and stored normalized (so the stored
    observations and log-probabilities are exactly what the policy acted on), and each reward is
    scaled by the return's standard deviation at its step. (Updating once per rollout instead starts
    every run with a rollout of raw observations; sb3-contrib's RecurrentPPO held CartPole without
    velocities where ours, so updated, lost it: ``docs/benchmarks.md``, "Memory".)

    Args:
        envs: This rank's vector env (SAME_STEP autoreset).
        num_steps: Vector steps per rollout.
        device: Where observations, actions and values live.
        seed: Seed of the first sub-env, used at the first reset.
        obs_rms: Observation statistics to normalize with (and update), or None.
        return_rms: Discounted-return statistics to scale rewards with (and update), or None.
        gamma: Discount of the return whose standard deviation scales the rewards.
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        num_steps: int,
        device: torch.device,
        seed: int,
        obs_rms: RunningMeanStd | None = None,
        return_rms: RunningMeanStd | None = None,
        gamma: float = 0.99,
        graphs: bool = False,
    ) -> None:
        self.envs = envs
        self.graphs = graphs  # torch envs: each vector step as a CUDA graph (on a CUDA device)
        self._graphed_step: tuple[Policy, GraphedUpdate] | None = None
        self.num_steps = num_steps
        self.device = device
        self.obs_rms, self.return_rms, self.gamma = obs_rms, return_rms, gamma
        self.on_device = steps_on_device(envs)
        n, obs_space, act_space = envs.num_envs, envs.single_observation_space, envs.single_action_space
        obs_dtype = torch.uint8 if obs_space.dtype == np.uint8 and obs_rms is None else torch.float32
        self.obs = torch.zeros((num_steps, n, *obs_space.shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros(
            (num_steps, n, *action_shape(act_space)), dtype=action_dtype(act_space), device=device
        )
        if isinstance(act_space, gym.spaces.Box):
            low, high = act_space.low, act_space.high
            # The policy's Gaussian is unbounded; the env gets the action clipped to its bounds,
            # the buffer keeps the sampled one so its log-prob stays exact.
            if self.on_device:
                low_t, high_t = torch.as_tensor(low, device=device), torch.as_tensor(high, device=device)
                self._to_env = lambda a: torch.clamp(a, low_t, high_t)
            else:
                self._to_env = lambda a: np.clip(a.cpu().numpy(), low, high)
        else:
            self._to_env = (lambda a: a) if self.on_device else (lambda a: to_env_actions(act_space, a.cpu().numpy()))
        self.logprobs = torch.zeros((num_steps, n), device=device)
        self.values = torch.zeros((num_steps, n), device=device)
        self.final_values = torch.zeros((num_steps, n), device=device)
        if self.on_device:
            self.rewards = torch.zeros((num_steps, n), device=device)
            self.terminated = torch.zeros((num_steps, n), dtype=torch.bool, device=device)
            self.truncated = torch.zeros((num_steps, n), dtype=torch.bool, device=device)
            self.final_obs = torch.zeros_like(self.obs)  # the observation before any autoreset
            self.ended = torch.zeros((num_steps, n), dtype=torch.bool, device=device)
            self.ended_returns = torch.zeros((num_steps, n), device=device)
            self.ended_lengths = torch.zeros((num_steps, n), dtype=torch.int32, device=device)
            self.running_return = torch.zeros(n, device=device)
        else:
            self.rewards = np.zeros((num_steps, n), dtype=np.float32)
            self.terminated = np.zeros((num_steps, n), dtype=bool)
            self.truncated = np.zeros((num_steps, n), dtype=bool)
            # Discounted return of each sub-env's running episode, for reward scaling (reset on done).
            self.running_return = np.zeros(n, dtype=np.float32)
            self.scaled_rewards = torch.zeros((num_steps, n), device=device)
        self.episodes = EpisodeLog()
        obs, _ = envs.reset(seed=seed)
        self.next_obs = self._obs_to_tensor(obs).clone()  # its own storage, updated in place on a device
        self._rows = torch.arange(num_steps, device=device)

    def _obs_to_tensor(self, obs: np.ndarray) -> Tensor:
        return torch.as_tensor(obs, device=self.device, dtype=self.obs.dtype)

    def _policy_obs(self, raw: Tensor) -> Tensor:
        return raw if self.obs_rms is None else self.obs_rms.normalize(raw)

    def _scaled_rewards(self, rewards: Tensor, running_return: Tensor) -> Tensor:
        """One step's rewards scaled by the return statistics updated with the sub-envs' discounted returns."""
        self.return_rms.update(running_return)
        return self.return_rms.scale(rewards)

    @torch.no_grad()
    def rollout(self, policy: Policy) -> Rollout:
        """Run ``num_steps`` vector steps with ``policy`` and return what was collected."""
        self.final_values.zero_()
        if self.on_device:
            step = self._device_step_for(policy)
            for t in range(self.num_steps):
                step(self._rows[t : t + 1])
            self._finish_on_device(policy)
        else:
            after_step = getattr(policy, "after_step", None)  # a policy with memory (see Policy)
            for t in range(self.num_steps):
                obs = self._policy_obs(self.next_obs)  # stored as the policy sees it
                actions, logprobs, values = policy.act(obs)
                self.obs[t] = obs
                self.actions[t] = actions
                self.logprobs[t] = logprobs
                self.values[t] = values
                next_obs, rewards, terminated, truncated, infos = self.envs.step(self._to_env(actions))
                self.next_obs = self._obs_to_tensor(next_obs)
                if self.obs_rms is not None:
                    self.obs_rms.update(self.next_obs)
                self.rewards[t] = rewards
                self.terminated[t] = terminated
                self.truncated[t] = truncated
                if after_step is not None:
                    after_step(terminated, truncated)
                if self.return_rms is not None:
                    self.running_return = self.running_return * self.gamma + rewards
                    self.scaled_rewards[t] = self._scaled_rewards(
                        torch.as_tensor(rewards, device=self.device),
                        torch.as_tensor(self.running_return, device=self.device),
                    )
                    self.running_return[terminated | truncated] = 0.0
                if truncated.any():
                    # Bootstrap a time-limit cut from V(final observation): the episode did not end.
                    idx = np.flatnonzero(truncated)
                    final_obs = self._obs_to_tensor(np.stack(infos["final_obs"][idx]))
                    sub_envs = torch.as_tensor(idx, device=self.device)
                    self.final_values[t, idx] = values_at(policy, self._policy_obs(final_obs), sub_envs, len(truncated))
                self.episodes.record(infos)

        truncated_t = torch.as_tensor(self.truncated, device=self.device)
        next_values = torch.cat([self.values[1:], policy.value(self._policy_obs(self.next_obs)).unsqueeze(0)])
        if self.return_rms is None:
            rewards = torch.as_tensor(self.rewards, device=self.device)
        else:
            rewards = self.rewards if self.on_device else self.scaled_rewards
        return Rollout(
            obs=self.obs,
            actions=self.actions,
            logprobs=self.logprobs,
            values=self.values,
            rewards=rewards,
            terminated=torch.as_tensor(self.terminated, device=self.device),
            truncated=truncated_t,
            next_values=torch.where(truncated_t, self.final_values, next_values),
        )

    def _device_step_for(self, policy: Policy) -> Callable[[Tensor], Tensor]:
        """``_device_step`` for ``policy``: as it is, or with ``graphs`` a ``GraphedUpdate`` (one CUDA
        graph for the whole vector step, replayed for every row; built once per policy)."""
        if not self.graphs:
            return functools.partial(self._device_step, policy)
        if self._graphed_step is None or self._graphed_step[0] is not policy:
            step = GraphedUpdate(functools.partial(self._device_step, policy), "collect_step")
            step.generators = [self.envs.generator]  # the env's own random stream, captured with the step
            self._graphed_step = (policy, step)
        return self._graphed_step[1]

    def _device_step(self, policy: Policy, row: Tensor) -> Tensor:
        """One vector step of a torch env, written in place at ``row`` (a one-element index tensor) of
        the storage: no host sync and no new storage, so that it can run as one CUDA graph. Torch envs
        return the final observations and episode statistics on every step; they are masked out (and
        bootstrapped) after the rollout."""
        obs = self._policy_obs(self.next_obs)  # stored as the policy sees it
        actions, logprobs, values = policy.act(obs)
        next_obs, rewards, terminated, truncated, infos = self.envs.step(self._to_env(actions))
        ended, ended_returns, ended_lengths = episode_stats(infos)
        if self.obs_rms is not None:
            self.obs_rms.update(next_obs)
        if self.return_rms is not None:
            self.running_return.mul_(self.gamma).add_(rewards)
            rewards = self._scaled_rewards(rewards, self.running_return)
            self.running_return.masked_fill_(terminated | truncated, 0.0)
        final_obs = self._policy_obs(infos["final_obs"])  # with the statistics that include this step
        if hasattr(policy, "after_step"):  # a memory: final observations valued now, from their episodes' memories
            policy.after_step(terminated, truncated)
            final_values = torch.where(truncated, policy.final_values(final_obs), 0.0)
            self.final_values.index_copy_(0, row, final_values.unsqueeze(0))
        for storage, x in (
            (self.obs, obs),
            (self.actions, actions),
            (self.logprobs, logprobs),
            (self.values, values),
            (self.rewards, rewards),
            (self.terminated, terminated),
            (self.truncated, truncated),
            (self.final_obs, final_obs),
            (self.ended, ended),
            (self.ended_returns, ended_returns),
            (self.ended_lengths, ended_lengths),
        ):
            storage.index_copy_(0, row, x.unsqueeze(0).to(storage.dtype))
        self.next_obs.copy_(next_obs)
        return row

    def _finish_on_device(self, policy: Policy) -> None:
        """Once per rollout: V(final observation) of the truncated steps, and the ended episodes'
        statistics to the host (the rollout's only two device syncs)."""
        if not hasattr(policy, "after_step"):  # a memory's were valued at their steps (_device_step)
            truncated = self.truncated.nonzero(as_tuple=True)
            final_obs = self.final_obs[truncated]  # normalized at their step
            self.final_values[truncated] = values_at(policy, final_obs, truncated[1], self.envs.num_envs)
        ended = self.ended.nonzero(as_tuple=True)
        # One copy for returns, lengths and sub-envs (float64 holds all three exactly).
        stats = torch.stack([self.ended_returns[ended].double(), self.ended_lengths[ended].double(), ended[1].double()])
        returns, lengths, sub_envs = stats.cpu().numpy()
        self.episodes.add(returns.astype(np.float32), lengths.astype(np.int32), sub_envs.astype(np.int64))


class GraphedPolicy(NamedTuple):
    """A ``Policy`` whose ``act`` is a ``GraphedUpdate`` (its outputs are valid until the next call:
    the collectors copy them at once)."""

    act: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]
    value: Callable[[Tensor], Tensor]


class Rollouts(CollectorSide):
    """The rollout side of PPO, A2C and REINFORCE (an ``ExperienceSide``): what one rollout is and,
    once started on a rank's envs, the ``RolloutCollector`` that steps them. Built with the networks
    (no env needed); started by the module's first collection, after a checkpoint has been restored and
    the module moved to its device, since the storage lives there and the envs' first seed depends on
    the restored env step. Checkpoints keep nothing of it (a rollout is used up by its update).

    With CUDA graphs on (the module's ``UpdateGraphs``), the policy's acting forward is captured as one
    graph (``graph_act``: off where acting draws from Python, as gSDE's exploration matrices), or, with
    torch envs, each whole vector step (policy, env, storage) is.

    Args:
        num_steps: Vector steps per rollout.
        gamma: Discount of the return whose standard deviation scales rewards (``return_rms``).
        obs_rms: Observation statistics to normalize with (module buffers), or None.
        return_rms: Discounted-return statistics to scale rewards with (module buffers), or None.
        graph_act: With CUDA graphs, capture the policy's ``act`` too.
    """

    def __init__(
        self,
        num_steps: int,
        gamma: float,
        obs_rms: RunningMeanStd | None = None,
        return_rms: RunningMeanStd | None = None,
        graph_act: bool = True,
    ) -> None:
        self.num_steps, self.gamma = num_steps, gamma
        self.obs_rms, self.return_rms = obs_rms, return_rms
        self.graph_act = graph_act
        self.collector: RolloutCollector | None = None
        self.graphs: UpdateGraphs | None = None
        self.vector_steps = 0

    def start(
        self, envs: gym.vector.VectorEnv, device: torch.device, seed: int, world_size: int, graphs: UpdateGraphs
    ) -> None:
        self.graphs = graphs
        self.collector = RolloutCollector(
            envs, self.num_steps, device, seed, self.obs_rms, self.return_rms, self.gamma, graphs.enabled
        )

    def collect(self, policy: Policy) -> Rollout:
        """One rollout of ``policy``."""
        assert self.collector is not None and self.graphs is not None, "start() first"
        self.collector.graphs = self.graphs.enabled  # torch envs: whole vector steps as graphs
        if self.graphs.enabled and self.graph_act and not self.collector.on_device:
            policy = GraphedPolicy(self.graphs.graphed_fn(policy.act, "act"), policy.value)
        self.vector_steps = self.num_steps
        return self.collector.rollout(policy)

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
