"""Blended finetuning data: several sources (Megatron's blend list ["0.7", a.jsonl, "0.3", b.jsonl]), each
split train / valid / test on its own, mixed sample by sample in the weights' proportions.

Sample i of a split comes from the source whose count lags its share the most (Megatron-Core's blending
rule: argmax_j w_j (i + 1) - n_j), so over any prefix of the run every source's count is within one sample
of its weight's share. Each source's dataset is as long as its count and visits its own records epoch by
epoch (bridge.training.data.sft.EpochOrder).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

from bridge.errors import ConfigError
from bridge.training.data.splits import split_ranges


def blend_indices(weights: Sequence[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, index within the source) of each of `size` samples, for the normalised `weights`."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = np.zeros(len(w), dtype=np.int64)
    source = np.empty(size, dtype=np.int64)
    index = np.empty(size, dtype=np.int64)
    for i in range(size):
        j = int(np.argmax(w * (i + 1) - counts))
        source[i], index[i] = j, counts[j]
        counts[j] += 1
    return source, index


SOURCE_KEY = "source"  # a tagged sample's one-hot [number of sources] vector


class BlendedDataset(torch.utils.data.Dataset):
    """Sample i = sources[source[i]][index[i]]; with `tag`, its one-hot source vector under SOURCE_KEY."""

    def __init__(self, sources: list, source: np.ndarray, index: np.ndarray, tag: bool = False):
        self.sources, self.source, self.index, self.tag = sources, source, index, tag

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int):
        j = int(self.source[i])
        sample = self.sources[j][int(self.index[i])]
        if not self.tag:
            return sample
        one_hot = torch.zeros(len(self.sources), dtype=torch.float32)
        one_hot[j] = 1.0
        return {**sample, SOURCE_KEY: one_hot}


def blended_split(
    paths: Sequence[str],
    weights: Sequence[float],
    size: int,
    split: str,
    build: Callable[[int, int], torch.utils.data.Dataset | None],
    log: Callable[[int, str], None],
) -> BlendedDataset:
    """The split's `size` samples blended from the sources; `build(j, n)` makes source j's dataset of n
    samples (None: the source has no records in this split, an error). Logs each source's share."""
    source, index = blend_indices(weights, size)
    counts = np.bincount(source, minlength=len(paths))
    datasets = []
    for j, path in enumerate(paths):
        ds = build(j, int(counts[j])) if counts[j] else None
        if ds is None and counts[j]:
            raise ConfigError(
                f"dataset.data_paths: {path} has no records in the {split} split, and its blend weight "
                f"{weights[j]} gives it {counts[j]} of the split's {size} samples; give it more records, or "
                "change dataset.split"
            )
        datasets.append(ds)
    total = sum(weights)
    shares = ", ".join(
        f"{path}: {counts[j]} samples ({100.0 * counts[j] / size:.1f}%, weight {weights[j] / total:.3f})"
        for j, path in enumerate(paths)
    )
    log(logging.INFO, f"dataset blend ({split} split, {size} samples): {shares}")
    # validation / test samples name their source: the losses are reported per source there
    return BlendedDataset(datasets, source, index, tag=split != "train")


def build_blended(data, sources: list[list], dataset: Callable, log: Callable) -> list:
    """Train, valid and test datasets blended from `sources` (each file's records, in data.paths order):
    each source split by data.split on its own, `dataset(records, split, n)` building a source's split."""
    names = ("train", "valid", "test")
    ranges = [split_ranges(len(records), data.split) for records in sources]
    out = []
    for k, (name, size) in enumerate(zip(names, data.sample_counts, strict=True)):
        if not size:
            out.append(None)
            continue

        def build(j: int, n: int, k: int = k, name: str = name):
            begin, end = ranges[j][k]
            return dataset(sources[j][begin:end], name, n) if end > begin else None

        out.append(blended_split(data.paths, data.weights, size, name, build, log))
    return out
