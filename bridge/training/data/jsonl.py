"""JSONL text data tokenized at load time: documents joined with eod, cut into seq_length + 1 windows.

Each epoch visits every window once, in an order shuffled by (seed, epoch); the dataset is as long as
the number of samples the run needs, so a sequential sampler never repeats a window within an epoch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bridge.config.checks.split_documents import SPLIT_NAMES, check_split_documents
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.training.data.sample import NO_MASKING, DocumentMasking, sample_from_text
from bridge.training.data.splits import split_ranges
from bridge.training.data.tokenizer import NullTokenizer


def read_jsonl_records(paths: list[str], text_key: str = "text") -> list[tuple[str, str, int]]:
    """(text, file, line) of every document; each mistake is one ConfigError naming the file and line."""
    docs: list[tuple[str, str, int]] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(
                f"dataset.data_paths entry {path!r} is not a file: give JSONL files for dataset.kind=jsonl"
            )
        found = 0
        with p.open("rb") as f:  # decoded line by line, so a non-UTF-8 byte is reported with its line
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise ConfigError(
                        f"dataset.data_paths: {path}:{lineno} is not UTF-8 text (byte {raw[err.start]:#04x} at "
                        f"column {err.start + 1}); give JSONL files (UTF-8, one JSON object per line) for "
                        "dataset.kind=jsonl"
                    ) from None
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    text = record[text_key]
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise ConfigError(
                        f"dataset.data_paths: {path}:{lineno} is not a JSON object with a {text_key!r} string "
                        f"({err}); fix the line or the file"
                    ) from err
                if not isinstance(text, str):
                    raise ConfigError(
                        f"dataset.data_paths: {path}:{lineno}: {text_key!r} is {type(text).__name__} "
                        f"{text!r:.40}, not a string; fix the line or the file"
                    )
                docs.append((text, str(path), lineno))
                found += 1
        if not found:
            raise ConfigError(
                f"dataset.data_paths: {path} holds no documents (empty file); give JSONL with one "
                f'{{"{text_key}": ...}} object per line, or remove it from dataset.data_paths'
            )
    return docs


def read_jsonl_documents(paths: list[str], text_key: str = "text") -> list[str]:
    return [text for text, _, _ in read_jsonl_records(paths, text_key)]


def tokenize_documents(records: list[tuple[str, str, int]], tokenizer) -> list[int]:
    """Token ids of the documents, each followed by eod; a document the tokenizer cannot read, or an
    id outside the tokenizer's vocabulary, is one ConfigError naming its file and line."""
    ids: list[int] = []
    limit = tokenizer.vocab_size - 1  # ids 0..vocab_size-2 plus eod (NullTokenizer: num_ids)
    for text, path, lineno in records:
        try:
            doc = tokenizer.tokenize(text)
        except ValueError as err:
            raise ConfigError(f"dataset.data_paths: {path}:{lineno}: {err}") from None
        bad = [t for t in doc if not 0 <= t <= limit] if isinstance(tokenizer, NullTokenizer) else []
        if bad:
            raise ConfigError(
                f"dataset.data_paths: {path}:{lineno}: token id {bad[0]} is outside the NullTokenizer's ids "
                f"0..{limit} (tokenizer.vocab_size={limit}, plus its end-of-document id {limit}); fix the "
                "data, or raise tokenizer.vocab_size / model.vocab_size"
            )
        ids.extend(doc)
        ids.append(tokenizer.eod)
    return ids


class JsonlDataset(torch.utils.data.Dataset):
    def __init__(
        self,
        token_stream: np.ndarray,
        num_samples: int,
        seq_length: int,
        seed: int,
        eod: int,
        masking: DocumentMasking = NO_MASKING,
        split: str = "train",
        documents: int | None = None,
    ):
        self.stream = token_stream
        self.seq_length = int(seq_length)
        self.windows_per_epoch = (len(token_stream) - 1) // self.seq_length
        if self.windows_per_epoch < 1:
            held = f"{documents} documents of " if documents is not None else ""
            raise ConfigError(
                f"dataset: the JSONL {split} split holds {held}{len(token_stream)} tokens (end-of-document ids "
                f"included), fewer than one sample of model.seq_length + 1 = {self.seq_length + 1}, and it is "
                f"asked for {num_samples} samples; add text, give the {split} split a larger part of "
                "dataset.split, or lower model.seq_length"
            )
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self.eod = eod
        self.masking = masking
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def __len__(self) -> int:
        return self.num_samples

    def _window(self, idx: int) -> int:
        epoch, pos = divmod(int(idx), self.windows_per_epoch)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.windows_per_epoch)
            self._perm_epoch = epoch
        return int(self._perm[pos])

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        start = self._window(idx) * self.seq_length
        return sample_from_text(self.stream[start : start + self.seq_length + 1], self.eod, self.masking)


def build_jsonl_datasets(
    data: DataPlan, tokenizer, masking: DocumentMasking = NO_MASKING
) -> list[JsonlDataset | None]:
    """One dataset per split (train, valid, test); None where the split is empty or not needed."""
    docs = read_jsonl_records(list(data.paths))
    seq_length, seed = data.seq_length, data.seed
    ranges = split_ranges(len(docs), data.split)
    check_split_documents(", ".join(data.paths), ranges, data.sample_counts, data.split_text)
    out: list[JsonlDataset | None] = []
    for name, (begin, end), size in zip(SPLIT_NAMES, ranges, data.sample_counts, strict=True):
        if not size:  # a split the run does not read
            out.append(None)
            continue
        ids = tokenize_documents(docs[begin:end], tokenizer)
        out.append(
            JsonlDataset(
                np.asarray(ids, dtype=np.int64),
                size,
                seq_length,
                seed,
                tokenizer.eod,
                masking,
                name,
                end - begin,
            )
        )
    return out
