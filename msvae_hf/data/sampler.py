"""The stateless batch sampler of training: the rows of update ``step`` on process ``rank`` are a pure function of
(seed, stream, step, rank), so resuming needs only the update counter and data parallelism shards without a
distributed sampler. Batch ``i`` of epoch ``e`` is slice ``i`` of a permutation seeded by ``(seed, stream, e)``,
and each process takes its own part of that global batch."""

from __future__ import annotations

from typing import Any

import numpy as np

from .collator import for_loader, read_rows


class StepSampler:
    """Rows for update ``step`` on process ``rank``: a pure function of (seed, step, rank) (see module doc)."""

    def __init__(self, dataset: Any, batch_size: int, world_size: int, seed: int, stream: int) -> None:
        self.data = for_loader(dataset)
        self.batch_size, self.world_size = batch_size, world_size
        self.seed, self.stream = seed, stream
        self.per_epoch = len(dataset) // (batch_size * world_size)
        if self.per_epoch == 0:
            raise ValueError(
                f"dataset of {len(dataset)} rows is smaller than one global batch "
                f"({batch_size} x {world_size} processes)"
            )

    def indices(self, step: int, rank: int) -> np.ndarray:
        epoch, i = divmod(step, self.per_epoch)
        perm = np.random.default_rng([self.seed, self.stream, epoch]).permutation(len(self.data))
        global_batch = perm[i * self.batch_size * self.world_size:(i + 1) * self.batch_size * self.world_size]
        return np.sort(global_batch[rank * self.batch_size:(rank + 1) * self.batch_size])

    def rows(self, step: int, rank: int) -> list[dict]:
        return read_rows(self.data, self.indices(step, rank).tolist())
