"""A preempted run must not look finished to whoever waits on its exit status."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

SIGTERM_EXIT_CODE = 143  # 128 + SIGTERM, what a shell reports for a process killed by SIGTERM


class PreemptionExitCode(Callback):
    """Lightning stops a fit on SIGTERM (a scheduler's preemption) by raising ``SIGTERMException``, a
    ``SystemExit`` without a code: the process would exit 0, and ``fit ... && next_step`` would treat the
    preempted run as finished. This gives it the code 143 (``LastCheckpoint`` has saved by then). Every
    algorithm adds it (``RLModule.configure_callbacks``), so scripts of the Python API exit 143 too."""

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and exception.code is None:
            exception.code = SIGTERM_EXIT_CODE
