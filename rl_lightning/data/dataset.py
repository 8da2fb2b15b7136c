"""The bridge between Lightning's training loop and environment interaction."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

from torch.utils.data import IterableDataset

# Lightning warns at every fit that an IterableDataset with a length may be wrong with several loader
# workers. The length is deliberate here (see StepPacer) and there is always one worker.
warnings.filterwarnings("ignore", message=r".*IterableDataset. has .__len__. defined", category=UserWarning)


class StepPacer(IterableDataset):
    """Paces Lightning's training steps: yields, for each training step of an epoch, how many
    collect-then-update iterations it runs (a rollout and its update, or a collection phase and its
    gradient steps). The training step collects the experience itself, with the current policy, so
    nothing is collected ahead of time by a stale one.

    An epoch is ``iterations`` iterations in steps of ``per_step`` (the last step may run fewer). The
    length tells Lightning where an epoch ends, and every DDP rank runs the same number of steps by
    construction (a rank with fewer would hang the all-reduce). An ``IterableDataset``, not a list, so
    Lightning never splits it across ranks with a distributed sampler.

    Args:
        iterations: Collect-then-update iterations per epoch.
        per_step: Iterations per training step.
    """

    def __init__(self, iterations: int, per_step: int = 1) -> None:
        self.iterations = iterations
        self.per_step = per_step

    def __iter__(self) -> Iterator[int]:
        left = self.iterations
        while left > 0:
            yield min(self.per_step, left)
            left -= self.per_step

    def __len__(self) -> int:
        return math.ceil(self.iterations / self.per_step)
