"""The configs every algorithm shares, one validated, documented dataclass each: ``RunConfig`` and
``ReplayConfig`` here, ``EnvConfig`` (``rl_lightning.envs``); how an algorithm's own defaults fill the
fields a user leaves out; and the torch threads a run uses."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import random
from typing import Any, TypeVar

import torch

from rl_lightning.errors import ConfigError, check
from rl_lightning.validation import at_least

ConfigT = TypeVar("ConfigT")


@dataclasses.dataclass
class RunConfig:
    """How long to train and how often to evaluate. A field left ``None`` takes the algorithm's
    default (the ``run`` default in its signature, listed on its docs page).

    Args:
        total_env_steps: Training budget in env steps, all ranks together.
        env_steps_per_epoch: Env steps (all ranks) per Lightning epoch; one evaluation runs at the end
            of each epoch, so this is the evaluation interval.
        eval_episodes: Deterministic evaluation episodes per evaluation (split across ranks).
        population: Independent runs trained at once as one batched model (docs/population.md): each
            member its own parameters, optimizer state, sub-envs and seed; budgets, epochs and
            ``eval_episodes`` count per member. 1 (default) is a plain run. PPO, A2C, DQN, C51, QR-DQN,
            SAC, TQC, TD3 and DDPG train populations.
        population_seeds: A population of these seeds (2 or more; ``population`` is then their count):
            member ``k`` is the run ``seed_everything: population_seeds[k]`` of this config, its networks
            built, its envs seeded and its evaluation played as that run's (docs/population.md).
            Empty (default): member ``k`` of ``population: N`` is the run of seed ``env.seed + k * env.num_envs``.
        population_variants: Hyperparameters that differ between members, ``{argument: [one value per
            member]}`` (``{learning_rate: [3e-4, 1e-3], ent_coef: [0.0, 0.01]}``): member ``k`` is the run
            with ``argument: values[k]`` (and its seed). Each list as long as the population, which it sets
            when ``population`` and ``population_seeds`` are left out; or ``{argument: {uniform: [low, high]}}``
            (or ``log_uniform``): each member's value drawn from its seed (``env.seed`` or
            ``population_seeds`` must be set). The arguments an algorithm can vary per member are its
            ``member_hyperparameters`` (docs/population.md, "Hyperparameter variants").
        population_ddp: How a population trains under DDP (docs/population.md, "Populations under DDP"):
            ``split`` (default), each rank holds its own block of members (a multiple of the world size, 2
            or more per rank) and no gradients cross ranks; ``replicate``, every rank holds every member
            and each member is trained data-parallel, its gradients averaged over the ranks.
    """

    total_env_steps: int | None = None
    env_steps_per_epoch: int | None = None
    eval_episodes: int | None = None
    population: int = 1
    population_seeds: list[int] = dataclasses.field(default_factory=list)
    population_variants: dict[str, list[float] | dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    population_ddp: str = "split"

    def check(self) -> None:
        """``ConfigError`` naming the field and its value (each count at least 1; seeds of a population, 2 or
        more, as many as ``population`` where both are set); for a config with its defaults filled in
        (``resolve_config``)."""
        for f in dataclasses.fields(self):
            if f.name not in ("population_seeds", "population_variants", "population_ddp"):
                at_least(f"run.{f.name}", getattr(self, f.name), 1)
        check(
            self.population_ddp in ("split", "replicate"),
            f"run.population_ddp must be 'split' or 'replicate', got {self.population_ddp!r}.",
        )
        seeds = self.population_seeds
        if seeds:
            check(len(seeds) >= 2, f"run.population_seeds needs 2 or more seeds, got {seeds}; one: seed_everything.")
            check(
                self.population in (1, len(seeds)),
                f"run.population={self.population} but run.population_seeds has {len(seeds)} seeds; set one of them.",
            )
        for name, values in self.population_variants.items():
            if isinstance(values, dict):
                check_sampled_variant(name, values, self.members)
                continue
            check(
                isinstance(values, list | tuple) and len(values) == self.members >= 2,
                f"run.population_variants.{name} needs one value per member ({self.members} members), got {values!r}.",
            )

    @property
    def members(self) -> int:
        """The population's size: ``population``, or the number of ``population_seeds``, or of the values of
        each of ``population_variants``."""
        if self.population_seeds:
            return len(self.population_seeds)
        listed = [len(v) for v in self.population_variants.values() if isinstance(v, list | tuple)]
        if self.population == 1 and listed:
            return max(listed)
        return self.population


def check_sampled_variant(name: str, spec: dict, members: int) -> None:
    """``ConfigError`` unless ``spec`` is ``{uniform: [low, high]}`` or ``{log_uniform: [low, high]}`` (low <= high,
    low > 0 for log_uniform) for a population of 2 or more."""
    where = f"run.population_variants.{name}"
    check(members >= 2, f"{where} draws one value per member: set run.population (2 or more) or population_seeds.")
    (kind, bounds), *rest = spec.items() if spec else ((None, None),)
    check(
        not rest and kind in ("uniform", "log_uniform") and isinstance(bounds, list | tuple) and len(bounds) == 2,
        f"{where} must be a list of values, {{uniform: [low, high]}} or {{log_uniform: [low, high]}}, got {spec!r}.",
    )
    low, high = bounds
    check(
        (low <= high) and (kind == "uniform" or low > 0),
        f"{where}: {kind} needs low <= high{' and low > 0' if kind == 'log_uniform' else ''}, got {bounds!r}.",
    )


def sample_variant(spec: dict, seed: int, name: str) -> float:
    """A value of ``spec`` (``check_sampled_variant``'s) drawn for the member of ``seed``: the same for the same
    seed and argument in any process (its own generator, not the global RNGs)."""
    ((kind, (low, high)),) = spec.items()
    u = random.Random(f"{seed}/{name}").random()
    if kind == "uniform":
        return low + u * (high - low)
    return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))


DEFAULT_RUN = RunConfig(total_env_steps=1_000_000, env_steps_per_epoch=10_000, eval_episodes=20)


def as_config(cls: type[ConfigT], value: ConfigT | dict | None) -> ConfigT:
    """A copy of a config dataclass (``setup`` fills in the env seed), from an instance, the plain dict
    a checkpoint stores, or ``None`` for the defaults."""
    if value is None:
        return cls()
    if isinstance(value, dict):
        return cls(**value)
    return dataclasses.replace(value)


def constructor_defaults(algorithm: type) -> dict[str, Any]:
    """``{argument: default}`` of ``algorithm``'s constructor as the CLI resolves it (jsonargparse, as
    LightningCLI does): a variant that takes ``**kwargs`` has its parent's arguments, less those it passes
    itself, with its own defaults for those it restates. In the parent's order, the variant's new ones last."""
    from jsonargparse._parameter_resolvers import get_signature_parameters  # LightningCLI's resolver

    resolved = {p.name: p.default for p in get_signature_parameters(algorithm, "__init__")}
    return {name: resolved[name] for name in _argument_order(algorithm) if name in resolved}


def _argument_order(algorithm: type) -> list[str]:
    own = [
        name
        for name, p in inspect.signature(algorithm.__init__).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if inspect.getfullargspec(algorithm.__init__).varkw is None:
        return own
    parent = next(c for c in algorithm.__mro__[1:] if "__init__" in vars(c))
    inherited = _argument_order(parent)
    return inherited + [name for name in own if name not in inherited]


def resolve_config(algorithm: type, name: str, value: Any) -> Any:
    """The config given for argument ``name`` of ``algorithm`` (an instance, the plain dict a checkpoint
    stores, or ``None``), its ``None`` fields taken from the argument's default in the algorithm's
    signature: ``DQN(replay=ReplayConfig(buffer_size=50_000))`` keeps DQN's own batch size and
    training frequency, not another algorithm's."""
    inits = (inspect.signature(c.__init__).parameters for c in algorithm.__mro__ if "__init__" in vars(c))
    default = next(p[name].default for p in inits if name in p)  # a subclass may take **kwargs
    given = as_config(type(default), value)
    missing = {f.name: getattr(default, f.name) for f in dataclasses.fields(given) if getattr(given, f.name) is None}
    return dataclasses.replace(given, **missing)


def use_torch_threads() -> int:
    """Set torch's intra-op threads for a fit or an evaluation and return the count before: ``OMP_NUM_THREADS``
    if set (importing rl_lightning sets it to 1 where it is unset), else 1. Chosen when a run starts, not at
    import: torch sizes its pool when it is imported, which a script may do before importing rl_lightning
    (PPO then ran 24x slower on a busy 2-core machine). RL's small networks gain nothing from a thread
    pool and lose badly when cores are shared with envs, DDP ranks or other jobs."""
    value = os.environ.get("OMP_NUM_THREADS", "1")
    try:
        threads = max(int(value), 1)
    except ValueError:
        raise ConfigError(f"OMP_NUM_THREADS must be a positive integer, got {value!r}.") from None
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    return before


@dataclasses.dataclass
class ReplayConfig:
    """Replay and the rhythm of collection and updates, for DQN, SAC, TD3 and DDPG. A field left ``None``
    takes the algorithm's default (the ``replay`` default in its signature, listed on its docs page).

    Training alternates collection phases and updates: a phase is ``train_freq`` vector steps
    (``train_freq * env.num_envs`` env steps per rank) into the replay buffer, followed by
    ``gradient_steps`` gradient steps on minibatches sampled from it.

    Args:
        buffer_size: Replay capacity in transitions, per rank.
        batch_size: Transitions per gradient step.
        learning_starts: Env steps of uniformly random actions that fill the buffer before the first
            gradient step (all ranks together); at most ``total_env_steps``.
        train_freq: Vector steps per collection phase.
        gradient_steps: Gradient steps after each collection phase.
        phases_per_step: Collection phases (each followed by its updates) per Lightning training step:
            speed only, the run is the same; metrics are logged per training step.
        save_replay_buffer: Save the replay buffer with checkpoints (one of 64 MiB or more in a side
            file ``<checkpoint>.replay-<env step>.pt`` next to it), so a resumed run continues with the
            same contents instead of refilling it.
        buffer_on_cpu: Keep the replay buffer in host memory even when training on an accelerator.
    """

    buffer_size: int | None = None
    batch_size: int | None = None
    learning_starts: int | None = None
    train_freq: int | None = None
    gradient_steps: int | None = None
    phases_per_step: int | None = None
    save_replay_buffer: bool | None = None
    buffer_on_cpu: bool | None = None

    def check(self, total_env_steps: int) -> None:
        """``ConfigError`` naming the argument and its value."""
        for name in ("buffer_size", "batch_size", "train_freq", "gradient_steps", "phases_per_step"):
            at_least(f"replay.{name}", getattr(self, name), 1)
        check(
            self.buffer_size >= self.batch_size,
            f"replay.buffer_size={self.buffer_size} must be >= replay.batch_size={self.batch_size}.",
        )
        check(
            0 <= self.learning_starts <= total_env_steps,
            f"replay.learning_starts must be in [0, total_env_steps={total_env_steps}], got {self.learning_starts}: "
            "the run would end before its first gradient step.",
        )


# SB3's defaults for SAC, TD3 and DDPG (and ours for grouping phases).
CONTINUOUS_CONTROL_REPLAY = ReplayConfig(
    buffer_size=1_000_000,
    batch_size=256,
    learning_starts=100,
    train_freq=1,
    gradient_steps=1,
    phases_per_step=10,
    save_replay_buffer=False,
    buffer_on_cpu=False,
)
