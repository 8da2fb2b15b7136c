"""Populations: ``N`` independent members of one network (each its own parameters, optimizer state and
seed) held as stacked tensors and run as one batched model with ``torch.func`` (``functional_call`` under
``vmap``), for acting, losses and gradients alike; one optimizer step updates every member.

Generic over any ``nn.Module``: ``Population`` calls any method of the member network (``forward``,
``ActorCritic.act`` / ``evaluate`` / ``value``, ...) with each member's slice of the batch, and ``map``
runs any function of (member network, member inputs) under ``vmap``. The rest is what an algorithm's
update needs to treat each member exactly as a run of its own would be treated:

- ``clip_grad_norm_per_member``: each member's gradients clipped by their own global norm;
- ``PopulationAdam``: Adam over stacked parameters with per-member learning rates, step counts and a
  mask of the members that step (a member that stops its epochs early, or diverged, keeps its
  parameters and moments); ``step_members`` masks any other elementwise optimizer (RMSprop);
- ``members_first`` / ``member_minibatches``: a rollout laid out per member, each member shuffling its
  own transitions;
- ``interquartile_mean``: the aggregate over members that outliers do not dominate.

docs/population.md describes the user-facing feature (``run.population``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map


class _Apply(nn.Module):
    """``fn(module, *args)`` as a module's forward, so ``functional_call`` can run any function (any
    method) of ``module`` with parameters swapped in."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.module, *args)


class Population(nn.Module):
    """``len(seeds)`` members of the network ``make()`` builds, member ``k`` built under
    ``torch.manual_seed(seeds[k])`` (so initialized exactly as a run seeded with ``seeds[k]`` builds it;
    ``before_make()`` first, if given; the global RNG is left as it was), then stacked.

    ``members`` has the network's structure with every parameter and buffer stacked along a leading
    member dimension (``nn.Parameter``s: ``state_dict``, ``.to(device)``, DDP and optimizers see them);
    the network itself is kept on the meta device as the template that ``functional_call`` runs.

    Any method of the network is a method of the population taking the members' inputs stacked in
    member order, ``(N * B, ...)``: they are viewed as ``(N, B, ...)``, each member runs on its ``B``
    rows under ``vmap`` and the outputs come back as ``(N * B, ...)``. Non-tensor arguments go to every
    member as they are. Random draws inside differ between members (``vmap(randomness="different")``):
    one RNG stream for all of them.
    """

    def __init__(
        self, make: Callable[[], nn.Module], seeds: Sequence[int], before_make: Callable[[], Any] | None = None
    ) -> None:
        super().__init__()
        networks = []
        for seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                if before_make is not None:  # the draws the seed's run makes before it builds its networks
                    before_make()
                networks.append(make())
        self.size = len(networks)
        self.members = copy.deepcopy(networks[0])
        for name, _ in networks[0].named_parameters():
            stacked = torch.stack([net.get_parameter(name).detach() for net in networks])
            owner, leaf = _owner(self.members, name)
            owner._parameters[leaf] = nn.Parameter(stacked, requires_grad=owner._parameters[leaf].requires_grad)
        for name, _ in networks[0].named_buffers():
            owner, leaf = _owner(self.members, name)
            owner._buffers[leaf] = torch.stack([net.get_buffer(name) for net in networks])
        # Not a submodule: no parameters of its own, never moved; functional_call swaps each member's in.
        object.__setattr__(self, "_template", _Apply(copy.deepcopy(networks[0]).to("meta")))

    def _tensors(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        params = {f"module.{n}": p for n, p in self.members.named_parameters()}
        buffers = {f"module.{n}": b for n, b in self.members.named_buffers()}
        return params, buffers

    def map(self, fn: Callable[..., Any], *inputs: Tensor, **options: Any) -> Any:
        """``fn(member_network, *member_inputs, **member_options)`` for every member at once (``vmap``):
        ``inputs`` and the outputs (tensors, or tuples of them) have the member dimension first. A tensor
        among ``options`` is ``(N,)`` too, each member getting its own value (a hyperparameter that differs
        between members); any other option goes to every member as it is."""
        params, buffers = self._tensors()
        per_member = {name: value for name, value in options.items() if isinstance(value, Tensor)}
        shared = {name: value for name, value in options.items() if name not in per_member}

        def one_member(
            params: dict[str, Tensor], buffers: dict[str, Tensor], own: dict[str, Tensor], *xs: Tensor
        ) -> Any:
            return functional_call(self._template, (params, buffers), (functools.partial(fn, **shared, **own), *xs))

        return vmap(one_member, randomness="different")(params, buffers, per_member, *inputs)

    def call(self, name: str, *args: Any) -> Any:
        """The network's method ``name`` for every member, tensor arguments ``(N * B, ...)`` in member
        order, outputs likewise."""
        at = [i for i, a in enumerate(args) if isinstance(a, Tensor)]

        def method(network: nn.Module, *tensors: Tensor) -> Any:
            full = list(args)
            for i, x in zip(at, tensors, strict=True):
                full[i] = x
            return getattr(network, name)(*full)

        out = self.map(method, *(args[i].unflatten(0, (self.size, -1)) for i in at))
        return tree_map(lambda t: t.flatten(0, 1), out)

    def per_row(self, name: str, members: Tensor, *inputs: Tensor) -> Any:
        """The network's method ``name`` on rows that each belong to one member (``members[i]``, any
        number of rows per member): every member runs on all the rows and each row keeps its own
        member's output. For a few rows (a collector's truncated sub-envs) this is cheaper than grouping."""
        rows = inputs[0].shape[0]
        out = self.map(
            lambda network, *xs: getattr(network, name)(*xs), *(x.expand(self.size, *x.shape) for x in inputs)
        )
        pick = torch.arange(rows, device=members.device)
        return tree_map(lambda t: t[members, pick], out)

    def forward(self, *args: Any) -> Any:
        return self.call("forward", *args)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            template = self.__dict__.get("_template")
            if template is None or not callable(getattr(type(template.module), name, None)):
                raise
            return functools.partial(self.call, name)

    def member(self, k: int) -> nn.Module:
        """Member ``k`` as a plain network of its own (a copy: export, inspection)."""
        network = copy.deepcopy(self._template.module).to_empty(device=next(self.members.parameters()).device)
        with torch.no_grad():
            for name, p in self.members.named_parameters():
                network.get_parameter(name).copy_(p[k])
            for name, b in self.members.named_buffers():
                owner, leaf = _owner(network, name)
                owner._buffers[leaf] = b[k].clone()
        return network


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return (module.get_submodule(path) if path else module), leaf


def member_view(x: Tensor) -> list[int]:
    """The shape that broadcasts a per-member ``(N,)`` tensor against stacked ``x``."""
    return [-1] + [1] * (x.dim() - 1)


@torch.no_grad()
def clip_grad_norm_per_member(parameters: Sequence[Tensor], max_norm: float | Tensor) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for each member of stacked parameters: member ``k``'s gradients
    are scaled by ``min(1, max_norm / (norm_k + 1e-6))``, ``norm_k`` the global 2-norm over its own
    gradients only (``max_norm``: one for all, or ``(N,)``, each member's own). Returns the ``(N,)`` norms
    before clipping."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1).norm(dim=1)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(member_view(g)).to(g.dtype))
    return norms


class PopulationAdam(torch.optim.Optimizer):
    """Adam (Kingma and Ba 2015, as ``torch.optim.Adam`` computes it) over stacked parameters, the member
    dimension first: Adam is elementwise, so this is ``N`` independent Adams, with what one Adam over the
    stack cannot have: ``lr`` a float or an ``(N,)`` tensor (per-member learning rates), per-member step
    counts (bias corrections), and ``step(members=mask)``, which updates only the members in the
    ``(N,)`` boolean mask: the others keep their parameters, moments and step counts exactly."""

    def __init__(
        self, params: Any, lr: float | Tensor, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, members: Tensor | None = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            for p in params:
                if not self.state[p]:
                    self.state[p]["step"] = torch.zeros(p.shape[0], device=p.device)
                    self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            states = [self.state[p] for p in params]
            stepping = torch.ones_like(states[0]["step"], dtype=torch.bool) if members is None else members
            step = states[0]["step"] + stepping  # the same per-member counts for every parameter
            for state in states:
                state["step"] = step
            # Per-member factors (0 for the members that do not step), broadcast over each parameter.
            lr = torch.as_tensor(group["lr"], dtype=step.dtype, device=step.device).expand_as(step)
            step_size = torch.where(stepping, lr / (1 - beta1**step), 0.0)
            bias_correction2_sqrt = torch.where(step > 0, (1 - beta2**step).sqrt(), 1.0)
            mask = stepping.to(step.dtype)

            def per_member(x: Tensor, ps: list[Tensor] = params) -> list[Tensor]:
                return [x.view(member_view(p)) for p in ps]

            grads = [p.grad for p in params]
            if members is not None:  # the others' gradients may be non-finite (a diverged member): not even 0 * them
                grads = [torch.where(stepping.view(member_view(g)), g, 0.0) for g in grads]
            exp_avgs = [state["exp_avg"] for state in states]
            exp_avg_sqs = [state["exp_avg_sq"] for state in states]
            # m += (1 - beta1) * (g - m) and v += (1 - beta2) * (g^2 - v), for the stepping members only
            torch._foreach_lerp_(exp_avgs, grads, per_member((1 - beta1) * mask))
            torch._foreach_lerp_(exp_avg_sqs, torch._foreach_mul(grads, grads), per_member((1 - beta2) * mask))
            denom = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_div_(denom, per_member(bias_correction2_sqrt))
            torch._foreach_add_(denom, group["eps"])
            updates = torch._foreach_div(exp_avgs, denom)
            torch._foreach_mul_(updates, per_member(step_size))
            torch._foreach_sub_(params, updates)
        return loss


def step_members(optimizer: Any, members: Tensor) -> None:
    """``optimizer.step()`` for the members in the ``(N,)`` mask only. ``PopulationAdam`` masks itself; any
    other elementwise optimizer over stacked parameters (RMSprop, SGD: one over the stack is N independent
    ones) steps every member, then the other members' parameters and state are put back exactly.

    Per-member learning rates (a param group's ``lr`` an ``(N,)`` tensor, ``member_learning_rates``):
    ``PopulationAdam`` reads them itself; another optimizer steps with ``lr = 1`` and each member's
    displacement is then scaled by its own ``lr``, exact for an optimizer whose step is ``lr`` times a
    direction its state does not take from ``lr`` (SGD, RMSprop, with or without momentum)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's wrapper, or the optimizer
    if isinstance(inner, PopulationAdam):
        optimizer.step(members=members)
        return
    lrs = [group["lr"] for group in inner.param_groups]
    per_member_lr = any(isinstance(lr, Tensor) and lr.dim() == 1 for lr in lrs)
    everyone = bool(members.all())
    if everyone and not per_member_lr:
        optimizer.step()
        return
    params = [p for group in inner.param_groups for p in group["params"]]
    # What is put back: the parameters and state of the members that do not step; every parameter as it
    # was before a step at lr = 1 (the displacement each member's lr scales).
    kept = [(p, p.clone()) for p in params]
    if not everyone:
        kept += [(t, t.clone()) for p in params for t in inner.state[p].values() if _stacked_like(t, p)]
    if per_member_lr:
        for group in inner.param_groups:
            group["lr"] = 1.0
    try:
        optimizer.step()
    finally:
        for group, lr in zip(inner.param_groups, lrs, strict=True):
            group["lr"] = lr
    with torch.no_grad():
        if per_member_lr:  # before + lr * (after - before), the step at each member's own lr
            befores = {id(t): before for t, before in kept}
            for group, lr in zip(inner.param_groups, lrs, strict=True):
                for p in group["params"]:
                    p.copy_(torch.lerp(befores[id(p)], p, lr.to(p).view(member_view(p))))
        if not everyone:
            for t, before in kept:
                t.copy_(torch.where(members.view(member_view(t)), t, before))


def member_learning_rates(optimizer: torch.optim.Optimizer, lr: Tensor) -> torch.optim.Optimizer:
    """``optimizer`` with an ``(N,)`` learning rate, one per member, in each param group (a copy of ``lr``
    each: annealing updates it in place): ``PopulationAdam`` and ``step_members`` read it. ``optimizer``
    is one over stacked parameters built with any float ``lr`` (torch's optimizers refuse a vector)."""
    for group in optimizer.param_groups:
        group["lr"] = lr.clone()
    return optimizer


def _stacked_like(t: Any, p: Tensor) -> bool:
    return isinstance(t, Tensor) and t.shape == p.shape


def members_first(x: Tensor, size: int) -> Tensor:
    """A rollout field ``(T, N * E, ...)`` (member ``k``'s sub-envs the ``E`` from ``k * E``) as
    ``(N, T * E, ...)``: member ``k``'s transitions in the order a run of its own flattens its ``(T, E)``
    rollout."""
    return x.unflatten(1, (size, -1)).transpose(0, 1).flatten(1, 2)


def member_minibatches(batch: Sequence[Tensor], num_minibatches: int) -> Iterator[tuple[Tensor, ...]]:
    """One epoch's minibatches of a per-member batch (every field ``(N, S, ...)``): each member shuffles
    its own ``S`` transitions (its own permutation) into ``num_minibatches`` minibatches of ``(N, S /
    num_minibatches, ...)``."""
    size, transitions = batch[0].shape[:2]
    device = batch[0].device
    order = torch.rand(size, transitions, device=device).argsort(dim=1)
    members = torch.arange(size, device=device).unsqueeze(1)
    for idx in order.split(transitions // num_minibatches, dim=1):
        yield tuple(x[members, idx] for x in batch)


def interquartile_mean(values: Tensor) -> Tensor:
    """The mean of the middle half of ``values`` (the 25% lowest and 25% highest left out, as rliable's
    IQM; all of them for fewer than 4)."""
    ordered = values.flatten().sort().values
    cut = len(ordered) // 4
    return ordered[cut : len(ordered) - cut].mean()


@contextlib.contextmanager
def members_replaced(module: nn.Module, k: int) -> Iterator[None]:
    """Within the block, every ``Population`` child of ``module`` is replaced by its member ``k`` (a plain
    network): ``module`` is then member ``k``'s single run (``export_policy(member=k)``)."""
    populations = {name: child for name, child in module.named_children() if isinstance(child, Population)}
    try:
        for name, population in populations.items():
            setattr(module, name, population.member(k))
        yield
    finally:
        for name, population in populations.items():
            setattr(module, name, population)
