"""Datasets from the `dataset` config section, and the per-rank iterators the training loop pulls from."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bridge.config.run_plan import DataPlan
from bridge.training.data.indexed import build_indexed_datasets
from bridge.training.data.jsonl import build_jsonl_datasets
from bridge.training.data.mock import MockDataset
from bridge.training.data.preference import build_preference_datasets
from bridge.training.data.sample import DocumentMasking
from bridge.training.data.samplers import DataParallelSampler
from bridge.training.data.sft import build_sft_datasets
from bridge.training.data.vlm import build_vlm_datasets
from bridge.training.data.vlm_mock import build_mock_vlm_datasets


def build_datasets(data: DataPlan, tokenizer) -> list:
    """Train, valid and test datasets of the plan (None where a split provides no samples)."""
    masking = DocumentMasking(
        reset_position_ids=data.reset_position_ids,
        reset_attention_mask=data.reset_attention_mask,
        eod_mask_loss=data.eod_mask_loss,
    )
    if data.kind == "mock":
        return [
            MockDataset(n, data.seq_length, tokenizer.vocab_size, data.seed, i, tokenizer.eod, masking)
            if n
            else None
            for i, n in enumerate(data.sample_counts)
        ]
    if data.kind == "indexed":
        return build_indexed_datasets(data, tokenizer)
    if data.kind in ("sft", "chat"):
        return build_sft_datasets(data, tokenizer)
    if data.kind == "preference":
        return build_preference_datasets(data, tokenizer)
    if data.kind == "mock_vlm":
        return build_mock_vlm_datasets(data, tokenizer)
    if data.kind == "vlm":
        return build_vlm_datasets(data, tokenizer)

    return build_jsonl_datasets(data, tokenizer, masking)


def build_iterator(
    dataset, consumed_samples: int, micro_batch_size: int, dp_rank: int, dp_size: int, num_workers: int = 0
) -> Iterator[dict] | None:
    """Batches of micro_batch_size samples for this data-parallel rank, starting after consumed_samples."""
    if dataset is None:
        return None
    sampler = DataParallelSampler(len(dataset), consumed_samples, micro_batch_size, dp_rank, dp_size)
    # A generator of its own: iter(DataLoader) draws its workers' base seed from it instead of from
    # torch's default generator, which the model's dropout uses (and a resume restores before this).
    generator = torch.Generator().manual_seed(1234 + dp_rank)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        pin_memory=False,
        persistent_workers=num_workers > 0,
        generator=generator,
        collate_fn=getattr(dataset, "collate", None),  # image-text rows concatenate their images
    )
    return iter(loader)
