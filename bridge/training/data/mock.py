"""Mock pretraining data: uniformly random token ids, a pure function of (seed, sample index).

Being a function of the index (not of a running generator) makes any sample reproducible on any rank
and after a resume, with no state to save.
"""

from __future__ import annotations

import numpy as np
import torch

from bridge.training.data.sample import NO_MASKING, DocumentMasking, sample_from_text


class MockDataset(torch.utils.data.Dataset):
    def __init__(
        self,
        num_samples: int,
        seq_length: int,
        vocab_size: int,
        seed: int,
        split_offset: int = 0,
        eod: int = -1,
        masking: DocumentMasking = NO_MASKING,
    ):
        self.num_samples = int(num_samples)
        self.seq_length = int(seq_length)
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.split_offset = int(split_offset)  # keeps train / valid / test streams disjoint
        self.eod = eod
        self.masking = masking

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        rng = np.random.default_rng([self.seed, self.split_offset, int(idx)])
        text = rng.integers(0, self.vocab_size, size=self.seq_length + 1, dtype=np.int64)
        return sample_from_text(text, self.eod, self.masking)
