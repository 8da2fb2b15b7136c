"""The errors rl_lightning raises on purpose, each with a message that says what to change."""

import contextlib
from collections.abc import Iterator


class ConfigError(ValueError):
    """Bad input caught before any env step: unknown env id, unsupported space, invalid hyperparameter.

    The CLI prints the message alone (no traceback) and exits with status 2.
    """


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or parameter; the run stops instead of training on NaNs."""


class CollectionError(RuntimeError):
    """An exception inside environment interaction, with the env id and env-step count attached."""


def check(condition: bool, message: str) -> None:
    """Raise ``ConfigError(message)`` unless ``condition``: hyperparameter validation in one line."""
    if not condition:
        raise ConfigError(message)


class RunFailed(RuntimeError):
    """A run that stopped on an error, described in one line with the way on (the CLI prints it)."""


@contextlib.contextmanager
def naming_env_faults(what: str, env_id: str, env_steps: int) -> Iterator[None]:
    """Raise any exception inside as a ``CollectionError`` naming the env and the env step (the one place
    env faults are named; ``LastCheckpoint`` then saves on the way out)."""
    try:
        yield
    except Exception as e:
        raise CollectionError(f"{what} on {env_id!r} failed at env step {env_steps}: {type(e).__name__}: {e}") from e
