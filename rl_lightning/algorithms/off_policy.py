"""What the continuous-action off-policy algorithms (SAC, TD3, DDPG) share: collection phases into a
replay buffer, sampling, the replay buffer in checkpoints, hyperparameter checks and the critic loss.

Functions of the module rather than a base class, so each algorithm stays ``RLModule -> algorithm``
and its file shows where its data comes from. They read the module's ``hparams`` (``buffer_size,
batch_size, learning_starts, train_freq, gradient_steps, phases_per_step, save_replay_buffer,
buffer_on_cpu``) and attributes ``replay``, ``collector``, ``num_updates`` and ``_replay_state``.

Actions are normalized: the actor outputs and the critics and replay buffer take actions in
``[-1, 1]^d``; the collector rescales them to the env's bounds on their way to the env
(``ReplayCollector(normalized_actions=True)``) and ``forward`` returns env units, as SB3 does. Env
actions are therefore always within bounds, whatever the exploration noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from rl_lightning.algorithms.base import RLModule
from rl_lightning.data.replay import ReplayBatch, ReplayBuffer, ReplayCollector
from rl_lightning.errors import ConfigError, check


def q_loss(q: Tensor, target: Tensor) -> Tensor:
    """Critic loss summed over the ``n`` critics: ``sum_i mean_b (Q_i(s, a) - y)^2`` for ``[n, B]``
    Q-values and a ``[B]`` target (SB3's and CleanRL's TD3 loss; SB3's SAC halves it, which Adam's
    scale invariance makes immaterial)."""
    return (q - target).pow(2).mean(-1).sum()


def check_hparams(hp: Any, total_env_steps: int) -> None:
    """The checks every off-policy algorithm needs; ``ConfigError`` names the argument and value."""
    check(0 < hp.gamma <= 1, f"gamma must be in (0, 1], got {hp.gamma}.")
    check(0 < hp.tau <= 1, f"tau must be in (0, 1], got {hp.tau}.")
    check(hp.learning_rate > 0, f"learning_rate must be > 0, got {hp.learning_rate}.")
    for name in ("batch_size", "train_freq", "gradient_steps", "phases_per_step"):
        check(hp[name] >= 1, f"{name} must be >= 1, got {hp[name]}.")
    check(hp.buffer_size >= hp.batch_size, f"buffer_size={hp.buffer_size} must be >= batch_size={hp.batch_size}.")
    check(hp.learning_starts >= 0, f"learning_starts must be >= 0, got {hp.learning_starts}.")
    check(
        hp.learning_starts <= total_env_steps,
        f"learning_starts={hp.learning_starts} must be <= total_env_steps={total_env_steps}: "
        "the run would end before its first gradient step.",
    )
    check(all(h >= 1 for h in hp.hidden_sizes), f"hidden_sizes must be positive, got {list(hp.hidden_sizes)}.")


def check_action_space(module: RLModule, action_space: gym.Space) -> None:
    """A 1-D Box with finite bounds (actions are rescaled from ``[-1, 1]`` onto them)."""
    if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
        raise ConfigError(f"{type(module).__name__} needs a 1-D Box action space, got {action_space}.")
    if not action_space.is_bounded("both"):
        raise ConfigError(
            f"{type(module).__name__} needs finite action bounds (actions are squashed into them), got "
            f"{action_space} on {module.env_config.env_id!r}; wrap the env with gymnasium's ClipAction/RescaleAction."
        )


# ------------------------------------------------------------------------------------------ data
def phases_per_epoch(module: Any) -> int:
    per_phase = module.hparams.train_freq * module.env_config.num_envs * module.trainer.world_size
    return math.ceil(module.env_steps_per_epoch / per_phase)


def batches_per_epoch(module: Any) -> int:
    return math.ceil(phases_per_epoch(module) / module.hparams.phases_per_step)


def collection_phases(module: Any, explore: Callable[[Tensor], Tensor]) -> Iterator[Iterator[int]]:
    """One epoch of collection phases in groups of ``phases_per_step``, one group per training step
    (the last group of an epoch may be smaller); each phase yields the env steps (all ranks) it
    collected.

    A phase is ``train_freq`` vector steps with ``explore(obs) -> [-1, 1] actions``. The first phase
    of a run (or of a resumed run without a saved buffer) first fills the buffer with
    ``learning_starts`` env steps of uniformly random actions, so every epoch has the same number of
    training steps (what DDP needs). A group is lazy: ``gradient_steps`` collects each phase when the
    training step reaches it, after the updates of the phase before, so the run is the same as with
    one phase per training step; only Lightning's fixed cost per training step is paid less often.
    """
    hp, world = module.hparams, module.trainer.world_size
    if module.replay is None:
        module.replay = make_replay(module)
    if module.collector is None:
        module.collector = ReplayCollector(
            module.envs, module.replay, module.replay.device, module.rank_seed, normalized_actions=True
        )
    per_vector_step = module.env_config.num_envs * world
    warmup_until = math.ceil(hp.learning_starts / per_vector_step)

    def phase() -> int:
        with module._naming_env_faults("Experience collection"):  # run inside training_step
            collected = module.collector.collect(explore, hp.train_freq, warmup_until) * per_vector_step
        module.env_steps += collected
        return collected

    def group(count: int) -> Iterator[int]:
        for i in range(count):
            if i > 0 and module.env_steps >= module.total_env_steps:
                return  # the budget is spent: stop where one phase per training step would
            yield phase()

    left = phases_per_epoch(module)
    while left > 0:
        count = min(hp.phases_per_step, left)
        left -= count
        yield group(count)


def gradient_steps(module: Any, phases: Iterator[int]) -> Iterator[int]:
    """A training step's updates: ``gradient_steps`` after each of its phases, each phase collected
    when the previous one's updates are done."""
    for _ in phases:
        yield from range(module.hparams.gradient_steps)


def make_replay(module: Any, buffer_class: type[ReplayBuffer] = ReplayBuffer, **kwargs: Any) -> ReplayBuffer:
    """The module's replay buffer (on the host with ``buffer_on_cpu``), restored from a checkpoint if
    one was loaded. Its sampling RNG is seeded from ``rank_seed``, not drawn from torch's global RNG:
    a resumed run builds its buffer after the checkpoint restored that RNG, and a draw there would
    make it differ from the uninterrupted run."""
    hp = module.hparams
    device = torch.device("cpu") if hp.buffer_on_cpu else module.device
    replay = buffer_class(
        buffer_size=hp.buffer_size,
        num_envs=module.env_config.num_envs,
        observation_space=module.observation_space,
        action_space=module.action_space,
        device=device,
        seed=module.rank_seed,
        **kwargs,
    )
    rank_zero_info(
        f"Replay buffer: {replay.nbytes / 1e9:.2f} GB on {device} per rank "
        f"({replay.nbytes / (replay.rows * replay.num_envs):.0f} bytes per transition)."
    )
    if module._replay_state is not None:
        replay.load_state_dict(module._replay_state)
        module._replay_state = None
    return replay


def sample(module: Any) -> ReplayBatch:
    batch = module.replay.sample(module.hparams.batch_size)
    if module.replay.device != module.device:
        batch = batch._replace(**{k: getattr(batch, k).to(module.device) for k in batch._fields if k != "indices"})
    return batch


# ----------------------------------------------------------------------------------- checkpoints
def save_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """The gradient-step counter (it drives delayed updates) and, if asked, the replay buffer."""
    state = checkpoint["rl_lightning"]
    state["num_updates"] = module.num_updates
    if module.hparams.save_replay_buffer and module.replay is not None:
        state["replay_buffer"] = module.replay.state_dict()


def load_state(module: Any, checkpoint: dict[str, Any]) -> None:
    state = checkpoint.get("rl_lightning", {})
    module.num_updates = int(state.get("num_updates", 0))
    module._replay_state = state.get("replay_buffer")
