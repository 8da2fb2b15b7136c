"""What the on-policy algorithms (PPO, A2C, REINFORCE; PQN, which learns from rollouts too) share beyond
``RLModule``: module-level functions and constants each uses, so no base class stands between them and
``RLModule``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
from torch import Tensor

from rl_lightning.data.rollout import Rollout, RolloutBatch, Rollouts, gae_batch
from rl_lightning.envs.normalize import normalizers
from rl_lightning.errors import check
from rl_lightning.networks.policies import ActorCritic
from rl_lightning.networks.population import members_first
from rl_lightning.validation import at_least

ACTION_SPACES = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)
"""What PPO, A2C and REINFORCE act in: discrete (categorical), multi-discrete (factored categorical),
multi-binary (Bernoulli) and continuous (diagonal Gaussian) actions, through ``ActorCritic``'s heads."""

SHARED_ARGS = {
    "env": "Environment to train on; ``env.num_envs`` sub-envs per rank.",
    "run": "Budget (``total_env_steps``) and evaluation rhythm.",
    "anneal_lr": "Anneal the learning rate linearly to 0 over ``total_env_steps``.",
    "gamma": "Discount factor, in (0, 1].",
    "ent_coef": "Entropy bonus coefficient.",
    "max_grad_norm": "Global gradient-norm clipping threshold.",
    "activation": "Hidden activation of the MLPs.",
    "normalize_obs": "Normalize observations by running mean and std (statistics saved in checkpoints, frozen "
    "outside collection; ``forward`` takes raw observations).",
    "normalize_reward": "Divide rewards by the running std of the discounted return (training only).",
}
"""The descriptions of the hyperparameters that mean the same in each on-policy algorithm."""


def with_shared_args(cls: type) -> type:
    """Complete ``cls``'s ``Args:`` (its docstring's last section) with the ``SHARED_ARGS`` of the
    ``__init__`` parameters it does not describe itself: the CLI's help reads the descriptions from the
    docstring, so every hyperparameter stays described while the text stands here once."""
    doc = inspect.getdoc(cls) or ""
    described = {line.split(":")[0].strip() for line in doc.split("Args:", 1)[-1].splitlines() if ":" in line}
    shared = [name for name in inspect.signature(cls.__init__).parameters if name in SHARED_ARGS]
    cls.__doc__ = doc + "".join(f"\n    {name}: {SHARED_ARGS[name]}" for name in shared if name not in described)
    return cls


def rollout_epochs(module: Any, num_steps: int, update_epochs: int, num_minibatches: int) -> None:
    """For the ``__init__`` of an algorithm that runs ``update_epochs`` passes of ``num_minibatches``
    minibatches over each rollout (PPO, PQN): sets ``module.env_steps_per_iteration`` (one rollout) and
    ``module.minibatch_size``, and checks that the minibatches divide the rollout."""
    module.env_steps_per_iteration = module.env_config.num_envs * num_steps
    module.minibatch_size = module.env_steps_per_iteration // max(num_minibatches, 1)
    at_least("update_epochs", update_epochs, 1)
    at_least("num_minibatches", num_minibatches, 1)
    check(
        module.env_steps_per_iteration % num_minibatches == 0,
        f"num_minibatches={num_minibatches} does not divide the rollout size "
        f"env.num_envs * num_steps = {module.env_config.num_envs} * {num_steps} = {module.env_steps_per_iteration}.",
    )


def actor_critic_forward(module: Any, obs: Tensor, deterministic: bool = True) -> Tensor:
    """Actions for raw observations: the mode of the policy, or a sample. The ``forward`` of PPO, A2C
    and REINFORCE (``forward = actor_critic_forward``): ``module.agent``, an ``ActorCritic``, on the
    observations normalized by ``module.obs_rms`` (``None``: as they are)."""
    return module.agent(obs if module.obs_rms is None else module.obs_rms.normalize(obs), deterministic)


def build_actor_critic(module: Any, observation_space: gym.Space, action_space: gym.Space, **options: Any) -> None:
    """The ``build_networks`` of PPO, A2C and REINFORCE: ``module.agent``, an ``ActorCritic`` of the module's
    ``hidden_sizes`` and ``activation`` (``options``: its other arguments), and the module's observation
    and reward normalizers (``normalize_obs``, ``normalize_reward``)."""
    hp = module.hparams

    def make() -> ActorCritic:
        return ActorCritic(observation_space, action_space, hp.hidden_sizes, hp.activation, **options)

    # A population (run.population): one actor-critic per member, each built as its own run's would be.
    module.agent = make() if module.population == 1 else module.make_population(make)
    module.obs_rms, module.return_rms = normalizers(observation_space, hp.normalize_obs, hp.normalize_reward)


def member_batch(module: Any, batch: RolloutBatch) -> RolloutBatch:
    """A flattened rollout (``gae_batch``) as the update takes it: as it is, or for a population every field
    ``(members, num_steps * num_envs, ...)``, member ``k``'s transitions in its own run's order."""
    if module.population == 1:
        return batch
    steps = module.hparams.num_steps
    return RolloutBatch(*(members_first(x.unflatten(0, (steps, -1)), module.population) for x in batch))


def gae_member_batch(module: Any, rollout: Rollout) -> RolloutBatch:
    """The rollout with GAE advantages and returns (``gae_batch``) of the module's ``gamma`` and ``gae_lambda``,
    as the update takes it (``member_batch``). Members that vary them (``run.population_variants``): each
    member's sub-envs discounted with its own."""
    gamma, gae_lambda = (per_sub_env(module, name) for name in ("gamma", "gae_lambda"))
    return member_batch(module, gae_batch(rollout, gamma, gae_lambda))


def per_sub_env(module: Any, name: str) -> float | Tensor:
    """Hyperparameter ``name`` (``member_hparam``) for a rollout's columns: a float, or each member's value for
    each of its ``num_envs`` sub-envs."""
    value = module.member_hparam(name)
    return value.repeat_interleave(module.env_config.num_envs) if isinstance(value, Tensor) else value


def explained_variance(returns: Tensor, values: Tensor) -> Tensor:
    """1 - Var(returns - values) / Var(returns) over the last dimension: of the whole flattened rollout, or per
    member (``(members, ...)``)."""
    return 1 - (returns - values).var(-1) / returns.var(-1)


def actor_critic_rollouts(module: Any, graph_act: bool = True) -> Rollouts:
    """The rollout side of an on-policy algorithm (``build_experience = actor_critic_rollouts``):
    ``num_steps`` vector steps per rollout, the module's normalizers, ``graph_act`` as ``Rollouts`` takes it."""
    hp = module.hparams
    return Rollouts(hp.num_steps, hp.gamma, module.obs_rms, module.return_rms, graph_act=graph_act)


def rollout_batches(
    module: Any, iterations: int, to_batch: Callable[[Rollout], RolloutBatch]
) -> Iterator[RolloutBatch]:
    """The head of A2C's and REINFORCE's training loop: ``iterations`` rollouts of ``module.agent`` (as
    far as the budget goes), each yielded as ``to_batch(rollout)`` once the learning rate is annealed for
    its update (``anneal_lr``)."""
    hp, opt = module.hparams, module.optimizers()
    for _ in module.within_budget(iterations):
        batch = to_batch(module.collect_rollout(module.agent))
        if hp.anneal_lr:
            module.anneal_learning_rate(opt, module.member_hparam("learning_rate"))
        yield batch
