"""Token ids of Megatron indexed data (.bin/.idx) checked against the tokenizer's vocabulary.

An id at or past the vocabulary indexes past the embedding: at TP=1 a bare IndexError, at TP>1 a
vocab-parallel embedding masks it and the run trains on garbage without a word. The jsonl / sft / chat
kinds check ids as they tokenize; indexed data is checked here once per run, by rank 0 (numpy over the
memory-mapped .bin, in chunks), and every rank gets the same one ConfigError naming the file.
"""

from __future__ import annotations

import struct

import numpy as np

from bridge.errors import ConfigError

_IDX_MAGIC = b"MMIDIDX\x00\x00"  # Megatron-Core's .idx header, then version <Q and the dtype code <B
_CHUNK = 1 << 24  # tokens per read


def bin_dtype(prefix: str) -> np.dtype:
    """The token dtype recorded in `<prefix>.idx` (Megatron-Core's DType codes)."""
    from megatron.core.datasets.indexed_dataset import DType

    with open(f"{prefix}.idx", "rb") as f:
        if f.read(9) != _IDX_MAGIC:
            raise ConfigError(f"dataset.data_paths: {prefix}.idx is not a Megatron indexed-dataset index")
        f.read(8)  # version
        (code,) = struct.unpack("<B", f.read(1))
    return np.dtype(DType.dtype_from_code(code))


def first_bad_id(prefix: str, vocab_size: int) -> tuple[int, int] | None:
    """(offset, id) of the first token of `<prefix>.bin` outside 0..vocab_size-1, or None."""
    tokens = np.memmap(f"{prefix}.bin", dtype=bin_dtype(prefix), mode="r")
    for start in range(0, len(tokens), _CHUNK):
        part = np.asarray(tokens[start : start + _CHUNK])
        bad = np.flatnonzero((part < 0) | (part >= vocab_size))
        if bad.size:
            return start + int(bad[0]), int(part[bad[0]])
    return None


def out_of_vocab_error(paths: list[str], vocab_size: int) -> str | None:
    for prefix in dict.fromkeys(paths):
        found = first_bad_id(prefix, vocab_size)
        if found is not None:
            offset, token = found
            return (
                f"dataset.data_paths: {prefix}.bin: token id {token} (at token {offset}) is outside the "
                f"tokenizer's ids 0..{vocab_size - 1} (its vocab_size {vocab_size}, end-of-document id "
                "included); fix the data, or use the tokenizer it was made with (tokenizer.vocab_size / "
                "model.vocab_size)"
            )
    return None


def check_indexed_token_ids(paths: list[str], vocab_size: int) -> None:
    """All ranks: rank 0 reads every file once; a bad id is the same ConfigError everywhere."""
    import torch.distributed as dist

    shared = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    error = out_of_vocab_error(paths, vocab_size) if not shared or dist.get_rank() == 0 else None
    if shared:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise ConfigError(error)
