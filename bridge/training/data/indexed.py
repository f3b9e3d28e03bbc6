"""Megatron indexed datasets (.bin/.idx) through Megatron-Core's BlendedMegatronDatasetBuilder + GPTDataset."""

from __future__ import annotations

from bridge.config.run_plan import DataPlan


def build_indexed_datasets(data: DataPlan, tokenizer) -> list:
    """Train / valid / test GPTDatasets (or BlendedDatasets); None for a split the run does not read. Call on
    all ranks.
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
    # A split the run reads no samples from is not built: Megatron-Core builds every split of non-zero
    # ratio, and one with 0 samples asked of it and no documents (a test split of 1 in 1000 over a few
    # hundred documents) loops forever in GPTDataset._get_num_epochs. The other splits keep their
    # documents (the matrix's bookends are unchanged). The plan checked that every read split has some.
    config.split_matrix = [
        bookend if samples else None
        for bookend, samples in zip(config.split_matrix, data.sample_counts, strict=True)
    ]
    return BlendedMegatronDatasetBuilder(GPTDataset, list(data.sample_counts), lambda: True, config).build()
