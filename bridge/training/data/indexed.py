"""Megatron indexed datasets (.bin/.idx) through Megatron-Core's BlendedMegatronDatasetBuilder + GPTDataset."""

from __future__ import annotations

from bridge.config.run_plan import DataPlan


def build_indexed_datasets(data: DataPlan, tokenizer) -> list:
    """Train / valid / test GPTDatasets (or BlendedDatasets); None for an empty split. Call on all ranks.
    Every token id is checked against the tokenizer's vocabulary first (token_ids)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from bridge.training.data.token_ids import check_indexed_token_ids

    check_indexed_token_ids(list(data.paths), tokenizer.vocab_size)
    config = GPTDatasetConfig(
        random_seed=data.seed,
        sequence_length=data.seq_length,
        blend=(list(data.paths), list(data.weights) if data.weights else None),
        split=",".join(str(r) for r in data.split),
        path_to_cache=data.cache_dir,
        tokenizer=tokenizer,
        reset_position_ids=data.reset_position_ids,
        reset_attention_mask=data.reset_attention_mask,
        eod_mask_loss=data.eod_mask_loss,
        create_attention_mask=data.reset_attention_mask,
    )
    # A split with ratio 0 must get size None-or-0; the builder skips it.
    sizes = [s if r > 0 else 0 for s, r in zip(data.sample_counts, data.split, strict=True)]
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
