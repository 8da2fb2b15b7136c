"""Recurrent PPO: PPO with an LSTM or GRU memory, for partially observed environments.

PPO (``rl_lightning.algorithms.ppo``: its loss, update epochs and logging, unchanged) whose agent
carries a recurrent memory between steps, as in CleanRL's ``ppo_atari_lstm`` and sb3-contrib's
``RecurrentPPO``: observation encoder -> LSTM/GRU -> actor and critic MLPs. The critic has its own
memory unless ``shared_memory``.

- Collection: each sub-env's memory lives on across rollouts and is reset (multiplied by
  ``1 - episode_start``) at the first step of each of its episodes. ``RecurrentRollouts`` keeps, per
  rollout, the memory at its start and the episode-start flag of every step; a truncated episode is
  bootstrapped from V(final observation) under that episode's memory, the rollout from V(next
  observation) under the memory after its last step.
- Update: a minibatch is a subset of the sub-envs over the whole rollout (``num_minibatches`` must
  divide ``env.num_envs``), replayed from the stored start memories with the same resets. The
  sequences are split at episode starts and the pieces run side by side, padded, in one call of the
  fused ``nn.LSTM``/``nn.GRU`` per memory (``RecurrentActorCritic.sequence``).
- Evaluation plays each evaluation env from a zero memory (each plays one episode). Exported policies
  are ``(obs, memory) -> (actions, memory)``, the first memory zeros (``initial_memory``).

Deviation from sb3-contrib: minibatches are whole sub-env sequences (CleanRL's), not padded episode
chunks. On torch-backend envs the final observations of every step are valued under their episodes'
memories as the step runs (no host sync). Not supported, refused before any env step: CUDA graphs,
``compile``.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.algorithms.ppo import PPO
from rl_lightning.cuda_graphs import UpdateGraphs
from rl_lightning.data.rollout import Rollout, RolloutBatch, Rollouts
from rl_lightning.errors import ConfigError, check
from rl_lightning.evaluation import as_env_actions
from rl_lightning.export import export_policy
from rl_lightning.networks.encoders import flat_dim, image_encoder
from rl_lightning.networks.policies import ActorCritic
from rl_lightning.validation import at_least, one_of

Recurrent = Literal["lstm", "gru"]


def reset_where(memory: Tensor, episode_starts: Tensor) -> Tensor:
    """``memory * (1 - episode_start)`` per sub-env: zero memory for the sub-envs whose episode starts."""
    return memory * (~episode_starts).to(memory.dtype).view(-1, *[1] * (memory.dim() - 1))


class RecurrentActorCritic(nn.Module):
    """Encoder -> LSTM/GRU (one for the actor, and one for the critic unless ``shared_memory``) -> the
    actor and critic MLPs and policy head of an ``ActorCritic`` on the memory's output.

    The memory of ``n`` sub-envs is one tensor ``[n, slots, hidden_size]``: ``(h, c)`` per LSTM, ``h``
    per GRU, the actor's first; zeros start an episode (``initial_state``).

    Args:
        observation_space: The env's observation space (images get the Nature CNN, vectors are read flat).
        action_space: Any action space ``ActorCritic`` takes.
        recurrent: ``lstm`` or ``gru``.
        hidden_size: Width of the recurrent memory.
        shared_memory: One memory for actor and critic; else the critic has its own.
        hidden_sizes, activation, orthogonal_init, log_std_init, sde_sample_freq: as ``ActorCritic``'s,
            for the MLPs and head after the memory. With ``orthogonal_init`` the recurrent weights are
            orthogonal and their biases zero (CleanRL's ``ppo_atari_lstm``).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        recurrent: Recurrent = "lstm",
        hidden_size: int = 64,
        shared_memory: bool = False,
        hidden_sizes: tuple[int, ...] = (64,),
        activation: str = "tanh",
        orthogonal_init: bool = True,
        log_std_init: float = 0.0,
        sde_sample_freq: int | None = None,
    ) -> None:
        super().__init__()
        self.encoder = image_encoder(observation_space, orthogonal_init=orthogonal_init)
        in_dim = self.encoder.features_dim if self.encoder is not None else flat_dim(observation_space)
        cell = nn.LSTM if recurrent == "lstm" else nn.GRU
        self.memories = nn.ModuleList([cell(in_dim, hidden_size) for _ in range(1 if shared_memory else 2)])
        if orthogonal_init:
            for name, param in self.memories.named_parameters():
                nn.init.constant_(param, 0.0) if "bias" in name else nn.init.orthogonal_(param, 1.0)
        self.slots = 2 if recurrent == "lstm" else 1  # state tensors per memory
        self.hidden_size = hidden_size
        memory_space = gym.spaces.Box(-np.inf, np.inf, (hidden_size,), np.float32)
        self.body = ActorCritic(
            memory_space,
            action_space,
            hidden_sizes,
            activation,
            orthogonal_init=orthogonal_init,
            log_std_init=log_std_init,
            sde_sample_freq=sde_sample_freq,
        )

    @property
    def head(self) -> nn.Module:
        return self.body.head

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> Tensor:
        """The memory at the start of an episode, for ``n`` sub-envs: zeros ``[n, slots, hidden_size]``."""
        return torch.zeros(n, len(self.memories) * self.slots, self.hidden_size, device=device)

    def _encode(self, obs: Tensor) -> Tensor:
        return self.encoder(obs) if self.encoder is not None else obs.flatten(1).float()

    def _run(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The memories over ``x`` ``[T, n, features]`` from ``state``, without resets (fused over T):
        actor outputs, critic outputs ``[T, n, hidden_size]`` and the state after the last step.

        Under mixed precision the memories run in float32 (the encoder and MLPs around them do not): the
        state is carried over thousands of steps, where low-precision rounding would add up, and oneDNN
        has no bfloat16 LSTM with a float32 state."""
        if torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return self._run(x.float(), state.float())
        outputs, states = [], []
        for i, rnn in enumerate(self.memories):
            hx = state[:, i * self.slots : (i + 1) * self.slots].transpose(0, 1).contiguous()  # [slots, n, H]
            out, new = rnn(x, (hx[:1], hx[1:]) if self.slots == 2 else hx)
            outputs.append(out)
            states.append(torch.cat(new if self.slots == 2 else (new,)).transpose(0, 1))
        return outputs[0], outputs[-1], torch.cat(states, 1)

    def sequence(self, x: Tensor, state: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        """Actor and critic outputs ``[T, n, hidden_size]`` over ``x`` ``[T, n, features]`` from ``state``,
        each sub-env's memory reset at the steps where its episode starts (``episode_starts`` ``[T, n]``,
        the first row included).

        The sequences are split at episode starts into chunks (one episode piece each), padded at their
        ends into one batch ``[longest, chunks, features]`` and run in one fused call per memory: a
        chunk's first memory is its sub-env's ``state`` (reset if an episode starts there) for the first
        chunk of each sub-env, zeros for the others. Padding comes after a chunk's steps, so it never
        reaches their outputs. One host sync (the batch's shape)."""
        steps, n = episode_starts.shape
        begins = episode_starts.t().flatten().clone()  # sub-env-major: row i * steps + t
        begins[::steps] = True  # every sub-env's first step begins a chunk
        chunk = begins.cumsum(0) - 1  # the chunk of each step
        first_rows = begins.nonzero().flatten()
        position = torch.arange(steps * n, device=x.device) - first_rows[chunk]
        num_chunks, longest = len(first_rows), int(position.max()) + 1
        padded = x.new_zeros(longest, num_chunks, x.shape[-1])
        padded[position, chunk] = x.transpose(0, 1).flatten(0, 1)
        chunk_state = state.new_zeros(num_chunks, *state.shape[1:])
        chunk_state[chunk[::steps]] = reset_where(state, episode_starts[0])
        actor, critic, _ = self._run(padded, chunk_state)
        return tuple(out[position, chunk].view(n, steps, -1).transpose(0, 1) for out in (actor, critic))

    def _value(self, critic_out: Tensor) -> Tensor:
        return self.body.critic(critic_out).squeeze(-1)

    def act(self, obs: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step of collection from ``state`` (already reset where episodes start): ``(actions,
        log_probs, values, next state)``."""
        actor, critic, state = self._run(self._encode(obs).unsqueeze(0), state)
        params = self.head(self.body.actor_body(actor[0]))
        actions = self.head.sample(params)
        return actions, self.head.log_prob(params, actions), self._value(critic[0]), state

    def value(self, obs: Tensor, state: Tensor) -> Tensor:
        """V(obs) under ``state``; the state is not advanced."""
        return self._value(self._run(self._encode(obs).unsqueeze(0), state)[1][0])

    def evaluate(
        self, obs: Tensor, actions: Tensor, episode_starts: Tensor, start_state: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """For the loss: ``(log_probs, entropies, values)`` of a minibatch of whole sequences, ``obs`` and
        ``actions`` flattened time-major from ``[T, n]``, replayed from ``start_state`` ``[n, ...]`` with
        the resets of ``episode_starts`` ``[T, n]``."""
        x = self._encode(obs).unflatten(0, episode_starts.shape)
        actor, critic = self.sequence(x, start_state, episode_starts)
        params = self.head(self.body.actor_body(actor.flatten(0, 1)))
        return *self.head.log_prob_entropy(params, actions), self._value(critic.flatten(0, 1))

    def forward(self, obs: Tensor, state: Tensor, deterministic: bool = True) -> tuple[Tensor, Tensor]:
        """Acting (evaluation, deployment): ``(actions, next state)``, the mode or a sample."""
        actor, _, state = self._run(self._encode(obs).unsqueeze(0), state)
        params = self.head(self.body.actor_body(actor[0]))
        return (self.head.mode(params) if deterministic else self.head.sample(params)), state


class MemoryPolicy:
    """The ``Policy`` a ``RolloutCollector`` steps for one rollout: ``agent`` with the live memory of
    ``side`` (``RecurrentRollouts``), reset where episodes start, each step's start flags recorded."""

    def __init__(self, agent: RecurrentActorCritic, side: RecurrentRollouts) -> None:
        self.agent, self.side, self.t = agent, side, 0
        self.truncated_rows: Tensor | None = None

    def act(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        side = self.side
        side.episode_starts[self.t] = side.next_starts
        self.t += 1
        actions, logprobs, values, side.memory = self.agent.act(obs, reset_where(side.memory, side.next_starts))
        side.next_starts = torch.zeros_like(side.next_starts)
        return actions, logprobs, values

    def after_step(self, terminated: np.ndarray | Tensor, truncated: np.ndarray | Tensor) -> None:
        """After each vector step (``RolloutCollector``): which sub-envs start an episode next, and (host
        arrays: gymnasium, envpool) the rows whose final observation ``value`` is asked for next (the
        truncated ones, in order). Torch envs' device tensors: ``final_values`` is asked instead."""
        self.side.next_starts = torch.as_tensor(terminated | truncated, device=self.side.memory.device)
        if isinstance(truncated, np.ndarray):
            self.truncated_rows = torch.as_tensor(np.flatnonzero(truncated)) if truncated.any() else None

    def final_values(self, final_obs: Tensor) -> Tensor:
        """V(final observation) of every sub-env under the memory of the episode it ends (torch envs)."""
        return self.agent.value(final_obs, self.side.memory)

    def value(self, obs: Tensor) -> Tensor:
        side = self.side
        if self.truncated_rows is not None:  # final observations: the memory of the episodes they end
            state, self.truncated_rows = side.memory[self.truncated_rows], None
        else:  # the next observations: new episodes start from zeros
            state = reset_where(side.memory, side.next_starts)
        return self.agent.value(obs, state)


class RecurrentRollouts(Rollouts):
    """``Rollouts`` with the live memory of each sub-env (checkpointed) and, for the update, per rollout:
    the memory at its start (``start_memory``) and each step's episode-start flags (``episode_starts``
    ``[num_steps, num_envs]``). Its envs start new episodes when it starts (a resume too): every memory
    is then reset at its first step."""

    def __init__(self, *args: Any, initial_state: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_state = initial_state  # n, device -> zero memory
        self.memory: Tensor | None = None

    def start(
        self, envs: gym.vector.VectorEnv, device: torch.device, seed: int, world_size: int, graphs: UpdateGraphs
    ) -> None:
        super().start(envs, device, seed, world_size, graphs)
        n = envs.num_envs
        if self.memory is None or self.memory.shape[0] != n:
            self.memory = self.initial_state(n, device)
        self.memory = self.memory.to(device)
        self.next_starts = torch.ones(n, dtype=torch.bool, device=device)  # new episodes everywhere
        self.episode_starts = torch.zeros((self.num_steps, n), dtype=torch.bool, device=device)

    def collect(self, policy: RecurrentActorCritic) -> Rollout:
        """One rollout of the recurrent agent ``policy``, its memory carried on."""
        assert self.memory is not None, "start() first"
        self.start_memory = self.memory
        return super().collect(MemoryPolicy(policy, self))

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.memory is None else {"memory": self.memory}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = state["memory"]


class RecurrentPPO(PPO):
    """PPO with an LSTM or GRU memory, for every action space PPO takes; vector, image and ``Dict``/
    ``Tuple`` observations (images through the Nature CNN).

    Its other arguments are PPO's, described there; ``num_steps`` is the length of each training
    sequence, and ``orthogonal_init`` initializes the memories too.

    Args:
        recurrent: The memory: ``lstm`` or ``gru``.
        hidden_size: Width of the memory.
        shared_memory: One memory for actor and critic (CleanRL's); ``False`` gives the critic its own
            (sb3-contrib's default, ``enable_critic_lstm``).
        num_minibatches: Minibatches per pass, each ``num_envs / num_minibatches`` whole sub-env sequences;
            must divide ``env.num_envs``.
        hidden_sizes: Hidden layer widths of the actor and of the critic MLP after the memory.
    """

    trains_populations = False  # PPO's population path has no per-member memories

    def __init__(
        self,
        recurrent: Recurrent = "lstm",
        hidden_size: int = 128,
        shared_memory: bool = False,
        num_minibatches: int = 1,
        hidden_sizes: tuple[int, ...] = (64,),
        **kwargs: Any,
    ) -> None:
        super().__init__(num_minibatches=num_minibatches, hidden_sizes=hidden_sizes, **kwargs)
        one_of("recurrent", recurrent, ("lstm", "gru"))
        at_least("hidden_size", hidden_size, 1)
        num_envs = self.env_config.num_envs
        check(
            num_envs % num_minibatches == 0,
            f"num_minibatches={num_minibatches} must divide env.num_envs={num_envs}: RecurrentPPO's minibatches "
            "are whole sub-env sequences.",
        )
        self.eval_memory: Tensor | None = None  # evaluation's, one row per evaluation env

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().build_networks(observation_space, action_space)  # the normalizers (and a stateless agent)
        hp = self.hparams
        self.agent = RecurrentActorCritic(
            observation_space,
            action_space,
            hp.recurrent,
            hp.hidden_size,
            hp.shared_memory,
            hp.hidden_sizes,
            hp.activation,
            orthogonal_init=hp.orthogonal_init,
            log_std_init=hp.log_std_init,
            sde_sample_freq=hp.sde_sample_freq if hp.use_sde else None,
        )

    def build_experience(self) -> RecurrentRollouts:
        hp = self.hparams
        return RecurrentRollouts(
            hp.num_steps, hp.gamma, self.obs_rms, self.return_rms, initial_state=self.agent.initial_state
        )

    # ----------------------------------------------------------------------------------- acting
    def initial_memory(self, n: int) -> Tensor:
        """The memory of ``n`` envs at the start of their episodes (zeros), for ``act_in_env`` and exports."""
        return self.agent.initial_state(n, self.device)

    def forward(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions for raw observations, one evaluation memory per row carried from call to call (zeros
        at the first call and whenever the batch size changes; ``play_episodes`` starts from zeros)."""
        if self.eval_memory is None or self.eval_memory.shape[0] != obs.shape[0]:
            self.eval_memory = self.initial_memory(obs.shape[0])
        actions, self.eval_memory = self.act_with_memory(obs, self.eval_memory, deterministic)
        return actions

    def act_with_memory(self, obs: Tensor, memory: Tensor, deterministic: bool = True) -> tuple[Tensor, Tensor]:
        """``(actions, next memory)`` for raw observations under ``memory``: pure, nothing kept."""
        return self.agent(obs if self.obs_rms is None else self.obs_rms.normalize(obs), memory, deterministic)

    def act_in_env(self, obs: Tensor, memory: Tensor | None = None) -> Any:
        """Evaluation's env actions (with the evaluation memory); given ``memory``, the exported policy's
        ``(env actions, next memory)``."""
        if memory is None:
            return super().act_in_env(obs)
        actions, memory = self.act_with_memory(obs, memory)
        return as_env_actions(self, actions), memory

    def start_episodes(self) -> None:
        self.eval_memory = None  # each evaluation env's episode starts from zeros

    def play_episodes(self, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
        try:
            return super().play_episodes(seeds)
        finally:
            self.eval_memory = None  # a later forward starts from zeros too, not from evaluation's memory

    def export_policy(self, path: Any = None) -> torch.export.ExportedProgram:
        """``(obs, memory) -> (env actions, memory)`` as a ``torch.export`` program; the first memory of
        each env is zeros ``[batch, *initial_memory(1).shape[1:]]`` and must be reset to zeros at each of
        its episode starts."""
        self.build_for_env()  # the agent, for the example memory
        return export_policy(self, path, memory=self.initial_memory(2))

    # --------------------------------------------------------------------------------- training
    def minibatches(self, b: RolloutBatch) -> Any:
        """One epoch's minibatches: shuffled groups of whole sub-env sequences, each with its episode-start
        flags and start memories (the last arguments of ``minibatch_update``, for ``agent.evaluate``)."""
        side = self.experience
        steps, n = side.episode_starts.shape
        fields = (b.obs, b.actions, b.logprobs, b.advantages, b.values, b.returns)
        if self.hparams.num_minibatches == 1:
            yield *fields, side.episode_starts, side.start_memory
            return
        for envs in torch.randperm(n, device=self.device).split(n // self.hparams.num_minibatches):
            rows = (torch.arange(steps, device=self.device).unsqueeze(1) * n + envs).flatten()  # time-major
            yield *(x[rows] for x in fields), side.episode_starts[:, envs], side.start_memory[envs]

    def enable_cuda_graphs(self) -> None:
        raise ConfigError("RecurrentPPO does not run as CUDA graphs (it splits training sequences on the host).")

    def compile_networks(self, **compile_kwargs: Any) -> None:
        raise ConfigError("RecurrentPPO does not support compile: true (it splits training sequences on the host).")
