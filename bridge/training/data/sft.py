"""SFT and chat finetuning data: records read through the `datasets` library, tokenized with loss masks.

    sft:  {"input": str, "output": str}       ids = input + output + [eod], loss on output and eod
    chat: {"messages": [{"role", "content"}]}  ids = the chat template's render, loss on assistant turns

Files are .jsonl / .json (JSON Lines or one JSON array) or .parquet. Every data mistake is one
ConfigError naming the file and the line (JSON Lines) or row (JSON arrays, Parquet). A split's samples
are tokenized once; the dataset is as long as the run needs, each epoch visiting every sample (or packed
row, see bridge.training.data.packing) once in an order shuffled by (seed, epoch).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bridge.config.checks.split_documents import SPLIT_NAMES, check_split_documents
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.parallel.ranks import is_rank_zero
from bridge.training.data.blend import build_blended
from bridge.training.data.packing import PackedDataset
from bridge.training.data.samples import EpochOrder, TokenizedSamples
from bridge.training.data.splits import split_ranges
from bridge.training.data.tokenizer import NullTokenizer
from bridge.training.logging import logger

ROLES = ("system", "user", "assistant", "tool")
SFT_HINT = 'each record is {"input": "<prompt>", "output": "<answer>"}'
CHAT_HINT = 'each record is {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}]}'
BATCH = 1024  # records per batched tokenizer call: fast, and memory stays bounded


@dataclass(frozen=True)
class Record:
    """One validated record: (input, output) for sft, the messages for chat; file and 0-based row."""

    value: tuple[str, str] | list[dict]
    path: str
    row: int


class _BadRecord(Exception):
    """What is wrong with a record; the reader adds where it is."""


# ---------------------------------------------------------------------------------------------- reading


def _parse(obj, kind: str) -> tuple[str, str] | list[dict]:
    """The record's value, or _BadRecord saying what is wrong and how a good record looks."""
    if not isinstance(obj, dict):
        hint = SFT_HINT if kind == "sft" else CHAT_HINT
        raise _BadRecord(f"is {type(obj).__name__} {obj!r:.40}, not a JSON object; {hint}")
    if kind == "sft":
        fields = []
        for key in ("input", "output"):
            value = obj.get(key)
            if value is None:
                raise _BadRecord(f"has no {key!r} (keys: {sorted(obj)}); {SFT_HINT}")
            if not isinstance(value, str):
                raise _BadRecord(f"{key!r} is {type(value).__name__} {value!r:.40}, not a string; {SFT_HINT}")
            fields.append(value)
        return fields[0], fields[1]
    messages = obj.get("messages")
    if messages is None:
        raise _BadRecord(f"has no 'messages' (keys: {sorted(obj)}); {CHAT_HINT}")
    if not isinstance(messages, list):
        raise _BadRecord(f"'messages' is {type(messages).__name__} {messages!r:.40}, not a list; {CHAT_HINT}")
    out = []
    for j, m in enumerate(messages, 1):
        if not isinstance(m, dict):
            raise _BadRecord(f"message {j} is {type(m).__name__} {m!r:.40}, not an object; {CHAT_HINT}")
        m = {k: v for k, v in m.items() if v is not None}  # Arrow fills keys other rows have with null
        if m.get("role") not in ROLES:
            raise _BadRecord(f"message {j} has role {m.get('role')!r}; roles are {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            got = type(m["content"]).__name__ if "content" in m else "none"
            raise _BadRecord(f"message {j} ({m['role']}) has no string 'content' ({got}); {CHAT_HINT}")
        out.append(m)
    if not any(m["role"] == "assistant" for m in out):
        raise _BadRecord("has no assistant message, so nothing to train on; add the assistant's answer")
    return out


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"dataset.data_paths: {where} {what}; fix the record or remove it from the file")


def _empty(path: str) -> ConfigError:
    return ConfigError(
        f"dataset.data_paths: {path} holds no records (empty file); give records in it, or remove it "
        "from dataset.data_paths"
    )


def _scan_json(path: str, kind: str) -> None:
    """Find the first mistake in a JSON Lines file or JSON array with json.loads and raise it with its
    line (the datasets / pyarrow errors name a row in a block, not a line). Returns when all is fine."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise _bad(f"{path}:", f"is not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not text.strip():
        raise _empty(path)
    if text.lstrip().startswith("["):  # one JSON array of records
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise _bad(
                f"{path}:{err.lineno}:", f"is malformed JSON ({err.msg}, column {err.colno})"
            ) from None
        for r, obj in enumerate(rows, 1):
            try:
                _parse(obj, kind)
            except _BadRecord as err:
                raise _bad(f"{path}: row {r}:", str(err)) from None
        if not rows:
            raise _empty(path)
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise _bad(
                f"{path}:{lineno}:", f"is malformed JSON ({err.msg}, column {err.colno}; a JSON Lines file "
                "holds one JSON object per line)"
            ) from None  # fmt: skip
        try:
            _parse(obj, kind)
        except _BadRecord as err:
            raise _bad(f"{path}:{lineno}:", str(err)) from None


def _load_table(path: str, builder: str, cache_dir: str | None) -> dict[str, list]:
    """The file's columns as Python lists, through datasets.load_dataset (quiet: no progress bars)."""
    import datasets

    datasets.disable_progress_bars()
    quiet = logging.getLogger("datasets")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs its own error before raising; ours names the line
    try:
        ds = datasets.load_dataset(builder, data_files=[path], split="train", cache_dir=cache_dir)
    finally:
        quiet.setLevel(level)
    return ds[:] if ds.num_rows else {}


# what datasets.Dataset.save_to_disk / DatasetDict.save_to_disk write at the top of their folder
SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")


def load_folder_table(path: str, cache_dir: str | None) -> dict[str, list]:
    """A folder's columns: one `datasets.save_to_disk` folder (a DatasetDict's `train` split), or a folder
    of .jsonl / .json / .parquet data files as `datasets.load_dataset(folder)` reads it (its train split)."""
    import datasets

    datasets.disable_progress_bars()
    saved = any(os.path.isfile(os.path.join(path, name)) for name in SAVED_DATASET_FILES)
    try:
        ds = datasets.load_from_disk(path) if saved else datasets.load_dataset(path, cache_dir=cache_dir)
    except Exception as err:  # datasets raises FileNotFoundError, ValueError, DataFilesNotFoundError, ...
        first = (str(err) or repr(err)).splitlines()[0][:200]
        raise ConfigError(
            f"dataset.data_paths: the folder {path} cannot be read as a dataset ({type(err).__name__}: "
            f"{first}); give a folder written by datasets' save_to_disk, a folder of .jsonl / .json / "
            ".parquet files, or one such file"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            splits = sorted(ds)
            raise ConfigError(
                f"dataset.data_paths: the folder {path} holds the splits {splits} and no 'train' split, "
                f"which is the one read; give the split's own folder (e.g. {os.path.join(path, splits[0])}) "
                "for a save_to_disk dataset, or name the split's files train.* in a folder of data files"
            )
        ds = ds["train"]
    return ds[:] if ds.num_rows else {}


def read_table(path: str, cache_dir: str | None) -> tuple[dict[str, list], str]:
    """(columns, what it was read as: "folder", "parquet" or "json") of one dataset.data_paths entry."""
    if os.path.isdir(path):
        table = load_folder_table(path, cache_dir)
        if not table:
            raise _empty(path)
        return table, "folder"
    if not os.path.isfile(path):
        raise ConfigError(
            f"dataset.data_paths entry {path!r} is neither a file nor a folder: give .jsonl, .json or "
            ".parquet files, or a datasets folder"
        )
    if os.path.getsize(path) == 0:
        raise _empty(path)
    builder = "parquet" if path.endswith(".parquet") else "json"
    return _load_table(path, builder, cache_dir), builder


def read_records(paths: Sequence[str], kind: str, cache_dir: str | None = None) -> list[Record]:
    """Every record of the files, in order; each mistake is one ConfigError naming the file and line."""
    records: list[Record] = []
    for path in map(str, paths):
        builder = "folder" if os.path.isdir(path) else "parquet" if path.endswith(".parquet") else "json"
        try:
            table, builder = read_table(path, cache_dir)
        except ConfigError:
            raise
        except Exception as err:  # datasets raises DatasetGenerationError, ValueError, even StopIteration
            if builder == "json":
                _scan_json(path, kind)  # raises the mistake with its line
            first = (str(err) or repr(err)).splitlines()[0][:200]
            cause = f"; {str(err.__cause__).splitlines()[0][:200]}" if err.__cause__ else ""
            raise ConfigError(
                f"dataset.data_paths: {path} cannot be read as {builder} "
                f"({type(err).__name__}: {first}{cause}); "
                "give a valid .jsonl / .json / .parquet file"
            ) from None
        n = len(next(iter(table.values()))) if table else 0
        if not n:
            raise _empty(path)
        for row in range(n):
            # Arrow gives every row each column some row has: null where this one has no such key
            obj = {k: col[row] for k, col in table.items() if col[row] is not None}
            try:
                value = _parse(obj, kind)
            except _BadRecord as err:
                if builder == "json":
                    _scan_json(path, kind)  # names the line; rows and lines differ with blank lines
                raise _bad(f"{path}: row {row + 1}:", str(err)) from None
            records.append(Record(value, path, row))
    return records


def where(record: Record) -> str:
    """file:line of a JSON Lines record, file: row N otherwise (found again only for error messages)."""
    if record.path.endswith(".parquet") or os.path.isdir(record.path):
        return f"{record.path}: row {record.row + 1}"
    with open(record.path, encoding="utf-8") as f:
        head = f.read(4096).lstrip()
        if head.startswith("["):
            return f"{record.path}: row {record.row + 1}"
        f.seek(0)
        seen = -1
        for lineno, line in enumerate(f, 1):
            seen += bool(line.strip())
            if seen == record.row:
                return f"{record.path}:{lineno}"
    return f"{record.path}: row {record.row + 1}"


# ----------------------------------------------------------------------------------------- tokenizing


def _tokenize_texts(tokenizer, texts: list[str], records: list[Record]) -> list[list[int]]:
    """Token ids of each text: the tokenizer's batched call when it has one."""
    if hasattr(tokenizer, "tokenize_batch"):
        return tokenizer.tokenize_batch(texts)
    out = []
    limit = tokenizer.vocab_size - 1  # NullTokenizer: ids 0..num_ids-1 plus eod = num_ids
    for text, record in zip(texts, records, strict=True):
        try:
            ids = tokenizer.tokenize(text)
        except ValueError as err:
            raise ConfigError(f"dataset.data_paths: {where(record)}: {err}") from None
        bad = [t for t in ids if not 0 <= t <= limit] if isinstance(tokenizer, NullTokenizer) else []
        if bad:
            raise ConfigError(
                f"dataset.data_paths: {where(record)}: token id {bad[0]} is outside the NullTokenizer's ids "
                f"0..{limit}; fix the data, or raise tokenizer.vocab_size / model.vocab_size"
            )
        out.append(ids)
    return out


def tokenize_sft(
    records: list[Record], tokenizer, answer_only_loss: bool
) -> list[tuple[list[int], np.ndarray]]:
    """(ids, mask) per record: ids = input + output + [eod]; mask 1 where a token is trained on."""
    out = []
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        inputs = _tokenize_texts(tokenizer, [r.value[0] for r in chunk], chunk)
        outputs = _tokenize_texts(tokenizer, [r.value[1] for r in chunk], chunk)
        for a, b in zip(inputs, outputs, strict=True):
            ids = [*a, *b, tokenizer.eod]
            mask = np.ones(len(ids), dtype=np.uint8)
            if answer_only_loss:
                mask[: len(a)] = 0
            out.append((ids, mask))
    return out


def require_chat_template(tokenizer) -> None:
    if not getattr(tokenizer, "has_chat_template", False):
        name = getattr(tokenizer, "path", type(tokenizer).__name__)
        raise ConfigError(
            f"tokenizer.tokenizer_model={name!r} has no chat template, which dataset.kind=chat renders the "
            "messages with; use a tokenizer folder whose tokenizer_config.json has a chat_template, or "
            "dataset.kind=sft"
        )


def _render(tokenizer, convs: list[list[dict]], chunk: list[Record], owner: list[int], gen: bool):
    """Token ids of the conversations; a template that fails is one ConfigError naming the record."""
    try:
        return tokenizer.apply_chat_template(convs, add_generation_prompt=gen)
    except Exception:  # jinja's errors (a template's raise_exception too): find the record that fails
        for conv, i in zip(convs, owner, strict=True):
            try:
                tokenizer.apply_chat_template([conv], add_generation_prompt=gen)
            except Exception as err:
                raise ConfigError(
                    f"dataset.data_paths: {where(chunk[i])}: the chat template of tokenizer.tokenizer_model="
                    f"{tokenizer.path!r} fails on the conversation's first {len(conv)} messages "
                    f"({type(err).__name__}: {str(err)[:200]}); fix the conversation or the template"
                ) from None
        raise


def _prefix_error(tokenizer, record: Record, n: int) -> ConfigError:
    return ConfigError(
        f"tokenizer.tokenizer_model={tokenizer.path!r}: its chat template renders the first {n} messages of "
        f"{where(record)} to tokens that are not a prefix of the whole conversation's, so the assistant "
        "tokens cannot be located for dataset.answer_only_loss; use a template that renders a conversation "
        "turn by turn, or set dataset.answer_only_loss=false"
    )


def _prefix_lengths(
    tokenizer, chunk: list[Record], full: list[list[int]], keys: list[tuple[int, int]], parts: list[list[int]]
) -> dict[tuple[int, int], int]:
    """(conversation, messages rendered) -> the render's length in tokens, checked to be a prefix of the
    full render."""
    out = {}
    for (k, n), part in zip(keys, parts, strict=True):
        if full[k][: len(part)] != part:
            raise _prefix_error(tokenizer, chunk[k], n)
        out[k, n] = len(part)
    return out


def tokenize_chat(
    records: list[Record], tokenizer, answer_only_loss: bool
) -> list[tuple[list[int], np.ndarray]]:
    """(ids, mask) per record: ids = the chat template over all messages. Assistant message i spans
    [len(render(messages[:i] + generation prompt)), len(render(messages[:i+1]))) in tokens."""
    require_chat_template(tokenizer)
    out = []
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        convs = [r.value for r in chunk]
        full = _render(tokenizer, convs, chunk, list(range(len(chunk))), gen=False)
        if not answer_only_loss:
            out += [(ids, np.ones(len(ids), dtype=np.uint8)) for ids in full]
            continue
        # batched renders of every prompt before an assistant message and every prefix through one
        # (a conversation ending with the assistant's message ends where its full render ends)
        heads, head_of, ends, end_of = [], [], [], []
        for k, conv in enumerate(convs):
            for i, m in enumerate(conv):
                if m["role"] == "assistant":
                    heads.append(conv[:i])
                    head_of.append((k, i))
                    if i + 1 < len(conv):
                        ends.append(conv[: i + 1])
                        end_of.append((k, i + 1))
        head_ids = _render(tokenizer, heads, chunk, [k for k, _ in head_of], gen=True)
        end_ids = _render(tokenizer, ends, chunk, [k for k, _ in end_of], gen=False)
        starts = _prefix_lengths(tokenizer, chunk, full, head_of, head_ids)
        stops = _prefix_lengths(tokenizer, chunk, full, end_of, end_ids)
        masks = [np.zeros(len(ids), dtype=np.uint8) for ids in full]
        for k, i in head_of:
            masks[k][starts[k, i] : stops.get((k, i + 1), len(full[k]))] = 1
        out += list(zip(full, masks, strict=True))
    return out


# ------------------------------------------------------------------------------------- split samples


def fit_samples(
    pairs: list[tuple[list[int], np.ndarray]], limit: int, truncation: str
) -> tuple[TokenizedSamples, int, int]:
    """Samples of at most `limit` ids (truncation right: cut; drop: left out), without the ones left with
    no loss tokens; also how many were too long and how many had no loss tokens."""
    kept_ids, kept_mask = [], []
    too_long = no_loss = 0
    for ids, mask in pairs:
        if len(ids) > limit:
            too_long += 1
            if truncation == "drop":
                continue
            ids, mask = ids[:limit], mask[:limit]
        if not mask[1:].any():  # the label of token t is ids[t + 1]: mask[0] trains nothing
            no_loss += 1
            continue
        kept_ids.append(np.asarray(ids, dtype=np.int64))
        kept_mask.append(mask)
    offsets = np.zeros(len(kept_ids) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in kept_ids], out=offsets[1:])
    empty = np.zeros(0, dtype=np.int64)
    ids_flat = np.concatenate(kept_ids) if kept_ids else empty
    mask_flat = np.concatenate(kept_mask) if kept_mask else empty.astype(np.uint8)
    return TokenizedSamples(ids_flat, mask_flat, offsets), too_long, no_loss


def pad_id(tokenizer) -> int:
    return tokenizer.pad if tokenizer.pad >= 0 else tokenizer.eod


class SFTDataset(torch.utils.data.Dataset):
    """One sample per row, padded on the right to seq_length (loss mask 0 on the padding)."""

    def __init__(self, samples: TokenizedSamples, num_samples: int, seq_length: int, seed: int, pad: int):
        self.samples = samples
        self.num_samples = int(num_samples)
        self.seq_length = int(seq_length)
        self.pad = int(pad)
        self.order = EpochOrder(len(samples), seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        if not 0 <= idx < self.num_samples:
            raise IndexError(idx)
        ids, mask = self.samples.sample(self.order(idx))
        n, s = len(ids) - 1, self.seq_length
        tokens = np.full(s, self.pad, dtype=np.int64)
        labels = np.full(s, self.pad, dtype=np.int64)
        loss_mask = np.zeros(s, dtype=np.float32)
        tokens[:n], labels[:n], loss_mask[:n] = ids[:-1], ids[1:], mask[1:]
        return {
            "tokens": torch.from_numpy(tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "position_ids": torch.arange(s, dtype=torch.int64),
        }


# ------------------------------------------------------------------------------------------ building


def _log(level: int, message: str) -> None:
    """On rank 0 only: every rank builds the same datasets."""
    if is_rank_zero():
        logger.log(level, message)


def split_samples(records: list[Record], data: DataPlan, tokenizer, split: str = "train") -> TokenizedSamples:
    """The records' samples for a split, fit to the row limit; one warning counts what was cut or left out."""
    tokenize: Callable = tokenize_sft if data.kind == "sft" else tokenize_chat
    pairs = tokenize(records, tokenizer, data.answer_only_loss)
    size = data.packed_sequence_size or data.seq_length
    what = "dataset.packed_sequence_size" if data.packed_sequence_size else "model.seq_length"
    samples, too_long, no_loss = fit_samples(pairs, size + 1, data.truncation)
    how = "cut on the right" if data.truncation == "right" else "left out"
    long = (
        f"{too_long} of {len(pairs)} samples are longer than {what} + 1 = {size + 1} ids: {how} "
        f"(dataset.truncation={data.truncation})"
    )
    empty = f"{no_loss} left out with no loss tokens (nothing of the answer within the limit)"
    if too_long or no_loss:
        _log(
            logging.WARNING,
            f"dataset ({split} split): " + "; ".join([long] * bool(too_long) + [empty] * bool(no_loss)),
        )
    if not len(samples):
        fix = f"raise {what}" + (", or set dataset.truncation=right" if data.truncation == "drop" else "")
        raise ConfigError(f"dataset ({split} split): none of its samples is left ({long}; {empty}); {fix}")
    return samples


def build_sft_datasets(data: DataPlan, tokenizer) -> list[torch.utils.data.Dataset | None]:
    """Train, valid and test datasets of sft / chat records (None where a split is empty or not needed);
    packed rows when data.packed_sequence_size > 0; with blend weights, each file a source mixed in its
    weight's proportion (bridge.training.data.blend)."""
    if data.kind == "chat":
        require_chat_template(tokenizer)
    cache = os.path.join(data.cache_dir, "hf_datasets") if data.cache_dir else None

    def dataset(records: list[Record], name: str, size: int) -> torch.utils.data.Dataset:
        samples = split_samples(records, data, tokenizer, name)
        if not data.packed_sequence_size:
            return SFTDataset(samples, size, data.seq_length, data.seed, pad_id(tokenizer))

        packed = PackedDataset(
            samples, size, data.packed_sequence_size, data.seed, pad_id(tokenizer), data.pad_seq_to_mult
        )
        _log(logging.INFO, f"dataset ({name} split): {packed.describe()}")
        return packed

    if data.weights:
        sources = [read_records([path], data.kind, cache) for path in data.paths]
        return build_blended(data, sources, dataset, _log)
    records = read_records(data.paths, data.kind, cache)
    out: list[torch.utils.data.Dataset | None] = []
    ranges = split_ranges(len(records), data.split)
    check_split_documents(", ".join(data.paths), ranges, data.sample_counts, data.split_text)
    for name, (begin, end), size in zip(SPLIT_NAMES, ranges, data.sample_counts, strict=True):
        # a split the run does not read is not built (check_split_documents refused an empty one it reads)
        out.append(dataset(records[begin:end], name, size) if size else None)
    return out
