"""The validators of hyperparameters and config fields, each named for what it checks; and the groups of
arguments several algorithms share. Each raises ``ConfigError`` with a message naming the argument and
its value (``name`` carries a config's prefix: ``run.total_env_steps``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

from rl_lightning.errors import check

# The MLP activations by name (``rl_lightning.networks.mlp`` maps them to modules): here, so that
# arguments are checked without building a network.
Activation = Literal["tanh", "relu", "elu", "silu"]


def positive(name: str, value: float) -> None:
    """``value > 0``."""
    check(value > 0, f"{name} must be > 0, got {value}.")


def non_negative(name: str, value: float) -> None:
    """``value >= 0``."""
    check(value >= 0, f"{name} must be >= 0, got {value}.")


def at_least(name: str, value: float, minimum: float) -> None:
    """``value >= minimum`` (counts: ``at_least("num_steps", num_steps, 1)``)."""
    check(value >= minimum, f"{name} must be >= {minimum}, got {value}.")


def positive_or_none(name: str, value: float | None) -> None:
    """``value > 0``, or ``None`` for off (``max_grad_norm=None`` does not clip)."""
    check(value is None or value > 0, f"{name} must be > 0 or None, got {value}.")


def at_least_or(name: str, value: int, minimum: int, special: int) -> None:
    """``value >= minimum``, or the one ``special`` value (``sde_sample_freq``: -1, or >= 1)."""
    check(value == special or value >= minimum, f"{name} must be {special} or >= {minimum}, got {value}.")


def fraction(name: str, value: float) -> None:
    """``value`` in ``[0, 1]`` (GAE lambda, an exploration epsilon, a probability)."""
    check(0 <= value <= 1, f"{name} must be in [0, 1], got {value}.")


def positive_fraction(name: str, value: float) -> None:
    """``value`` in ``(0, 1]``: a discount factor gamma, a Polyak coefficient tau."""
    check(0 < value <= 1, f"{name} must be in (0, 1], got {value}.")


def one_of(name: str, value: Any, choices: Sequence[Any]) -> None:
    """``value`` is one of ``choices``."""
    *others, last = (repr(c) for c in choices)
    check(value in choices, f"{name} must be {', '.join(others)} or {last}, got {value!r}.")


def mlp_args(hidden_sizes: Sequence[int], activation: str) -> None:
    """A known activation and hidden widths of at least 1 (a zero-width layer would train silently on
    nothing)."""
    one_of("activation", activation, get_args(Activation))
    check(all(int(h) >= 1 for h in hidden_sizes), f"hidden_sizes must be positive, got {list(hidden_sizes)}.")


# ------------------------------------------------------------------ argument groups several algorithms share
def on_policy_args(
    num_steps: int, learning_rate: float, gamma: float, hidden_sizes: Sequence[int], activation: str
) -> None:
    """PPO's, A2C's and REINFORCE's: the rollout length, the learning rate, the discount, the MLPs."""
    at_least("num_steps", num_steps, 1)
    positive("learning_rate", learning_rate)
    positive_fraction("gamma", gamma)
    mlp_args(hidden_sizes, activation)


def actor_critic_loss_args(gae_lambda: float, ent_coef: float, vf_coef: float, max_grad_norm: float) -> None:
    """PPO's and A2C's: GAE, the loss weights and the gradient clipping."""
    fraction("gae_lambda", gae_lambda)
    non_negative("ent_coef", ent_coef)
    non_negative("vf_coef", vf_coef)
    positive("max_grad_norm", max_grad_norm)


def off_policy_args(
    learning_rate: float, gamma: float, tau: float, hidden_sizes: Sequence[int], activation: str
) -> None:
    """DQN's, SAC's and TD3's (so DDPG's): the learning rate, the discount, the target networks' Polyak
    coefficient, the MLPs."""
    positive("learning_rate", learning_rate)
    positive_fraction("gamma", gamma)
    positive_fraction("tau", tau)
    mlp_args(hidden_sizes, activation)
