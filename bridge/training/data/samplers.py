"""Data-parallel sharding with a resumable position, as Megatron's pretraining sampler does it.

The datasets are already shuffled and as long as the run needs, so the global order is simply
0, 1, 2, ...: each micro step takes micro_batch * dp consecutive samples and data-parallel rank r
gets its slice [r * micro_batch, (r + 1) * micro_batch). `consumed_samples` (saved in checkpoints)
is the only state, so a resume continues exactly where the run stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class DataParallelSampler:
    total_samples: int
    consumed_samples: int
    micro_batch_size: int
    dp_rank: int
    dp_size: int

    def __post_init__(self):
        if not 0 <= self.dp_rank < self.dp_size:
            raise ValueError(f"dp_rank {self.dp_rank} outside [0, {self.dp_size})")
        self.step = self.micro_batch_size * self.dp_size

    def __len__(self) -> int:
        return (self.total_samples - self.consumed_samples) // self.step

    def __iter__(self) -> Iterator[list[int]]:
        start = self.consumed_samples
        while start + self.step <= self.total_samples:
            first = start + self.dp_rank * self.micro_batch_size
            yield list(range(first, first + self.micro_batch_size))
            start += self.step
