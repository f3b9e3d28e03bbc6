"""A split's tokenized samples (ragged arrays) and the epoch order every finetuning dataset visits them in;
shared by the SFT rows (bridge.training.data.sft) and the packed rows (bridge.training.data.packing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TokenizedSamples:
    """A split's samples, ragged: sample i is ids[offsets[i]:offsets[i+1]] with its loss mask alike."""

    ids: np.ndarray  # int64
    mask: np.ndarray  # uint8, 1 where the token is trained on (as a label)
    offsets: np.ndarray  # int64, [n + 1]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sample(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        begin, end = self.offsets[i], self.offsets[i + 1]
        return self.ids[begin:end], self.mask[begin:end]


class EpochOrder:
    """Index -> item: epoch e visits all n items once, in a permutation seeded by (seed, e)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = int(n), int(seed)
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def __call__(self, idx: int) -> int:
        epoch, pos = divmod(int(idx), self.n)
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._epoch = epoch
        return int(self._perm[pos])
