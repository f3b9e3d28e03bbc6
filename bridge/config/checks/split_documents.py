"""Every split the run reads holds documents: checked before any dataset is built.

Megatron-Core's GPTDataset repeats a split's documents in epochs until it has the samples asked of it
(`_get_num_epochs`); a split with no documents, or documents of no tokens, never gets there and that
rank loops forever while the others wait in a collective until the process-group timeout. bridge asks
no samples of a split the run never reads (the plan's sample_counts), and refuses a read split that is
empty with one ConfigError naming the split, the document counts and the fix.

Indexed data is checked by the plan from each `.idx` header (its sequence count, what Megatron-Core's
GPTDataset splits) and the lengths of the first sequences; JSONL / SFT data by its builder, which has
read the documents. Pure Python: no numpy, torch or megatron import.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from bridge.errors import config_error

SPLIT_NAMES = ("train", "validation", "test")
# What reads each split, and how to stop asking it for samples.
_WHO_ASKS = {
    0: ("train.train_iters x train.global_batch_size", None),
    1: ("validation (validation.eval_interval, validation.eval_iters)", "validation.eval_interval=0"),
    2: ("the test split", None),
}
_IDX_MAGIC = b"MMIDIDX\x00\x00"  # Megatron-Core's .idx: magic, version <Q, dtype code <B, counts <Q <Q
_LENGTHS_OFFSET = 9 + 8 + 1 + 8 + 8  # then sequence lengths (int32 each)


def megatron_split_bounds(n: int, ratios: Sequence[float]) -> list[tuple[int, int]]:
    """[begin, end) of each split of n elements as Megatron-Core's builder cuts them: the bookends of the
    cumulative ratios, each rounded (`convert_split_vector_to_split_matrix`, then `round(bookend * n)`)."""
    total = sum(ratios)
    weights = [r / total for r in ratios]
    ends = [0.0]
    for w in weights:
        ends.append(ends[-1] + w)
    return [(int(round(ends[i] * n)), int(round(ends[i + 1] * n))) if weights[i] > 0 else (0, 0)
            for i in range(len(weights))]  # fmt: skip


def idx_sequence_count(prefix: str) -> int:
    """The number of sequences (documents, as preprocess_data.py writes them) in `<prefix>.idx`."""
    with open(f"{prefix}.idx", "rb") as f:
        head = f.read(_LENGTHS_OFFSET)
    if len(head) < _LENGTHS_OFFSET or head[:9] != _IDX_MAGIC:
        raise config_error(
            "dataset.data_paths",
            prefix,
            f"{prefix}.idx is not a Megatron indexed-dataset index (no MMIDIDX header)",
            "give the prefix scripts/data/preprocess_data.py wrote (the path without .bin/.idx)",
        )
    return struct.unpack("<Q", head[18:26])[0]


def idx_has_tokens(prefix: str, begin: int, end: int, chunk: int = 1 << 16) -> bool:
    """Whether any sequence in [begin, end) of `<prefix>.idx` is non-empty (reads until the first one)."""
    with open(f"{prefix}.idx", "rb") as f:
        for start in range(begin, end, chunk):
            count = min(chunk, end - start)
            f.seek(_LENGTHS_OFFSET + 4 * start)
            if any(struct.unpack(f"<{count}i", f.read(4 * count))):
                return True
    return False


def check_split_documents(
    source: str,
    bounds: Sequence[tuple[int, int]],
    sample_counts: Sequence[int],
    split_text: str,
    has_tokens=None,
) -> None:
    """One ConfigError for the first split asked for samples (sample_counts[i] > 0) that gets no document
    (bounds[i] empty) or, with `has_tokens(begin, end)`, no token."""
    counts = [end - begin for begin, end in bounds]
    n = sum(counts)
    for i, samples in enumerate(sample_counts):
        if not samples:
            continue
        empty = counts[i] <= 0
        if not empty and has_tokens is None:
            continue
        if not empty and has_tokens(*bounds[i]):
            continue
        what = "no document" if empty else f"{counts[i]} documents of 0 tokens"
        parts = ", ".join(f"{name} {c}" for name, c in zip(SPLIT_NAMES, counts, strict=True))
        asker, stop = _WHO_ASKS[i]
        raise config_error(
            "dataset.split",
            split_text,
            f"{source} holds {n} documents, which this split cuts into {parts}: the {SPLIT_NAMES[i]} split gets "
            f"{what}, while {asker} asks it for {samples} samples (Megatron-Core cannot draw samples from an "
            "empty split)",
            _fix(i, n, sample_counts, stop),
        )


def _fix(i: int, n: int, sample_counts: Sequence[int], stop: str | None) -> str:
    """A split that gives every read part a document, or what else to change."""
    read = [j for j, s in enumerate(sample_counts) if s]
    how = []
    if n >= len(read) and n > 0:
        weights = [0] * 3
        for j in read[1:]:
            weights[j] = max(1, round(0.05 * n))  # a part of about 5 %, at least one document
        weights[read[0]] = n - sum(weights)
        if weights[read[0]] > 0:
            how.append(
                f"give the {SPLIT_NAMES[i]} part a larger weight, e.g. 'dataset.split=\"{','.join(map(str, weights))}\"'"
            )
    how.append(f"add documents to the data (at least {len(read)}: one for each split the run reads)")
    if stop:
        how.append(f"or set {stop} to never read it")
    return "; ".join(how)


def check_indexed_splits(
    prefixes: Sequence[str], ratios: Sequence[float], sample_counts: Sequence[int], split_text: str
) -> None:
    """Each indexed prefix (Megatron-Core splits each one of a blend alike) gives every split the run
    reads a document holding tokens."""
    for prefix in dict.fromkeys(prefixes):
        bounds = megatron_split_bounds(idx_sequence_count(prefix), ratios)
        check_split_documents(
            f"{prefix}.idx", bounds, sample_counts, split_text, lambda b, e, p=prefix: idx_has_tokens(p, b, e)
        )
