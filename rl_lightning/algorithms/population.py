"""The population side of ``RLModule`` (``run.population``, docs/population.md): which seed each member is,
its hyperparameters where members vary them, building networks as ``Population``s and one optimizer step of
all members; and the checks and reports of populations. A plain run is a population of one: none of this
changes it.

``RLModule`` inherits ``PopulationMembers``; an algorithm that trains populations (``trains_populations``)
builds its networks with ``make_population`` and steps with ``population_step`` (PPO, A2C, the off-policy algorithms).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torchmetrics import MeanMetric

from rl_lightning.config import sample_variant
from rl_lightning.errors import ConfigError, DivergenceError, check
from rl_lightning.networks.population import (
    Population,
    clip_grad_norm_per_member,
    member_learning_rates,
    step_members,
)
from rl_lightning.seeding import draw_env_seed, env_seed_drawn_by


class PopulationMembers:
    """``RLModule``'s population members (a mixin: it reads the module's ``run_config``, ``env_config``,
    ``hparams`` and Lightning's ``manual_backward`` and ``trainer``)."""

    def init_population(self) -> None:
        """In ``RLModule.__init__``: ``population`` (members; 1: a plain run), each member's evaluation
        metric and the frozen (diverged) members, and the checked ``variants``."""
        self.population = self.run_config.members  # this rank's members (split_members)
        self.population_size = self.population  # every rank's
        self.member_offset = 0  # the index of this rank's first member in the population
        if self.population > 1:
            check_population(type(self), self.population)
            for name in type(self).population_excludes:
                check(
                    not self.hparams.get(name, False),
                    f"{name} does not work with run.population={self.population} (the members would share its "
                    "statistics, noise or priorities); set it false or train the seeds as separate runs.",
                )
            # Each member's evaluation return (members split across ranks log gathered means instead).
            self.member_eval_returns = torch.nn.ModuleList(MeanMetric() for _ in range(self.population))
            # Members whose loss or gradients went non-finite: frozen, reported (population_step).
            self.register_buffer("diverged_members", torch.zeros(self.population, dtype=torch.bool))
            self._reported_diverged: Tensor | None = None
        self.variants = check_variants(self, self.run_config.population_variants)
        for name, values in self.variants.items():  # not saved: the config holds them
            self.register_buffer(f"variant_{name}", torch.tensor(values, dtype=torch.float32), persistent=False)

    @property
    def splits_members(self) -> bool:
        """Whether this rank holds only its own block of the population (``split_members``)."""
        return self.population < self.population_size

    @property
    def data_parallel_ranks(self) -> int:
        """The ranks that train the same members, data-parallel (their env steps add up, their gradients are
        averaged): the world, or this rank alone where the members are split across ranks."""
        return 1 if self.splits_members or self._trainer is None else self.trainer.world_size

    @property
    def data_parallel_rank(self) -> int:
        return 0 if self.splits_members else self.global_rank

    @property
    def own_members(self) -> slice:
        """This rank's members' indices in the whole population (all of them unless ``split_members``)."""
        return slice(self.member_offset, self.member_offset + self.population)

    def split_members(self, rank: int, world: int) -> None:
        """Under DDP with ``run.population_ddp: split`` (``setup``, before the envs are built for the members):
        this rank keeps members ``rank * N / world`` to ``(rank + 1) * N / world`` (every member's tensor sliced:
        each has the member dimension first), trains them alone and never exchanges their gradients."""
        size = self.population_size
        local, extra = divmod(size, world)
        check(
            extra == 0 and local >= 2,
            f"run.population={size} does not split over {world} DDP ranks as 2 or more members each "
            f"(run.population_ddp: split): use a multiple of {world} ({2 * world} or more), or set "
            "run.population_ddp: replicate (every rank trains every member).",
        )
        replay = getattr(self, "replay_config", None)
        check(
            replay is None or not replay.save_replay_buffer,
            "replay.save_replay_buffer does not work with a population split across DDP ranks (each rank's buffer "
            "holds its own members' transitions); set it false or run.population_ddp: replicate.",
        )
        self.population, self.member_offset = local, rank * local
        own = self.own_members
        self._resize_members(lambda t: t[own].clone(), size)
        if getattr(self, "_built", False):  # built before the fit (a loaded checkpoint): its experience side too
            self.experience = self.build_experience()

    def unite_members(self) -> None:
        """After a fit whose members were split across ranks (``on_fit_end``, every rank): every rank holds every
        member again (gathered), so that evaluation, export and checkpoints see the whole population."""
        if not self.splits_members:
            return
        self._resize_members(self.gather_members, self.population)
        self.population, self.member_offset = self.population_size, 0

    def _resize_members(self, resize: Callable[[Tensor], Tensor], members: int) -> None:
        """Every tensor of the module with a member dimension of ``members``, through ``resize``: the state dict's
        (a population's are all per member) and the variants'; the ``Population``s' sizes after them."""
        tensors = [t for t in self.state_dict(keep_vars=True).values() if t.dim() and t.shape[0] == members]
        tensors += [getattr(self, f"variant_{name}") for name in self.variants]
        with torch.no_grad():
            for t in tensors:
                t.data = resize(t.data)
        size = len(tensors[0]) if tensors else members
        for module in self.modules():
            if isinstance(module, Population):
                module.size = size

    def gather_members(self, x: Tensor) -> Tensor:
        """This rank's members' ``x`` (member dimension first) as every member's, in member order (every
        rank's block, gathered: a collective); ``x`` itself where this rank holds every member."""
        if not self.splits_members:
            return x
        return self.trainer.strategy.all_gather(x).flatten(0, 1)

    @property
    def member_seeds(self) -> list[int]:
        """Each population member's seed (``seed_everything``): ``run.population_seeds`` where given, else member
        ``k`` is the run with ``env.seed`` and ``seed_everything`` both ``env.seed + k * env.num_envs``
        (its sub-envs seeded from it as the sub-envs of one vector env of all members' sub-envs are;
        docs/population.md). A plain run: its ``env.seed``."""
        if self.run_config.population_seeds:
            return self._own(list(self.run_config.population_seeds))
        seed = self.env_config.seed or 0
        return self._own([seed + k * self.env_config.num_envs for k in range(self.population_size)])

    @property
    def member_env_seeds(self) -> list[int]:
        """Each member's ``env.seed``, its run's: ``member_seeds`` by default; of given seeds, the config's
        ``env.seed`` where it sets one (every run of the config has it), else the one the member's run
        draws (``env_seed_drawn_by``)."""
        if not self.run_config.population_seeds:
            assert self.env_config.seed is not None or self.population > 1
            return self.member_seeds
        if self.env_config.seed is not None:
            return [self.env_config.seed] * self.population
        return self._own([env_seed_drawn_by(seed) for seed in self.run_config.population_seeds])

    def _own(self, per_member: list[Any]) -> list[Any]:
        """Of a list over every member, this rank's members' (``split_members``)."""
        return per_member[self.own_members]

    def make_population(
        self, make: Callable[[], torch.nn.Module], before: Callable[[], Any] | None = None
    ) -> Population:
        """A ``Population`` of the networks ``make()`` builds, member ``k``'s as its run builds them: under
        its seed, after the env seed that run draws where it draws one (``member_env_seeds``) and after
        ``before()``, the networks that run builds first (their draws from the RNG)."""
        draws = bool(self.run_config.population_seeds) and self.env_config.seed is None

        def before_make() -> None:
            if draws:
                draw_env_seed(None)
            if before is not None:
                before()

        return Population(make, self.member_seeds, before_make=before_make)

    def member_hparam(self, name: str) -> Any:
        """The value of the algorithm's hyperparameter ``name`` its update uses: as given, or where the members
        vary it (``run.population_variants``) an ``(N,)`` tensor of their values, on the module's device."""
        return getattr(self, f"variant_{name}") if name in self.variants else getattr(self.hparams, name)

    def members_hparams(self) -> list[dict[str, Any]]:
        """Each member's hyperparameters, ``hparams`` with its values of ``run.population_variants`` (for an
        algorithm's checks: each member's as its own run's); one for a run or a population without variants."""
        if not self.variants:
            return [dict(self.hparams)]
        return [{**self.hparams, **{n: v[k] for n, v in self.variants.items()}} for k in range(self.population)]

    def with_member_learning_rates(self, optimizer: Any) -> Any:
        """``optimizer`` (built with the module's ``learning_rate``), where the members vary it
        (``run.population_variants``) with each member's own (``member_learning_rates``)."""
        lr = self.member_hparam("learning_rate")
        return member_learning_rates(optimizer, lr) if isinstance(lr, Tensor) else optimizer

    # What lets one update read the same for a run and a population (SAC): a run's networks, losses and
    # steps as they are; a population's every member at once, each on its own rows (inputs and outputs
    # member-major, ``(N, B, ...)``).
    def member_rows(self, *fields: Tensor) -> tuple[Tensor, ...]:
        """A sampled batch's fields as the update takes them: a run's as they are; a population's ``(N * B,
        ...)`` rows (``Replay.sample``: member-major) as ``(N, B, ...)``."""
        if self.population == 1:
            return fields
        return tuple(x.unflatten(0, (self.population, -1)) for x in fields)

    def members_call(self, network: torch.nn.Module, method: str, *inputs: Tensor, **options: Any) -> Any:
        """``network.<method>(*inputs, **options)``; of a population, every member's on its own rows
        (``Population.map``; ``options`` go to every member as they are)."""
        if self.population == 1:
            return (network if method == "forward" else getattr(network, method))(*inputs, **options)
        return network.map(lambda member, *xs, **kw: getattr(member, method)(*xs, **kw), *inputs, **options)

    def per_member(self, fn: Callable[..., Any], *inputs: Tensor) -> Any:
        """``fn(*inputs)``, a pure function of tensors (a loss); of a population, ``vmap``-ed over the members:
        ``(N,)`` outputs, each member's of its own inputs (non-tensor arguments go in ``fn``, a closure)."""
        return fn(*inputs) if self.population == 1 else torch.vmap(fn)(*inputs)

    def member_losses(self, fn: Callable[..., tuple[Tensor, Tensor]], *rows: Tensor) -> tuple[Tensor, Tensor]:
        """``fn(*rows) -> (loss, per-row values)``, a pure loss of a batch's rows (DQN's); of a population,
        each member's of its own rows (member-major, ``member_rows``) under ``vmap``: ``(N,)`` losses and the
        per-row values back as rows."""
        if self.population == 1:
            return fn(*rows)
        loss, per_row = torch.vmap(fn)(*self.member_rows(*rows))
        return loss, per_row.flatten(0, 1)

    def members_step(self, optimizer: Any, loss: Tensor, max_grad_norm: float | Tensor | None = None) -> None:
        """``gradient_step`` of a run's loss; of a population's ``(N,)`` member losses, ``population_step``
        (``max_grad_norm``: one for all, or ``(N,)``)."""
        if self.population == 1:
            self.gradient_step(optimizer, loss, max_grad_norm)
        else:
            self.population_step(optimizer, loss, max_grad_norm)

    def member_mean(self, x: Tensor) -> Tensor:
        """The mean of ``x``; of a population's member-major ``x``, each member's (``(N,)``: logged per member)."""
        return x.mean() if self.population == 1 else x.flatten(1).mean(1)

    def population_step(
        self,
        optimizer: Any,
        member_losses: Tensor,
        max_grad_norm: float | Tensor | None = None,
        stepping: Tensor | None = None,
    ) -> Tensor:
        """``gradient_step`` for a population (``PopulationAdam``): one backward of the sum of the ``(N,)``
        ``member_losses`` (members share no parameters: each member's gradients are those of its own loss),
        each member's gradients clipped by their own norm (``max_grad_norm``: one for all, or ``(N,)`` one
        per member), one optimizer step of the members in ``stepping``
        (default all; ``step_members``). A member whose loss or gradient norm is non-finite does not step
        and is frozen from then on (``diverged_members``; reported by index after the training step), so it
        never poisons the others. Returns the sum of the healthy members' losses (what ``training_step`` returns)."""
        finite = member_losses.detach().isfinite() & ~self.diverged_members
        optimizer.zero_grad()
        self.manual_backward(torch.where(finite, member_losses, 0.0).sum())
        if max_grad_norm is not None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            finite &= clip_grad_norm_per_member(params, max_grad_norm).isfinite()
        if self.data_parallel_ranks > 1:  # DDP, every rank training every member: it steps on all of them or none
            finite = self.trainer.strategy.reduce((~finite).float(), reduce_op="sum") == 0
        self.diverged_members |= ~finite
        step_members(optimizer, finite if stepping is None else finite & stepping)
        return torch.where(finite, member_losses.detach(), 0.0).sum()


def check_population(algorithm: type, population: int) -> None:
    """Refuse ``run.population`` > 1 for an algorithm that does not train populations, naming those that do."""
    if not algorithm.trains_populations:
        found, todo = set(), list(PopulationMembers.__subclasses__())  # RLModule and every algorithm under it
        while todo:
            cls = todo.pop()
            todo += cls.__subclasses__()
            if cls.__module__.startswith("rl_lightning.algorithms.") and cls.trains_populations:
                found.add(cls.__name__)
        others = sorted(found)
        raise ConfigError(
            f"{algorithm.__name__} does not train populations (run.population={population}); "
            f"{', '.join(others)} do. Set run.population: 1."
        )


def check_variants(module: PopulationMembers, variants: dict[str, Any]) -> dict[str, list[float]]:
    """``run.population_variants`` checked against ``module``'s arguments: each an argument it has and can vary
    per member (``member_hyperparameters``), with finite numbers; returns each member's values as floats,
    those to sample drawn from each member's seed (``sample_variant``)."""
    algorithm = type(module).__name__
    resolved = {}
    for name, values in variants.items():
        if name not in module.hparams or name in ("env", "run"):
            raise ConfigError(f"run.population_variants: {algorithm} has no argument {name!r}.")
        if name not in module.member_hyperparameters:
            can = ", ".join(module.member_hyperparameters) or "none"
            raise ConfigError(
                f"run.population_variants: {algorithm}'s {name} cannot differ between members (those that can: {can})."
            )
        if isinstance(values, dict):
            check(
                module.env_config.seed is not None or bool(module.run_config.population_seeds),
                f"run.population_variants.{name} draws each member's value from its seed: set env.seed or "
                "run.population_seeds.",
            )
            values = [sample_variant(values, seed, name) for seed in module.member_seeds]
        check(
            all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values),
            f"run.population_variants.{name} must be numbers, got {values!r}.",
        )
        resolved[name] = [float(v) for v in values]
    return resolved


def report_diverged_members(module: PopulationMembers, reported: Tensor | None) -> Tensor:
    """Warn once per member that diverged (``population_step`` froze it), by index; ``DivergenceError``
    once all have. Returns the members reported so far."""
    diverged = module.gather_members(module.diverged_members).clone()  # by member index, every rank's
    new = diverged if reported is None else diverged & ~reported
    if bool(new.any()):
        members = new.nonzero().flatten().tolist()
        if bool(diverged.all()):
            raise DivergenceError(
                f"Every member of the population diverged (the last: {members}) by env step {module.env_steps}. "
                "Lower the learning rate or tighten max_grad_norm."
            )
        rank_zero_warn(
            f"Population member(s) {members} diverged (non-finite loss or gradients) by env step "
            f"{module.env_steps}: frozen at their last finite parameters; the other members train on."
        )
    return diverged


def best_member(module: Any, metrics: dict[str, Any]) -> str | None:
    """A population's member with the highest last evaluation return (``metrics``: the trainer's latest), named
    with its seed, for the line the CLI prints after a fit; ``None`` for a plain run or before any evaluation."""
    members = getattr(module, "population", 1)
    returns = [metrics.get(f"member_{k}/val/episode_return") for k in range(members)]
    if members == 1 or any(r is None for r in returns):
        return None
    k = int(torch.stack([torch.as_tensor(r, dtype=torch.float32) for r in returns]).argmax())
    return (
        f"Best member: {k} (seed {module.member_seeds[k]}), val/episode_return {float(returns[k]):g} at the last "
        f"evaluation; its policy alone: model.export_policy(path, member={k})."
    )
