"""Preference data for DPO / IPO: {"prompt": str, "chosen": str, "rejected": str} records (JSON Lines,
JSON arrays or Parquet, read through the `datasets` library as SFT data is).

A sample is one (chosen, rejected) pair: two rows, each `prompt + answer + [eod]` padded on the right to
seq_length, with the loss mask on the answer and the eod (bridge.training.preference sums the log-probs
there). A micro batch of m samples is the [m, 2, seq_length] tensors; the forward step flattens them to
2m rows. Each epoch visits every pair once in an order shuffled by (seed, epoch), as SFT data does.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from bridge.config.preference_rules import parse_preference
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.training.data.blend import build_blended
from bridge.training.data.sft import (
    SPLIT_NAMES,
    EpochOrder,
    Record,
    _bad,
    _empty,
    _log,
    _prefix_error,
    _render,
    _tokenize_texts,
    pad_id,
    read_table,
    require_chat_template,
)
from bridge.training.data.splits import split_ranges


def read_preference_records(paths, cache_dir: str | None = None) -> list[Record]:
    """Every record of the files in order; a bad one is one ConfigError naming the file and row."""
    records: list[Record] = []
    for path in map(str, paths):
        builder = "folder" if os.path.isdir(path) else "parquet" if path.endswith(".parquet") else "json"
        try:
            table, builder = read_table(path, cache_dir)
        except ConfigError:
            raise
        except Exception as err:  # datasets raises several types for one malformed file
            first = (str(err) or repr(err)).splitlines()[0][:200]
            raise ConfigError(
                f"dataset.data_paths: {path} cannot be read as {builder} ({type(err).__name__}: {first}); "
                "give a valid .jsonl / .json / .parquet file"
            ) from None
        n = len(next(iter(table.values()))) if table else 0
        if not n:
            raise _empty(path)
        for row in range(n):
            obj = {k: col[row] for k, col in table.items() if col[row] is not None}
            value = parse_preference(obj)
            if isinstance(value, str):
                raise _bad(f"{path}: row {row + 1}:", value)
            records.append(Record(value, path, row))
    return records


def tokenize_pairs(records: list[Record], tokenizer) -> list[tuple[list[int], int, list[int], list[int]]]:
    """(prompt ids, prompt length, chosen ids, rejected ids) per record: text answers end with eod; chat
    records are rendered with the tokenizer's chat template (the answer: the render of prompt + answer past
    the prompt's render with its generation prompt, as SFT's chat data)."""
    chat = [i for i, r in enumerate(records) if isinstance(r.value[0], list)]
    if chat:  # a file may mix both forms: each record by its own
        out = [None] * len(records)
        for i in chat:
            out[i] = _tokenize_chat_pair(records[i], tokenizer)
        text = [i for i in range(len(records)) if out[i] is None]
        for i, pair in zip(text, _tokenize_text_pairs([records[i] for i in text], tokenizer), strict=True):
            out[i] = pair
        return out
    return _tokenize_text_pairs(records, tokenizer)


def _tokenize_text_pairs(
    records: list[Record], tokenizer
) -> list[tuple[list[int], int, list[int], list[int]]]:
    if not records:
        return []
    prompts = _tokenize_texts(tokenizer, [r.value[0] for r in records], records)
    chosen = _tokenize_texts(tokenizer, [r.value[1] for r in records], records)
    rejected = _tokenize_texts(tokenizer, [r.value[2] for r in records], records)
    eod = tokenizer.eod
    return [(p, len(p), [*c, eod], [*r, eod]) for p, c, r in zip(prompts, chosen, rejected, strict=True)]


def _tokenize_chat_pair(record: Record, tokenizer) -> tuple[list[int], int, list[int], list[int]]:
    require_chat_template(tokenizer)
    prompt, chosen, rejected = record.value
    (head,) = _render(tokenizer, [prompt], [record], [0], gen=True)
    answers = []
    for answer in (chosen, rejected):
        (full,) = _render(tokenizer, [prompt + answer], [record], [0], gen=False)
        if full[: len(head)] != head:
            raise _prefix_error(tokenizer, record, len(prompt))
        answers.append(full[len(head) :])
    return head, len(head), answers[0], answers[1]


def _row(prompt: list[int], answer: list[int], s: int, pad: int) -> tuple[np.ndarray, ...]:
    """tokens, labels, loss mask of one row: ids = prompt + answer cut to s + 1, labels shifted by one."""
    ids = np.asarray([*prompt, *answer][: s + 1], dtype=np.int64)
    mask = np.zeros(len(ids), dtype=np.float32)
    mask[len(prompt) :] = 1.0
    n = len(ids) - 1
    tokens = np.full(s, pad, dtype=np.int64)
    labels = np.full(s, pad, dtype=np.int64)
    loss_mask = np.zeros(s, dtype=np.float32)
    tokens[:n], labels[:n], loss_mask[:n] = ids[:-1], ids[1:], mask[1:]
    return tokens, labels, loss_mask


class PreferenceDataset(torch.utils.data.Dataset):
    """One (chosen, rejected) pair per item: [2, seq_length] tensors, chosen first."""

    def __init__(self, pairs: list, num_samples: int, seq_length: int, seed: int, pad: int):
        self.pairs = pairs
        self.num_samples = int(num_samples)
        self.seq_length = int(seq_length)
        self.pad = int(pad)
        self.order = EpochOrder(len(pairs), seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        prompt, _, chosen, rejected = self.pairs[self.order(idx)]
        rows = [_row(prompt, answer, self.seq_length, self.pad) for answer in (chosen, rejected)]
        tokens, labels, loss_mask = (torch.from_numpy(np.stack(x)) for x in zip(*rows, strict=True))
        return {
            "tokens": tokens,
            "labels": labels,
            "loss_mask": loss_mask,
            "position_ids": torch.arange(self.seq_length, dtype=torch.int64).expand(2, -1).clone(),
        }


def fit_pairs(pairs: list, seq_length: int, split: str) -> list:
    """The pairs whose chosen and rejected rows both keep an answer token within seq_length + 1 ids
    (longer rows are cut on the right); one warning counts the ones cut and left out."""
    limit = seq_length + 1
    kept = [p for p in pairs if p[1] < limit]  # the prompt leaves room for a first answer token
    cut = sum(1 for p in pairs if p[1] + max(len(p[2]), len(p[3])) > limit)
    if cut or len(kept) < len(pairs):
        _log(
            logging.WARNING,
            f"dataset ({split} split): {cut} of {len(pairs)} pairs are longer than model.seq_length + 1 = "
            f"{limit} ids (cut on the right); {len(pairs) - len(kept)} left out whose prompt fills the row",
        )
    if not kept:
        raise ConfigError(
            f"dataset ({split} split): every prompt is at least model.seq_length + 1 = {limit} ids long, "
            "so no answer token is left; raise model.seq_length"
        )
    return kept


def build_preference_datasets(data: DataPlan, tokenizer) -> list[torch.utils.data.Dataset | None]:
    """Train, valid and test datasets of preference pairs (None where a split is empty or not needed); with
    blend weights, each file a source mixed in its weight's proportion (bridge.training.data.blend)."""
    cache = os.path.join(data.cache_dir, "hf_datasets") if data.cache_dir else None

    def dataset(records: list[Record], name: str, size: int) -> PreferenceDataset:
        pairs = fit_pairs(tokenize_pairs(records, tokenizer), data.seq_length, name)
        return PreferenceDataset(pairs, size, data.seq_length, data.seed, pad_id(tokenizer))

    if data.weights:
        sources = [read_preference_records([path], cache) for path in data.paths]
        return build_blended(data, sources, dataset, _log)
    records = read_preference_records(data.paths, cache)
    out: list[torch.utils.data.Dataset | None] = []
    for name, (begin, end), size in zip(
        SPLIT_NAMES, split_ranges(len(records), data.split), data.sample_counts, strict=True
    ):
        out.append(dataset(records[begin:end], name, size) if end > begin and size else None)
    return out
