"""The `dataset` section: kind, split, blend list, and that every data file exists."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.blend_list import blend_paths
from bridge.config.checks.rules import one_of, positive
from bridge.config.finetune_rules import SFT_KINDS
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer


def split_weights(split: str) -> list[float]:
    try:
        weights = [float(part) for part in str(split).replace("/", ",").split(",") if part.strip()]
    except ValueError:
        weights = []
    if not 1 <= len(weights) <= 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise config_error(
            "dataset.split",
            split,
            "must be 1 to 3 comma-separated non-negative weights (train,valid,test) with a positive sum",
            "use e.g. '969,30,1' (quote it on the command line: 'dataset.split=\"969,30,1\"')",
        )
    return weights


def parse_split(split: str) -> tuple[float, float, float]:
    """dataset.split ("969,30,1") -> train, valid, test ratios summing to 1 (raises ConfigError)."""
    weights = split_weights(split)
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    return (weights[0] / total, weights[1] / total, weights[2] / total)


def check_dataset(cfg: ConfigContainer) -> None:
    d = cfg.dataset
    one_of("dataset.kind", d.kind, S.DATASET_KINDS)
    positive("dataset.seq_length", d.seq_length)
    split_weights(d.split)
    positive("dataset.num_workers", d.num_workers, zero_ok=True)
    positive("dataset.packed_sequence_size", d.packed_sequence_size, zero_ok=True)
    if d.kind in S.GENERATED_DATA_KINDS and d.data_paths:
        what = "random tokens" if d.kind == "mock" else "image-text conversations"
        raise config_error(
            "dataset.data_paths",
            d.data_paths,
            f"dataset.kind is {d.kind}, which generates {what} and reads no files",
            "set dataset.kind=indexed (Megatron .bin/.idx), jsonl, sft, chat or vlm, or drop the paths "
            "(~dataset.data_paths)",
        )
    if d.kind not in S.GENERATED_DATA_KINDS:
        if not d.data_paths:
            raise config_error(
                "dataset.data_paths",
                d.data_paths,
                f"dataset.kind={d.kind} needs data files",
                "give dataset.data_paths=[prefix_or_file, ...], or use dataset.kind=mock",
            )
        paths, _ = blend_paths(d.data_paths)
        for path in paths:
            needed = [path + ".bin", path + ".idx"] if d.kind == "indexed" else [path]
            # finetuning records also come from a datasets folder (save_to_disk, or a folder of data files)
            folder_ok = d.kind in (*SFT_KINDS, "preference")
            missing = [p for p in needed if not (os.path.isfile(p) or (folder_ok and os.path.isdir(p)))]
            if missing:
                what = (
                    "an indexed dataset prefix (path without .bin/.idx)"
                    if d.kind == "indexed"
                    else "a JSONL file"
                    if d.kind == "jsonl"
                    else "a .jsonl / .json / .parquet file or a datasets folder"
                    if folder_ok
                    else "a .jsonl / .json / .parquet file"
                )
                raise config_error(
                    "dataset.data_paths",
                    path,
                    f"{', '.join(missing)} not found; each entry must be {what}",
                    "fix the path (scripts/data/preprocess_data.py writes .bin/.idx from JSONL)",
                )
