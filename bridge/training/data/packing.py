"""Sequence packing: a split's SFT / chat / image-text samples packed into rows of N tokens.

Best-fit decreasing: samples longest first (ties in a seeded order), each into the open row whose free
space fits it most tightly. The free spaces are kept as a sorted list of their distinct values (at most
N + 1, whatever the number of rows) with a stack of rows per value, so a placement is one bisect plus an
edit of that short list: O(n log n) for the sort, then O(log N) searches; about 1.5 s for a million
samples at N = 4096 (benchmarks/pack_sequences.py), with rows over 99.9% full.

A row is the samples' tokens back to back, positions restarting at 0 at every sample, and
`cu_seqlens` [k + 1] (int32): the segment boundaries from 0 to N, the trailing padding its own last
segment. With a padding multiple m (context parallelism: 2*cp) each segment is the sample padded to a
multiple of m, the pads after it (attended by nothing but later pads, no loss). The training step turns them into Megatron-Core's PackedSeqParams (THD), so attention never
crosses a boundary; with micro batch 1 a DataLoader batch carries cu_seqlens as [1, k + 1].
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np
import torch

from bridge.training.data.samples import EpochOrder, TokenizedSamples


def pack_lengths(lengths: np.ndarray, capacity: int, seed: int = 0) -> list[list[int]]:
    """Rows of sample indices whose lengths sum to at most `capacity` each (best-fit decreasing);
    every index in exactly one row, deterministic given the seed."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) and (lengths.max() > capacity or lengths.min() < 0):
        raise ValueError(f"sample lengths must be in 0..{capacity}, got {lengths.min()}..{lengths.max()}")
    order = np.random.default_rng(seed).permutation(len(lengths))  # the seed orders equal lengths
    order = order[np.argsort(-lengths[order], kind="stable")]
    free: list[int] = []  # sorted distinct free spaces of the open rows
    rows_by_free: dict[int, list[int]] = {}
    rows: list[list[int]] = []
    for i, length in zip(order.tolist(), lengths[order].tolist(), strict=True):
        k = bisect_left(free, length)
        if k < len(free):  # the tightest open row that fits
            space = free[k]
            stack = rows_by_free[space]
            r = stack.pop()
            if not stack:
                del free[k], rows_by_free[space]
        else:
            space, r = capacity, len(rows)
            rows.append([])
        rows[r].append(i)
        left = space - length
        if left > 0:  # a full row takes nothing more
            stack = rows_by_free.get(left)
            if stack is None:
                insort(free, left)
                stack = rows_by_free[left] = []
            stack.append(r)
    return rows


def padded_lengths(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """Each length rounded up to a multiple of `multiple` (a sample's segment in a packed row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return -(-lengths // multiple) * multiple


class PackedDataset(torch.utils.data.Dataset):
    """Rows of `pack_size` tokens, each several whole samples (a sample of n ids gives n - 1 tokens).

    `pad_multiple` > 1 (dataset.pad_seq_to_mult; 2*cp with context parallelism): every sample's segment
    is padded to a multiple of it (pad tokens after the sample, no loss), so that context parallelism
    can split each segment into 2*cp equal chunks; the packing sees the padded lengths."""

    def __init__(
        self,
        samples: TokenizedSamples,
        num_samples: int,
        pack_size: int,
        seed: int,
        pad: int,
        pad_multiple: int = 1,
    ):
        self.samples = samples
        self.num_samples = int(num_samples)
        self.pack_size = int(pack_size)
        self.pad = int(pad)
        self.pad_multiple = int(pad_multiple)
        rows = pack_lengths(padded_lengths(samples.lengths - 1, self.pad_multiple), self.pack_size, seed)
        self.members = np.fromiter((i for row in rows for i in row), dtype=np.int64)
        self.row_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(row) for row in rows], out=self.row_offsets[1:])
        self.order = EpochOrder(len(rows), seed)

    @property
    def num_rows(self) -> int:
        return len(self.row_offsets) - 1

    def describe(self) -> str:
        tokens = int((self.samples.lengths - 1).sum())
        fill = tokens / (self.num_rows * self.pack_size)
        return (
            f"{len(self.samples)} samples packed into {self.num_rows} rows of {self.pack_size} tokens "
            f"({fill:.1%} filled)"
        )

    def __len__(self) -> int:
        return self.num_samples

    def row_members(self, r: int) -> np.ndarray:
        """The sample indices of packed row r, in their order in the row."""
        return self.members[self.row_offsets[r] : self.row_offsets[r + 1]]

    def row(self, r: int) -> dict[str, torch.Tensor]:
        """Packed row r (in packing order, not the epoch's)."""
        n = self.pack_size
        tokens = np.full(n, self.pad, dtype=np.int64)
        labels = np.full(n, self.pad, dtype=np.int64)
        loss_mask = np.zeros(n, dtype=np.float32)
        position_ids = np.empty(n, dtype=np.int64)
        bounds = [0]
        for i in self.row_members(r):
            ids, mask = self.samples.sample(int(i))
            a, b = bounds[-1], bounds[-1] + len(ids) - 1
            tokens[a:b], labels[a:b], loss_mask[a:b] = ids[:-1], ids[1:], mask[1:]
            end = a + int(padded_lengths(np.array([b - a]), self.pad_multiple)[0])  # pads: no loss
            position_ids[a:end] = np.arange(end - a)
            bounds.append(end)
        if bounds[-1] < n:  # the padding is a segment of its own, so no sample attends to it
            position_ids[bounds[-1] :] = np.arange(n - bounds[-1])
            bounds.append(n)
        return {
            "tokens": torch.from_numpy(tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "position_ids": torch.from_numpy(position_ids),
            "cu_seqlens": torch.tensor(bounds, dtype=torch.int32),
        }

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        return self.row(self.order(idx))
