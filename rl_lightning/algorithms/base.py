"""``RLModule``: Lightning's hooks and the run's bookkeeping for every algorithm; what an algorithm
owes is its contract (the class docstring, ``docs/adding_an_algorithm.md``).

- Envs are built in ``setup`` (never in ``__init__``, which stays cheap and picklable for the CLI
  and DDP), seeded per rank, closed in ``teardown``.
- The data loader only paces Lightning's training steps (``StepPacer``): each training step
  collects its own experience through ``collect_rollout`` or ``collect_phase`` from the algorithm's
  experience side (``rl_lightning.data.experience``), the one place where env faults are named and envs
  restarted, then updates. Every DDP rank runs the same number of steps.
- Updates: ``run_update`` and ``gradient_step``, eager or as CUDA graphs (``rl_lightning.cuda_graphs``);
  optimizers and schedules from ``rl_lightning.optim``.
- Budget: an epoch is a fixed number of env steps; training stops once ``total_env_steps`` (global,
  all ranks together) are spent, right after a final evaluation.
- Evaluation is Lightning's validation (and test) loop over ``rl_lightning.evaluation``:
  deterministic episodes on fixed seeds, split across ranks, averaged with torchmetrics, logged as
  ``val/episode_return``.
- Logging: once per training step, x-axis = env steps; under DDP, means over ranks.
- Checkpoints: the env-step counter, RNG states, the attributes an algorithm lists in
  ``checkpointed_attributes`` and, if asked, the replay buffer (``rl_lightning.checkpointing``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric

from rl_lightning.algorithms.population import PopulationMembers, report_diverged_members
from rl_lightning.callbacks.compile import compile_children
from rl_lightning.callbacks.divergence import DivergenceCheck
from rl_lightning.callbacks.preemption import PreemptionExitCode
from rl_lightning.checkpointing import (
    load_module,
    prepare_checkpoints,
    restore_module_state,
    save_module_state,
)
from rl_lightning.config import (
    DEFAULT_RUN,
    ReplayConfig,
    RunConfig,
    as_config,
    resolve_config,
    use_torch_threads,
)
from rl_lightning.cuda_graphs import UpdateGraphs, count_step
from rl_lightning.data.dataset import StepPacer
from rl_lightning.data.experience import ExperienceSide, collect_from
from rl_lightning.data.rollout import Policy, Rollout
from rl_lightning.envs.make import EnvConfig, check_env_id, env_spaces, make_vector_env, seeds_each_sub_env
from rl_lightning.errors import ConfigError, check
from rl_lightning.evaluation import env_actions, eval_seeds, log_evaluation, log_member_aggregate, play_episodes
from rl_lightning.export import export_policy
from rl_lightning.networks.encoders import has_images
from rl_lightning.networks.population import (
    PopulationAdam,
    members_replaced,
)
from rl_lightning.optim import anneal_linearly, fused_allowed, make_adam, plain_gradient_step
from rl_lightning.seeding import draw_env_seed, separate_ranks
from rl_lightning.training_log import log_training, should_log

MAX_ENV_RESTARTS = 3  # consecutive failed collection attempts restarted before giving up


class RLModule(PopulationMembers, L.LightningModule):
    """Base class of all algorithms. What an algorithm provides (docs/adding_an_algorithm.md walks
    through one): ``__init__`` (``super().__init__(env, run)``, ``configure_replay`` off-policy, then
    ``env_steps_per_iteration`` and its checks), ``build_networks``, ``build_experience``, ``forward``,
    ``training_step`` (collect, ``run_update``, ``log_training``), ``configure_optimizers`` (``adam``),
    and the class attributes below. With a Box action space the module has float32 buffers
    ``action_low`` and ``action_high`` (not saved).

    Args:
        env: Which environment to train and evaluate on (``EnvConfig``).
        run: Budget and evaluation rhythm (``RunConfig``).
    """

    action_spaces: tuple[type[gym.Space], ...] = ()  # the gymnasium action space types it handles
    bounded_actions: bool = False  # Box actions must be 1-D with finite bounds (squashed into them)
    image_observations: bool = True  # has an image encoder for image observations
    # Set where a backward pass reaches only some parameters (actor and critic updated apart): without it
    # DDP silently stops averaging such steps' gradients and the ranks' weights drift apart.
    ddp_find_unused_parameters: bool = False
    checkpointed_attributes: tuple[str, ...] = ()  # plain numbers saved with checkpoints
    trains_populations: bool = False  # builds its networks as Populations and updates with population_step
    # The __init__ arguments whose value may differ between population members (run.population_variants):
    # each enters the update as an (N,) tensor (member_hparam).
    member_hyperparameters: tuple[str, ...] = ()
    # Boolean __init__ arguments that, set, keep a population from being trained (state the members would
    # share: normalization statistics, exploration matrices, priorities): refused in one line, and
    # `rl-lightning tune --seeds` runs such a config one seed at a time.
    population_excludes: tuple[str, ...] = ()
    env_steps_per_iteration: int  # env steps one rank collects per rollout or collection phase
    iterations_per_step: int = 1  # rollouts or phases per training step

    def __init__(self, env: EnvConfig | None = None, run: RunConfig = DEFAULT_RUN) -> None:
        super().__init__()
        # The calling algorithm's __init__ arguments (Lightning walks the frames up to it).
        self.save_hyperparameters()
        self.automatic_optimization = False  # several updates, and several optimizers, per training step
        self.env_config = as_config(EnvConfig, env)
        self.run_config = resolve_config(type(self), "run", run)  # the algorithm's defaults filled in
        self.total_env_steps = self.run_config.total_env_steps
        self.env_steps_per_epoch = self.run_config.env_steps_per_epoch
        self.eval_episodes = self.run_config.eval_episodes
        self.env_steps = 0  # global: all ranks together
        self.env_restarts = 0  # this rank's, with env.restart_on_failure
        self.graphs = UpdateGraphs()  # updates as CUDA graphs, once enable_cuda_graphs is called
        self.plain_steps = False  # gradient_step without Lightning's hooks: set per fit (on_fit_start)
        self.envs: gym.vector.VectorEnv | None = None
        self.replay_config: ReplayConfig | None = None  # off-policy algorithms: configure_replay
        self.experience: ExperienceSide[Any] | None = None  # build_experience, with the networks
        self.eval_return = MeanMetric()
        self.eval_length = MeanMetric()
        self.run_config.check()
        self.env_config.check()
        self.init_population()  # self.population: 1 for a plain run (PopulationMembers)

    def configure_replay(self, replay: ReplayConfig | dict | None) -> None:
        """For an off-policy algorithm's ``__init__``: its replay config, resolved and checked; an
        iteration is then one collection phase."""
        self.replay_config = resolve_config(type(self), "replay", replay)
        self.replay_config.check(self.total_env_steps)
        self.env_steps_per_iteration = self.replay_config.train_freq * self.env_config.num_envs
        self.iterations_per_step = self.replay_config.phases_per_step

    # ----------------------------------------------------------------------------------- set-up
    def setup(self, stage: str) -> None:
        check_env_id(self.env_config.env_id, self.env_config.backend)
        strategy = self._trainer.strategy if self._trainer is not None else None  # None: called by hand
        self._threads_before = use_torch_threads()  # here, whatever was imported first (see config.py)
        if stage == "fit":
            if self.env_config.seed is None and not self.run_config.population_seeds:
                self.env_config.seed = draw_env_seed(strategy)  # given seeds: each member's run draws its own
            # The device is final here (Lightning moves the module there after setup): a torch-backend
            # env is built on it, so rollouts never leave it.
            device = strategy.root_device if strategy else self.device
            world = self.trainer.world_size if strategy is not None else 1
            if self.population > 1 and world > 1 and self.run_config.population_ddp == "split":
                self.split_members(self.global_rank, world)
                # Nothing to average across ranks: no DDP wrapper (Lightning has no public switch for it;
                # tests/test_lightning_private.py fails if it renames the method).
                strategy.configure_ddp = lambda: None
            # A population's members share one vector env: member k's sub-envs are the num_envs from k * num_envs.
            self.envs = make_vector_env(self.env_config, self.env_config.num_envs * self.population, device=device)
            self._build(self.envs.structured_observation_space, self.envs.single_action_space)
        else:
            self.build_for_env()
        if strategy is not None:
            prepare_checkpoints(self.trainer)  # atomic, weights-only, replay side files, no stale temporaries
        if stage == "fit" and strategy is not None and self.trainer.world_size > 1:
            separate_ranks(strategy, self.rank_seed, self.ddp_find_unused_parameters)

    def build_for_env(self) -> tuple[gym.Space, gym.Space]:
        """Build the networks (once) from the spaces of the env, made to read them; returns the spaces."""
        spaces = env_spaces(self.env_config)
        self._build(*spaces)
        return spaces

    def _build(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        if getattr(self, "_built", False):
            return
        check_spaces(type(self), observation_space, action_space, self.env_config.env_id)
        if isinstance(action_space, gym.spaces.Box):
            # Not persistent: derived from the env, so checkpoints hold only what training changes.
            for key, bound in (("action_low", action_space.low), ("action_high", action_space.high)):
                self.register_buffer(key, torch.as_tensor(bound, dtype=torch.float32), persistent=False)
        self.observation_space, self.action_space = observation_space, action_space
        self.build_networks(observation_space, action_space)
        self.experience = self.build_experience()
        self._built = True

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """Build the networks for one sub-env's spaces (observations as the env returns them, structured)."""
        raise NotImplementedError

    def build_experience(self) -> ExperienceSide[Any]:
        """The experience side (after the networks: it may share their normalization statistics)."""
        raise NotImplementedError

    def compile_networks(self, **compile_kwargs: Any) -> None:
        """``torch.compile`` the networks in place for the ``CompileNetworks`` callback (``compile_children``)."""
        check(self.population == 1, "A population (run.population > 1) does not run compiled; leave compile off.")
        compile_children(self, **compile_kwargs)

    def teardown(self, stage: str) -> None:
        if stage == "fit":
            torch.set_flush_denormal(False)  # back to the default (see on_fit_start)
        if hasattr(self, "_threads_before"):
            torch.set_num_threads(self._threads_before)  # the caller's torch work keeps its own threads
        if self.envs is not None:
            self.envs.close()
            self.envs = None
        if self.experience is not None:
            self.experience.stop()

    @property
    def rank_seed(self) -> int:
        """Seed for this rank's first training sub-env at this point of the run: ranks never share env
        seeds, and a resumed run (``env_steps > 0``) starts new episodes rather than replaying the first."""
        sub_envs = self.env_config.num_envs * self.population  # a population's: all its members'
        # Members split across ranks: this rank's first member's seed (its own run's) is already its own.
        return self.member_env_seeds[0] + self.data_parallel_rank * sub_envs + self.env_steps

    @property
    def training_env_seed(self) -> int | list[int]:
        """What this rank's training envs are reset with as collection starts (``collect_from``; new
        episodes after each env restart): ``rank_seed``, sub-env ``i`` getting ``rank_seed + i``. A population
        of given seeds (``run.population_seeds``): one seed per sub-env, member ``k``'s sub-env ``e`` getting
        what its own run's would, ``member_env_seeds[k] + rank * num_envs + env_steps + e`` (the torch
        backend seeds its batch's one generator: with member 0's)."""
        restarts = 1_000_003 * self.env_restarts
        if not self.run_config.population_seeds or not seeds_each_sub_env(self.envs):
            return self.rank_seed + restarts
        num_envs = self.env_config.num_envs
        offset = self.data_parallel_rank * num_envs + self.env_steps + restarts
        return [seed + offset + e for seed in self.member_env_seeds for e in range(num_envs)]

    # ------------------------------------------------------------------------------- collection
    def train_dataloader(self) -> DataLoader:
        iterations = math.ceil(self.env_steps_per_epoch / (self.env_steps_per_iteration * self.data_parallel_ranks))
        return DataLoader(StepPacer(iterations, self.iterations_per_step), batch_size=None)

    def within_budget(self, iterations: int) -> Iterator[int]:
        """``range(iterations)``, cut short once the budget is spent (after at least one iteration):
        a training step stops where one iteration per step would have."""
        for i in range(iterations):
            if i > 0 and self.env_steps >= self.total_env_steps:
                return
            yield i

    def collect_rollout(self, policy: Policy) -> Rollout:
        """One rollout of ``policy`` (``Rollouts``; env faults named, envs restarted: ``collect_from``)."""
        return collect_from(self, policy, MAX_ENV_RESTARTS)

    def collect_phase(self, act: Callable[[Tensor], Tensor]) -> int:
        """One collection phase into the replay buffer (``Replay``) with ``act(obs) -> actions``; returns the
        env steps it took (all ranks, the random warm-up included)."""
        before = self.env_steps
        collect_from(self, act, MAX_ENV_RESTARTS)
        return self.env_steps - before

    # --------------------------------------------------------------------------- training loop
    def on_fit_end(self) -> None:
        self.unite_members()  # members split across ranks: every rank holds all of them again

    def on_fit_start(self) -> None:
        # Denormal floats (Adam's moments of dead ReLU units) are tens of times slower on x86 and noise to
        # any RL loss: flushed on the training thread while fitting (docs/benchmarks.md, "Denormals").
        torch.set_flush_denormal(True)
        self.plain_steps = not lightning_steps_needed(self.trainer, self)
        self._last_time, self._last_env_steps = time.perf_counter(), self.env_steps
        if self.device.type == "cpu" and "bf16" in str(self.trainer.precision) and not cpu_computes_bfloat16():
            rank_zero_warn(
                f"precision={self.trainer.precision!r} on a CPU without bfloat16 instructions (oneDNN needs AVX512 "
                "or AMX; this one has " + torch.backends.cpu.get_cpu_capability() + "): every bfloat16 product is "
                "emulated, and SAC's and TD3's updates ran 12x slower than in float32 on such a CPU. Use "
                "--trainer.precision 32-true here; bf16-mixed pays on CPUs with AVX512-BF16 or AMX, and on GPUs."
            )

    def on_train_start(self) -> None:
        if self.variants:  # once, so that each member's curves can be told apart by its values
            values = {f"member_{k}/hp/{n}": v[k] for n, v in self.variants.items() for k in range(self.population_size)}
            for logger in self.loggers:
                logger.log_metrics(values, step=self.env_steps)
        if self.env_steps >= self.total_env_steps:  # resumed from a run that had spent its budget
            rank_zero_warn(
                f"The budget is spent: {self.env_steps} of run.total_env_steps={self.total_env_steps} env steps. "
                "Nothing to train; raise run.total_env_steps to train further."
            )
            self.trainer.should_stop = True

    def configure_callbacks(self) -> list[Callback]:
        # A module's callbacks replace the trainer's of their type: keep a DivergenceCheck the user configured.
        configured = any(isinstance(callback, DivergenceCheck) for callback in self.trainer.callbacks)
        return [PreemptionExitCode(), *([] if configured else [DivergenceCheck()])]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.population > 1:
            self._reported_diverged = report_diverged_members(self, self._reported_diverged)
        if self.env_steps >= self.total_env_steps:
            self.trainer.should_stop = True  # Lightning runs validation once more, then ends fit

    def should_log(self) -> bool:
        """True on the training steps whose metrics reach the logger (``Trainer(log_every_n_steps)``)."""
        return should_log(self.trainer)

    def log_training(self, metrics: dict[str, Tensor | float]) -> None:
        """Log a step's metrics, episode statistics and throughput against env steps (``training_log``)."""
        log_training(self, metrics, self.experience.pop_episode_stats(with_sub_envs=self.population > 1))

    def enable_cuda_graphs(self) -> None:
        """Run every update (``run_update``) as a CUDA graph from now on; called by the ``CUDAGraphs``
        callback before the optimizers are built (they must be capturable)."""
        check(self.population == 1, "A population (run.population > 1) does not run as CUDA graphs; leave them off.")
        self.graphs.enabled = True

    def run_update(self, update: Callable[..., Any], *inputs: Tensor) -> Any:
        """One update: ``update(*inputs)`` (tensors in; losses, ``gradient_step`` calls and tensors
        out), run as it is, or with CUDA graphs on, captured once per input shapes and replayed
        (``rl_lightning.cuda_graphs``; eager on CPU). What it returns is valid until the next call."""
        return self.graphs.run(update, *inputs) if self.graphs.enabled else update(*inputs)

    def gradient_step(self, optimizer: Any, loss: Tensor, max_grad_norm: float | None = None) -> None:
        """One optimizer step in manual optimization, the documented way (``zero_grad``,
        ``manual_backward``, ``clip_gradients``, ``step``), so precision plugins and DDP apply; with CUDA
        graphs, the same in plain torch (Lightning's Python hooks could not run on a graph's replays), and so
        where nothing needs Lightning's path (``lightning_steps_needed``): its hooks and plumbing cost ~0.3-0.5 ms
        per optimizer step (``benchmarks/lightning_overhead.py``), ~4 % of a SAC or QR-DQN fit."""
        if self.graphs.enabled:
            plain_gradient_step(optimizer.optimizer, loss, max_grad_norm)
            return self.graphs.stepped(optimizer)  # counted on every replay
        if self.plain_steps:
            plain_gradient_step(optimizer.optimizer, loss, max_grad_norm)
            return count_step(optimizer)
        optimizer.zero_grad()
        self.manual_backward(loss)
        if max_grad_norm is not None:
            self.clip_gradients(optimizer, gradient_clip_val=max_grad_norm, gradient_clip_algorithm="norm")
        optimizer.step()

    def adam(self, params: Any, lr: float, eps: float = 1e-8, clipped: bool = True) -> torch.optim.Adam:
        """Adam, fused unless gradients are clipped under mixed precision (see ``make_adam``); a population's
        ``PopulationAdam`` (one Adam per member)."""
        if self.population > 1:
            return PopulationAdam(params, lr, eps=eps)
        precision = str(self.trainer.precision) if self._trainer is not None else "32-true"
        return make_adam(params, lr, eps, fused=fused_allowed(precision, clipped), capturable=self.graphs.enabled)

    def anneal_learning_rate(self, optimizer: torch.optim.Optimizer, start: float | Tensor) -> None:
        """Learning rate decays linearly from ``start`` to 0 over ``total_env_steps`` (``(N,)``: each
        population member's from its own)."""
        anneal_linearly(optimizer, start, self.total_env_steps, self.env_steps)

    # ------------------------------------------------------------------------------- evaluation
    def val_dataloader(self) -> DataLoader:
        # One batch per rank: the seeds of the evaluation episodes this rank plays.
        # Members split across ranks: each rank plays every episode with its own members.
        seeds = eval_seeds(self.env_config, self.eval_episodes, self.data_parallel_rank, self.data_parallel_ranks)
        return DataLoader([seeds], batch_size=None)

    test_dataloader = val_dataloader  # the same episodes, logged as test/...

    def validation_step(self, seeds: list[int], batch_idx: int) -> None:
        log_evaluation(self, seeds, "val")

    def test_step(self, seeds: list[int], batch_idx: int) -> None:
        log_evaluation(self, seeds, "test")

    def play_episodes(self, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """One deterministic episode per seed (``act_in_env``), all at once: returns and lengths. A
        population plays them with every member, each on its own run's seeds (member-major order)."""
        self.start_episodes()
        offsets = [seed - (self.env_config.seed or 0) for seed in self.member_env_seeds] if self.population > 1 else [0]
        seeds = [s + offset for offset in offsets for s in seeds]
        return play_episodes(self.act_in_env, self.env_config, seeds, self.device)

    def start_episodes(self) -> None:
        """Evaluation is about to play new episodes from their first step (``play_episodes``, videos): a
        policy that carries a memory from call to call forgets it here. Nothing to forget by default."""

    def on_validation_epoch_end(self) -> None:
        if self.population > 1:
            log_member_aggregate(self, "val")

    def on_test_epoch_end(self) -> None:
        if self.population > 1:
            log_member_aggregate(self, "test")

    def act_in_env(self, obs: Tensor) -> Tensor:
        """The actions evaluation, videos and exported policies play (``evaluation.env_actions``)."""
        return env_actions(self, obs)

    def export_policy(self, path: str | Path | None = None, member: int | None = None) -> torch.export.ExportedProgram:
        """The evaluation policy as a ``torch.export`` program that runs with torch alone (``export_policy``);
        of a population, member ``member``'s, a plain single policy."""
        if self.population == 1:
            return export_policy(self, path)
        if member is None or not 0 <= member < self.population:
            raise ConfigError(f"Export one member of the population: member=k with 0 <= k < {self.population}.")
        with members_replaced(self, member):
            return export_policy(self, path)

    # ------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_module_state(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_module_state(self, checkpoint)

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls, checkpoint_path: str | Path, map_location: Any = None, weights_only: bool | None = True, **kwargs: Any
    ) -> RLModule:
        """Lightning's ``load_from_checkpoint`` for a path or a URL, always with ``weights_only=True``: a
        checkpoint never runs code (``rl_lightning.checkpointing.load_module``)."""
        lightning_load = super().load_from_checkpoint
        return load_module(cls, lightning_load, checkpoint_path, map_location, weights_only, **kwargs)


# The hooks Lightning calls around each optimizer step in manual optimization (and the module's ``backward``).
STEP_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


def lightning_steps_needed(trainer: L.Trainer, module: L.LightningModule) -> bool:
    """Whether ``gradient_step`` must run through Lightning's ``manual_backward`` and ``LightningOptimizer.step``:
    under a strategy other than one device's (DDP syncs gradients there), a precision plugin other than full
    precision (loss scaling, ...), a profiler (which times those hooks and the step), or where a callback or the
    module overrides a hook Lightning calls there."""

    def overrides(obj: Any, base: type, names: tuple[str, ...]) -> bool:
        return any(getattr(type(obj), name) is not getattr(base, name) for name in names)

    return (
        type(trainer.strategy) is not SingleDeviceStrategy
        or type(trainer.precision_plugin) is not Precision
        or not isinstance(trainer.profiler, PassThroughProfiler)
        or overrides(module, L.LightningModule, (*STEP_HOOKS, "backward"))
        or any(overrides(callback, Callback, STEP_HOOKS) for callback in trainer.callbacks)
    )


def cpu_computes_bfloat16() -> bool:
    """Whether oneDNN runs bfloat16 products on this CPU in its own instructions (AVX512 or AMX) rather than
    emulating them (AVX2 and older). True where torch cannot tell."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def check_spaces(algorithm: type[RLModule], observation_space: gym.Space, action_space: gym.Space, env_id: str) -> None:
    """Refuse, with the way forward, spaces ``algorithm`` cannot train on: an action space it does not
    handle (naming the algorithms that do), images without an image encoder, unbounded Box actions
    for an algorithm that squashes into the bounds."""
    name = algorithm.__name__
    if not isinstance(action_space, algorithm.action_spaces):
        handles = [s.__name__ for s in algorithm.action_spaces]
        others = sorted(c.__name__ for c in _algorithms() if isinstance(action_space, c.action_spaces))
        hint = f" For {type(action_space).__name__} actions use {', '.join(others)}." if others else ""
        raise ConfigError(
            f"{name} cannot handle the action space {action_space} of {env_id!r}; it supports {handles}.{hint}"
        )
    if not algorithm.image_observations and has_images(observation_space):
        others = sorted(c.__name__ for c in _algorithms() if c.image_observations)
        raise ConfigError(
            f"{name} has no image encoder (its networks are MLPs on flat observations), and {env_id!r} observes "
            f"images ({observation_space}). Use {', '.join(others)} (Nature or MinAtar CNN), or give it flat "
            "observations."
        )
    box = isinstance(action_space, gym.spaces.Box)
    if algorithm.bounded_actions and box and not (len(action_space.shape) == 1 and action_space.is_bounded("both")):
        raise ConfigError(
            f"{name} needs a 1-D Box action space with finite bounds (actions are squashed into them), got "
            f"{action_space} of {env_id!r}; wrap the env with gymnasium's ClipAction/RescaleAction."
        )


def _algorithms() -> list[type[RLModule]]:
    """The algorithms rl_lightning ships (for error messages that point to the right one)."""
    found, todo = [], list(RLModule.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if cls.__module__.startswith("rl_lightning.algorithms."):
            found.append(cls)
    return found
