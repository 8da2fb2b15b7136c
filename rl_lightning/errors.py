"""The errors rl_lightning raises on purpose, each with a message that says what to change."""


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
