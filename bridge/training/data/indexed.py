"""Megatron indexed datasets (.bin/.idx) through Megatron-Core's BlendedMegatronDatasetBuilder + GPTDataset."""

from __future__ import annotations

from pathlib import Path

from bridge.errors import ConfigError
from bridge.training.data.splits import parse_split


def parse_blend(data_paths: list) -> tuple[list[str], list[float] | None]:
    """["p1", "p2"] or Megatron's flattened ["w1", "p1", "w2", "p2"] -> (prefixes, weights or None)."""
    items = [str(x).strip() for x in data_paths or []]
    if not items:
        raise ConfigError(
            "dataset.data_paths is empty: dataset.kind=indexed needs .bin/.idx prefixes, "
            "e.g. dataset.data_paths=[/data/corpus_text_document]"
        )

    def is_number(s: str) -> bool:
        try:
            float(s)
            return True
        except ValueError:
            return False

    if len(items) % 2 == 0 and all(is_number(w) for w in items[0::2]):
        prefixes, weights = items[1::2], [float(w) for w in items[0::2]]
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ConfigError(
                f"dataset.data_paths={data_paths}: blend weights must be >= 0 with a positive sum"
            )
    elif any(is_number(s) for s in items):
        raise ConfigError(
            f"dataset.data_paths={data_paths} mixes weights and paths unevenly: give either only prefixes "
            "or weight/prefix pairs, e.g. [0.3, /data/a_text_document, 0.7, /data/b_text_document]"
        )
    else:
        prefixes, weights = items, None
    for p in prefixes:
        if not (Path(p + ".bin").is_file() and Path(p + ".idx").is_file()):
            raise ConfigError(
                f"dataset.data_paths entry {p!r}: {p}.bin / {p}.idx not found; give the prefix written by "
                "scripts/data/preprocess_data.py (without .bin/.idx)"
            )
    return prefixes, weights


def build_indexed_datasets(
    data_paths: list,
    split: str,
    sizes: list[int],
    seq_length: int,
    seed: int,
    tokenizer,
    cache_dir: str | None = None,
    reset_position_ids: bool = False,
    reset_attention_mask: bool = False,
    eod_mask_loss: bool = False,
) -> list:
    """Train / valid / test GPTDatasets (or BlendedDatasets); None for an empty split. Call on all ranks."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    prefixes, weights = parse_blend(data_paths)
    ratios = parse_split(split)
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=(prefixes, weights),
        split=",".join(str(r) for r in ratios),
        path_to_cache=cache_dir,
        tokenizer=tokenizer,
        reset_position_ids=reset_position_ids,
        reset_attention_mask=reset_attention_mask,
        eod_mask_loss=eod_mask_loss,
        create_attention_mask=reset_attention_mask,
    )
    # A split with ratio 0 must get size None-or-0; the builder skips it.
    sizes = [s if r > 0 else 0 for s, r in zip(sizes, ratios, strict=True)]
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
