"""``RLModule``: what Lightning needs from every algorithm, and nothing more.

- Envs are built in ``setup`` (never in ``__init__``, which stays cheap and picklable for the CLI
  and DDP), seeded per rank, closed in ``teardown``.
- The data loader only paces Lightning's training steps (``ExperienceDataset``): each training step
  collects its own experience through ``collect_rollout`` or ``collect_phase``, the one place where
  env faults are named, then updates. Every DDP rank runs the same number of steps.
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

import contextlib
import math
import pickle
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric, Metric

from rl_lightning.callbacks.divergence import DivergenceCheck
from rl_lightning.callbacks.preemption import PreemptionExitCode
from rl_lightning.checkpointing import (
    hyperparameter_changes,
    install_atomic_checkpoints,
    install_replay_side_files,
    local_copy,
    plain_hyperparameters,
    read_checkpoint,
    refusal,
    remove_stale_temporaries,
    rng_state,
    set_rng_state,
)
from rl_lightning.config import DEFAULT_RUN, ConfigT, RunConfig, as_config, resolve_config, torch_threads
from rl_lightning.cuda_graphs import GraphedUpdate
from rl_lightning.data.dataset import ExperienceDataset
from rl_lightning.data.replay import Replay, ReplayConfig
from rl_lightning.data.rollout import Policy, Rollout, Rollouts
from rl_lightning.envs.make import EnvConfig, check_env_id, make_vector_env
from rl_lightning.envs.spaces import to_env_actions_tensor
from rl_lightning.errors import CollectionError, ConfigError, naming_env_faults
from rl_lightning.evaluation import eval_seeds, play_episodes
from rl_lightning.export import export_policy
from rl_lightning.networks.encoders import has_images
from rl_lightning.networks.utils import make_adam

MAX_ENV_RESTARTS = 3  # consecutive failed collection attempts restarted before giving up


class RLModule(L.LightningModule):
    """Base class of all algorithms; see the module docstring.

    An algorithm sets ``action_spaces`` (the gymnasium action space types it handles), implements
    ``build_networks`` (which also builds its rollout or replay side: ``self.rollouts`` or
    ``self.replay``), ``forward(obs, deterministic=True) -> env actions``, ``training_step(iterations,
    batch_idx)`` and ``configure_optimizers``, and sets in ``__init__`` ``env_steps_per_iteration``
    (env steps one rank collects per rollout or phase) and ``iterations_per_step``. With a Box action
    space the module has float32 buffers ``action_low`` and ``action_high`` (not saved).

    ``ddp_find_unused_parameters``: an algorithm whose backward passes each reach only some of its
    parameters (actor and critic updated separately) sets it, and the base asks DDP for it; without
    it DDP silently stops averaging such steps' gradients and the ranks' weights drift apart.

    Args:
        env: Which environment to train and evaluate on (``EnvConfig``).
        run: Budget and evaluation rhythm (``RunConfig``).
    """

    action_spaces: tuple[type[gym.Space], ...] = ()
    bounded_actions: bool = False  # Box actions must be 1-D with finite bounds (squashed into them)
    image_observations: bool = True  # has an image encoder for image observations
    ddp_find_unused_parameters: bool = False
    checkpointed_attributes: tuple[str, ...] = ()  # plain numbers saved with checkpoints
    env_steps_per_iteration: int
    iterations_per_step: int = 1

    def __init__(self, env: EnvConfig | None = None, run: RunConfig = DEFAULT_RUN) -> None:
        super().__init__()
        # The calling algorithm's __init__ arguments (Lightning walks the frames up to it).
        self.save_hyperparameters()
        self.automatic_optimization = False  # several updates, and several optimizers, per training step
        self.env_config = as_config(EnvConfig, env)
        self.run_config = self.resolve_config("run", run)
        self.total_env_steps = self.run_config.total_env_steps
        self.env_steps_per_epoch = self.run_config.env_steps_per_epoch
        self.eval_episodes = self.run_config.eval_episodes
        self.env_steps = 0  # global: all ranks together
        self.env_restarts = 0  # this rank's, with env.restart_on_failure
        self.cuda_graphs = False  # updates as CUDA graphs (the CUDAGraphs callback: enable_cuda_graphs)
        self._graphed: dict[str, GraphedUpdate] = {}
        self._stepped: list[Any] = []  # the optimizers the running update stepped (CUDA-graph updates)
        self._steps_of: dict[str, list[Any]] = {}  # ... and those each update steps, for its replays
        self.envs: gym.vector.VectorEnv | None = None
        self.replay_config: ReplayConfig | None = None  # off-policy algorithms: configure_replay
        self.rollouts: Rollouts | None = None  # on-policy algorithms' rollout side
        self.replay: Replay | None = None  # off-policy algorithms' replay side
        self.eval_return = MeanMetric()
        self.eval_length = MeanMetric()
        self.run_config.check()
        self.env_config.check()

    def configure_replay(self, replay: ReplayConfig | dict | None) -> None:
        """For an off-policy algorithm's ``__init__``: its replay config, resolved and checked; an
        iteration is then one collection phase."""
        self.replay_config = self.resolve_config("replay", replay)
        self.replay_config.check(self.total_env_steps)
        self.env_steps_per_iteration = self.replay_config.train_freq * self.env_config.num_envs
        self.iterations_per_step = self.replay_config.phases_per_step

    def resolve_config(self, name: str, value: ConfigT | dict | None) -> ConfigT:
        """The config given for argument ``name``, with the algorithm's defaults (``resolve_config``)."""
        return resolve_config(type(self), name, value)

    # ----------------------------------------------------------------------------------- set-up
    def setup(self, stage: str) -> None:
        check_env_id(self.env_config.env_id, self.env_config.backend)
        strategy = self._trainer.strategy if self._trainer is not None else None  # None: called by hand
        # Chosen here, not at import: torch's intra-op pool is sized when torch is imported, which a
        # script may do before importing rl_lightning (a 2-core machine then ran PPO 24x slower).
        self._threads_before = torch.get_num_threads()
        torch.set_num_threads(torch_threads())
        if stage == "fit":
            if self.env_config.seed is None:
                # Drawn from torch's RNG, so seed_everything makes the envs reproducible too. Rank 0's
                # draw for all ranks: rank offsets (rank_seed) keep env seeds distinct, eval seeds agree.
                seed = int(torch.randint(0, 2**31 - 1, ()).item())
                self.env_config.seed = int(strategy.broadcast(seed, src=0)) if strategy else seed
            # The device is final here (Lightning moves the module there after setup): a torch-backend
            # env is built on it, so rollouts never leave it.
            self.envs = make_vector_env(self.env_config, device=strategy.root_device if strategy else self.device)
            self._build(self.envs.structured_observation_space, self.envs.single_action_space)
        else:
            self.build_for_env()
        if strategy is not None:
            install_atomic_checkpoints(self.trainer)  # a full disk never costs the last good checkpoint
            if self.trainer.is_global_zero:  # what a kill in the middle of a save left behind
                for callback in self.trainer.checkpoint_callbacks:
                    if getattr(callback, "dirpath", None):
                        remove_stale_temporaries(callback.dirpath)
            if self.replay is not None and self.replay.config.save_replay_buffer:
                install_replay_side_files(self.trainer)  # large buffers go next to the checkpoint
        if stage == "fit" and strategy is not None and self.trainer.world_size > 1:
            # seed_everything gave every rank the same RNG state, hence the same exploration noise:
            # reseed per rank once the networks exist (DDP then broadcasts rank 0's initial weights).
            torch.manual_seed(self.rank_seed)
            np.random.seed(self.rank_seed % 2**32)
            random.seed(self.rank_seed)
            if self.ddp_find_unused_parameters and isinstance(strategy, DDPStrategy):
                # Lightning keeps the DDP constructor's kwargs here until it wraps the module (after setup).
                strategy._ddp_kwargs.setdefault("find_unused_parameters", True)

    def build_for_env(self) -> tuple[gym.Space, gym.Space]:
        """Build the networks from the spaces of the env (made once to read them), if not built yet;
        returns the observation and action space of one sub-env."""
        envs = make_vector_env(self.env_config, num_envs=1)
        try:
            spaces = envs.structured_observation_space, envs.single_action_space
        finally:
            envs.close()
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
        self._built = True

    def build_networks(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        raise NotImplementedError

    def compile_networks(self, **compile_kwargs: Any) -> None:
        """``torch.compile`` the networks in place (parameter names and checkpoints unchanged); what the
        ``CompileNetworks`` callback calls. ``nn.Module.compile`` covers ``forward`` only, so a network
        used through other methods overrides ``compile`` to cover them (``ActorCritic`` does)."""
        if getattr(self, "_networks_compiled", False):  # a second fit with the same module
            return
        for child in self.children():
            if not isinstance(child, Metric):
                child.compile(**compile_kwargs)
        self._networks_compiled = True

    def teardown(self, stage: str) -> None:
        if stage == "fit":
            torch.set_flush_denormal(False)  # back to the default (see on_fit_start)
        if hasattr(self, "_threads_before"):
            torch.set_num_threads(self._threads_before)  # the caller's own torch work keeps its threads
        if self.envs is not None:
            self.envs.close()
            self.envs = None
        for side in (self.rollouts, self.replay):
            if side is not None:
                side.stop()

    @property
    def rank_seed(self) -> int:
        """Seed for this rank's first training sub-env at this point of the run: ranks never share env
        seeds, and a resumed run (``env_steps > 0``) starts new episodes rather than replaying the first."""
        assert self.env_config.seed is not None
        return self.env_config.seed + self.global_rank * self.env_config.num_envs + self.env_steps

    # ------------------------------------------------------------------------------- collection
    def train_dataloader(self) -> DataLoader:
        iterations = math.ceil(self.env_steps_per_epoch / (self.env_steps_per_iteration * self.trainer.world_size))
        return DataLoader(ExperienceDataset(iterations, self.iterations_per_step), batch_size=None)

    def within_budget(self, iterations: int) -> Iterator[int]:
        """``range(iterations)``, cut short once the budget is spent (after at least one iteration):
        a training step stops where one iteration per step would have."""
        for i in range(iterations):
            if i > 0 and self.env_steps >= self.total_env_steps:
                return
            yield i

    def collect_rollout(self, policy: Policy) -> Rollout:
        """One rollout of ``policy`` from ``self.rollouts`` (PPO, A2C, REINFORCE). With CUDA graphs,
        the policy's acting forward (``act``) is captured too, except with gSDE, whose exploration
        matrices are redrawn from Python; with torch envs, each whole vector step is (the collector's)."""
        self.rollouts.cuda_graphs = self.cuda_graphs  # torch envs: the collector graphs whole vector steps
        if self.cuda_graphs and not self.hparams.get("use_sde", False) and self.env_config.backend != "torch":
            act = self._graphed.get("act") or self._graphed.setdefault("act", GraphedUpdate(policy.act, "act"))
            policy = GraphedPolicy(act, policy.value)
        return self._collect(self.rollouts, policy)

    def collect_phase(self, act: Callable[[Tensor], Tensor]) -> int:
        """One collection phase into ``self.replay`` (DQN, SAC, TD3, DDPG) with ``act(obs) -> actions``;
        returns the env steps it took (all ranks, the random warm-up included)."""
        before = self.env_steps
        self._collect(self.replay, act)
        return self.env_steps - before

    def _collect(self, side: Any, arg: Any) -> Any:
        for attempt in range(MAX_ENV_RESTARTS + 1):
            try:
                with naming_env_faults("Experience collection", self.env_config.env_id, self.env_steps):
                    if not side.started:
                        seed = self.rank_seed + 1_000_003 * self.env_restarts  # new episodes after a restart
                        side.start(self.envs, self.device, seed, self.trainer.world_size)
                    result, vector_steps = side.collect(arg)
                break
            except CollectionError as e:
                if not self.env_config.restart_on_failure or attempt == MAX_ENV_RESTARTS:
                    raise
                self._restart_envs(side, e)
        self.env_steps += vector_steps * self.env_config.num_envs * self.trainer.world_size
        return result

    def _restart_envs(self, side: Any, error: CollectionError) -> None:
        """Replace this rank's envs after a failure (``env.restart_on_failure``)."""
        rank_zero_warn(f"{error} Restarting the envs (env.restart_on_failure).")
        with contextlib.suppress(Exception):  # a dead worker's pipe fails to close cleanly
            self.envs.close(terminate=True) if isinstance(self.envs, gym.vector.AsyncVectorEnv) else self.envs.close()
        side.stop()
        self.env_restarts += 1
        self.envs = make_vector_env(self.env_config, device=self.device)

    # --------------------------------------------------------------------------- training loop
    def on_fit_start(self) -> None:
        # Denormal floats (Adam's moments of ReLU units that stopped getting gradient decay into them)
        # are tens of times slower on x86; below 1.2e-38 they are noise to any RL loss. Flushed on this,
        # the training thread, while fitting (docs/benchmarks.md, "Denormals").
        torch.set_flush_denormal(True)
        self._last_time, self._last_env_steps = time.perf_counter(), self.env_steps

    def on_train_start(self) -> None:
        if self.env_steps >= self.total_env_steps:  # resumed from a run that had spent its budget
            rank_zero_warn(
                f"The budget is spent: {self.env_steps} of run.total_env_steps={self.total_env_steps} env steps. "
                "Nothing to train; raise run.total_env_steps to train further."
            )
            self.trainer.should_stop = True

    def configure_callbacks(self) -> list[Callback]:
        # Lightning lets a module's callbacks replace the trainer's of the same type: add the check only
        # where the user did not configure one (its weight limit, say).
        configured = any(isinstance(callback, DivergenceCheck) for callback in self.trainer.callbacks)
        return [PreemptionExitCode(), *([] if configured else [DivergenceCheck()])]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.env_steps >= self.total_env_steps:
            self.trainer.should_stop = True  # Lightning runs validation once more, then ends fit

    def should_log(self) -> bool:
        """True on the training steps whose metrics reach the logger (``Trainer(log_every_n_steps)``):
        each ``self.log`` costs about as much as a small optimizer step, so the others skip it."""
        every = self.trainer.log_every_n_steps
        return every > 0 and (self.trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % every == 0

    def log_training(self, metrics: dict[str, Tensor | float]) -> None:
        """Log a training step's metrics, plus episode statistics and throughput since the last call,
        against env steps (the x-axis in TensorBoard). Under DDP, one all-reduce: metrics become means
        over ranks, episode statistics means over all ranks' episodes."""
        now = time.perf_counter()
        metrics["time/env_steps_per_second"] = (self.env_steps - self._last_env_steps) / max(
            now - self._last_time, 1e-9
        )
        self._last_time, self._last_env_steps = now, self.env_steps
        returns, lengths = (self.rollouts or self.replay).pop_episode_stats()
        episodes = [float(returns.sum()), float(lengths.sum()), float(len(returns))]
        if self.trainer.world_size > 1:
            keys = list(metrics)
            local = [torch.as_tensor(metrics[k], dtype=torch.float32, device=self.device).reshape(1) for k in keys]
            local.append(torch.tensor(episodes, dtype=torch.float32, device=self.device))
            total = self.trainer.strategy.reduce(torch.cat(local), reduce_op="sum")
            metrics = dict(zip(keys, (total[: len(keys)] / self.trainer.world_size).unbind(), strict=True))
            episodes = total[len(keys) :].tolist()
        if self.env_config.restart_on_failure:
            metrics["rollout/env_restarts"] = float(self.env_restarts)  # a mean over ranks under DDP
        if episodes[2] > 0:
            metrics["rollout/episode_return"] = episodes[0] / episodes[2]
            metrics["rollout/episode_length"] = episodes[1] / episodes[2]
        metrics["time/env_steps"] = metrics["step"] = float(self.env_steps)  # "step": Lightning's x-axis
        self.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        progress = {"env_steps": float(self.env_steps), "steps/s": metrics["time/env_steps_per_second"]}
        if episodes[2] > 0:
            progress["return"] = metrics["rollout/episode_return"]
        self.log_dict(progress, prog_bar=True, logger=False, batch_size=1)

    def enable_cuda_graphs(self) -> None:
        """Run every update (``run_update``) as a CUDA graph from now on; called by the ``CUDAGraphs``
        callback before the optimizers are built (they must be capturable)."""
        self.cuda_graphs = True

    def run_update(self, update: Callable[..., Any], *inputs: Tensor) -> Any:
        """One update: ``update(*inputs)`` (tensors in; losses, ``gradient_step`` calls and tensors
        out), run as it is, or with CUDA graphs on, captured once per input shapes and replayed
        (``rl_lightning.cuda_graphs``; eager on CPU). What it returns is valid until the next call."""
        if not self.cuda_graphs:
            return update(*inputs)
        name = update.__name__
        graphed = self._graphed.get(name) or self._graphed.setdefault(name, GraphedUpdate(update, name))
        replays = graphed.replays
        self._stepped = []
        out = graphed(*inputs)
        if graphed.replays == replays:  # the update's Python ran: it named the optimizers it steps
            self._steps_of[name] = self._stepped
        for optimizer in self._steps_of[name]:  # Lightning counts optimizer steps (global_step) in these hooks
            optimizer._on_before_step()
            optimizer._on_after_step()
        return out

    def gradient_step(self, optimizer: Any, loss: Tensor, max_grad_norm: float | None = None) -> None:
        """One optimizer step in manual optimization, the documented way (``zero_grad``,
        ``manual_backward``, ``clip_gradients``, ``step``), so precision plugins and DDP apply.
        With CUDA graphs, the same steps in plain torch (Lightning's hooks around backward and the
        optimizer step are Python: they could not run on a graph's replays)."""
        if self.cuda_graphs:
            optimizer.zero_grad()
            loss.backward()
            if max_grad_norm is not None:
                params = [p for group in optimizer.param_groups for p in group["params"]]
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.optimizer.step()
            self._stepped.append(optimizer)
            return
        optimizer.zero_grad()
        self.manual_backward(loss)
        if max_grad_norm is not None:
            self.clip_gradients(optimizer, gradient_clip_val=max_grad_norm, gradient_clip_algorithm="norm")
        optimizer.step()

    def adam(self, params: Any, lr: float, eps: float = 1e-8, clipped: bool = True) -> torch.optim.Adam:
        """Adam, fused unless gradients are clipped under mixed precision (see ``make_adam``)."""
        precision = str(self.trainer.precision) if self._trainer is not None else "32-true"
        fused = not (clipped and ("mixed" in precision or precision == "16"))
        return make_adam(params, lr, eps, fused=fused, capturable=self.cuda_graphs)

    def anneal_learning_rate(self, optimizer: torch.optim.Optimizer, start: float) -> None:
        """Learning rate decays linearly from ``start`` to 0 over ``total_env_steps`` (in place where
        it is a tensor: a CUDA graph reads it from there)."""
        for group in optimizer.param_groups:
            lr = start * linear_schedule(1.0, 0.0, self.total_env_steps, self.env_steps)
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    # ------------------------------------------------------------------------------- evaluation
    def val_dataloader(self) -> DataLoader:
        # One batch per rank: the seeds of the evaluation episodes this rank plays.
        seeds = eval_seeds(self.env_config, self.eval_episodes, self.global_rank, self.trainer.world_size)
        return DataLoader([seeds], batch_size=None)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def validation_step(self, seeds: list[int], batch_idx: int) -> None:
        self._evaluate(seeds, "val")

    def test_step(self, seeds: list[int], batch_idx: int) -> None:
        self._evaluate(seeds, "test")

    def _evaluate(self, seeds: list[int], prefix: str) -> None:
        if seeds:
            with naming_env_faults("Evaluation", self.env_config.env_id, self.env_steps):
                returns, lengths = self.play_episodes(seeds)
            self.eval_return.update(torch.as_tensor(returns, dtype=torch.float32, device=self.device))
            self.eval_length.update(torch.as_tensor(lengths, dtype=torch.float32, device=self.device))
        self.log(f"{prefix}/episode_return", self.eval_return, prog_bar=True, batch_size=max(len(seeds), 1))
        self.log(f"{prefix}/episode_length", self.eval_length, batch_size=max(len(seeds), 1))
        if prefix == "val" and not self.trainer.sanity_checking:
            # Same value on every rank; sync_dist only silences Lightning's epoch-level DDP warning.
            self.log("step", float(self.env_steps), batch_size=1, sync_dist=True)
            if self.trainer.state.fn == "fit":  # marks the run as a fit, also one too short to log training
                self.log("time/env_steps", float(self.env_steps), batch_size=1, sync_dist=True)

    def play_episodes(self, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """One deterministic episode per seed (``act_in_env``), all at once: returns and lengths."""
        return play_episodes(self.act_in_env, self.env_config, seeds, self.device)

    def act_in_env(self, obs: Tensor) -> Tensor:
        """The actions evaluation, videos and exported policies play: ``forward``'s deterministic
        actions, clipped to the bounds of a Box action space (PPO's Gaussian mean is unbounded), or
        discrete ones as the env takes them (``Discrete.start``, ``MultiBinary`` bits as integers)."""
        actions = self(obs, deterministic=True)
        if hasattr(self, "action_low"):
            return torch.clamp(actions, self.action_low, self.action_high)
        return to_env_actions_tensor(self.action_space, actions)

    def export_policy(self, path: str | Path | None = None) -> torch.export.ExportedProgram:
        """The evaluation policy as a ``torch.export`` program that runs with torch alone (see
        ``rl_lightning.export.export_policy``)."""
        return export_policy(self, path)

    # ------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = {"env_steps": self.env_steps, "env_seed": self.env_config.seed, "rng": rng_state()}
        state.update({name: getattr(self, name) for name in self.checkpointed_attributes})
        if self.replay is not None and self.replay.config.save_replay_buffer and self.replay.buffer is not None:
            state["replay_buffer"] = self.replay.state_dict()
        checkpoint["rl_lightning"] = state
        # The configs as resolved (the env seed drawn in setup, the algorithm's defaults filled in), so a
        # reload does not depend on the defaults of the code that loads it.
        resolved = {"env": self.env_config, "run": self.run_config, "replay": self.replay_config}
        plain_hyperparameters(checkpoint.get("hyper_parameters", {}), resolved)

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        weights_only: bool | None = True,
        **kwargs: Any,
    ) -> RLModule:
        """Lightning's ``load_from_checkpoint`` for a path or a URL, always with ``weights_only=True``: a
        checkpoint never runs code (``rl_lightning.checkpointing.read_checkpoint``)."""
        if weights_only is False:
            read_checkpoint(checkpoint_path, weights_only=False)  # raises: the refusal, in one line
        with local_copy(checkpoint_path) as local:
            try:
                return super().load_from_checkpoint(local, map_location, hparams_file, strict, True, **kwargs)
            except pickle.UnpicklingError as e:
                raise ConfigError(f"Checkpoint {checkpoint_path}: {refusal(e)}") from None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._trainer is not None:  # resuming or evaluating with this module's own hyperparameters
            changes = hyperparameter_changes(checkpoint.get("hyper_parameters", {}), self._plain_hparams())
            if changes:
                rank_zero_warn(
                    f"The checkpoint was trained with other hyperparameters than this {type(self).__name__}'s "
                    f"(checkpoint -> now): {'; '.join(changes)}. Training and evaluation go on with the new ones."
                )
        state = checkpoint.get("rl_lightning", {})
        self.env_steps = int(state.get("env_steps", 0))
        if "rng" in state:
            set_rng_state(state["rng"])
        if self.env_config.seed is None and state.get("env_seed") is not None:
            self.env_config.seed = int(state["env_seed"])
        for name in self.checkpointed_attributes:
            if name in state:
                setattr(self, name, type(getattr(self, name))(state[name]))
        # load_from_checkpoint calls this before load_state_dict: the networks must exist by then.
        self.build_for_env()
        if state.get("replay_buffer") is not None and self.replay is not None:
            self.replay.load_state_dict(state["replay_buffer"])

    def _plain_hparams(self) -> dict[str, Any]:
        """The hyperparameters as a checkpoint stores them (``on_save_checkpoint``)."""
        hparams = dict(self.hparams)
        resolved = {"env": self.env_config, "run": self.run_config, "replay": self.replay_config}
        plain_hyperparameters(hparams, resolved)
        return hparams


class GraphedPolicy(NamedTuple):
    """A ``Policy`` whose ``act`` is a ``GraphedUpdate`` (its outputs are valid until the next call:
    the collectors copy them at once)."""

    act: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]
    value: Callable[[Tensor], Tensor]


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = duration``, then ``end``."""
    if duration <= 0:
        return end
    return start + (end - start) * min(t / duration, 1.0)


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
            f"images ({observation_space}). Use {', '.join(others)} (Nature CNN), or give it flat observations."
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
