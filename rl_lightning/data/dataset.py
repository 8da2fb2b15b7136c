"""The bridge between environment interaction and Lightning's training loop."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

# Lightning warns at every fit that an IterableDataset with a length may be wrong with several loader
# workers. The length is deliberate here (see ExperienceDataset) and there is always one worker.
warnings.filterwarnings("ignore", message=r".*IterableDataset. has .__len__. defined", category=UserWarning)


class ExperienceDataset(IterableDataset):
    """Yields the batches a module's generator produces, ``length`` of them per epoch.

    The length matters: with it, Lightning knows where an epoch ends without pre-fetching the next
    batch. Without it, Lightning would collect rollout ``k + 1`` before training on rollout ``k``
    (its prefetching fetcher), so on-policy data would come from a stale policy. It also makes every
    DDP rank run the same number of steps per epoch by construction.

    Args:
        generate: Called once per epoch; returns an iterator of batches.
        length: Batches per epoch; the iterator must yield exactly this many.
    """

    def __init__(self, generate: Callable[[], Iterator[Any]], length: int) -> None:
        self.generate = generate
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        return self.generate()

    def __len__(self) -> int:
        return self.length
