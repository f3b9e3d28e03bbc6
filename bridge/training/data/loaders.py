"""Datasets from the `dataset` config section, and the per-rank iterators the training loop pulls from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bridge.errors import ConfigError
from bridge.training.data.mock import MockDataset
from bridge.training.data.sample import DocumentMasking
from bridge.training.data.samplers import DataParallelSampler


def split_sample_counts(
    train_iters: int, global_batch_size: int, eval_interval: int | None, eval_iters: int
) -> list[int]:
    """Samples each split must provide over the whole run (Megatron's formula)."""
    train = train_iters * global_batch_size
    if eval_interval and eval_iters:
        valid = (train_iters // eval_interval + 1) * eval_iters * global_batch_size
        test = eval_iters * global_batch_size
    else:
        valid = test = 0
    return [train, valid, test]


def build_datasets(dataset_cfg: Any, tokenizer, seq_length: int, sizes: list[int]) -> list:
    kind = getattr(dataset_cfg, "kind", "mock")
    seed = int(getattr(dataset_cfg, "seed", 1234))
    split = getattr(dataset_cfg, "split", "969,30,1") or "969,30,1"
    paths = list(getattr(dataset_cfg, "data_paths", None) or [])
    masking = DocumentMasking(
        reset_position_ids=bool(getattr(dataset_cfg, "reset_position_ids", False)),
        reset_attention_mask=bool(getattr(dataset_cfg, "reset_attention_mask", False)),
        eod_mask_loss=bool(getattr(dataset_cfg, "eod_mask_loss", False)),
    )
    packed = getattr(dataset_cfg, "packed_sequence_size", 0) or 0
    if packed:
        raise ConfigError(
            f"dataset.packed_sequence_size={packed}: sequence packing is for finetuning datasets; "
            "pretraining data is already packed into seq_length windows. Set dataset.packed_sequence_size=0"
        )
    if kind == "mock":
        return [
            MockDataset(n, seq_length, tokenizer.vocab_size, seed, i, tokenizer.eod, masking) if n else None
            for i, n in enumerate(sizes)
        ]
    if kind == "indexed":
        from bridge.training.data.indexed import build_indexed_datasets

        return build_indexed_datasets(
            paths, split, sizes, seq_length, seed, tokenizer,
            cache_dir=getattr(dataset_cfg, "cache_dir", None),
            reset_position_ids=masking.reset_position_ids,
            reset_attention_mask=masking.reset_attention_mask,
            eod_mask_loss=masking.eod_mask_loss,
        )  # fmt: skip
    if kind == "jsonl":
        from bridge.training.data.jsonl import build_jsonl_datasets

        if not paths:
            raise ConfigError(
                "dataset.data_paths is empty: dataset.kind=jsonl needs JSONL files with a 'text' field"
            )
        return build_jsonl_datasets(paths, split, sizes, seq_length, seed, tokenizer, masking)
    raise ConfigError(f"dataset.kind={kind!r} is not supported: use mock, indexed or jsonl")


def build_iterator(
    dataset, consumed_samples: int, micro_batch_size: int, dp_rank: int, dp_size: int, num_workers: int = 0
) -> Iterator[dict] | None:
    """Batches of micro_batch_size samples for this data-parallel rank, starting after consumed_samples."""
    import torch

    if dataset is None:
        return None
    sampler = DataParallelSampler(len(dataset), consumed_samples, micro_batch_size, dp_rank, dp_size)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        pin_memory=False,
        persistent_workers=num_workers > 0,
    )
    return iter(loader)
