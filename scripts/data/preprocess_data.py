"""Turn JSONL text into Megatron indexed data (.bin/.idx) with a local Hugging Face tokenizer.

    python scripts/data/preprocess_data.py --input corpus.jsonl --tokenizer /path/to/tokenizer \
        --output-prefix /data/corpus [--json-keys text] [--append-eod] [--workers 2]

Writes {output_prefix}_{key}_document.bin/.idx per JSON key (Megatron's naming); each JSON line is
one document. Pass the printed prefix to dataset.data_paths with dataset.kind=indexed.

Bad input (a missing file or tokenizer, a line that is not UTF-8 or not a JSON object, a missing key,
text that is not a string, no document at all) exits 2 with one `error:` line naming the file and line.
The files are written under temporary names and renamed when complete: a failure leaves no partial output.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from bridge.cli.user_error import report_user_error  # noqa: E402
from bridge.errors import ConfigError  # noqa: E402

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _line_error(source: str, lineno: int, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{source}:{lineno}: {problem}. Fix: {fix}")


def parse_record(raw: bytes, source: str, lineno: int, keys: list[str]) -> dict[str, str] | None:
    """The texts of one JSONL line by key (None for a blank line); a ConfigError naming file and line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _line_error(
            source,
            lineno,
            f"not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}); is this a JSONL file?",
            "pass a UTF-8 JSONL file, one JSON object per line",
        ) from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise _line_error(
            source, lineno, f"not valid JSON ({err.msg} at column {err.colno})", "correct or remove that line"
        ) from None
    if not isinstance(record, dict):
        raise _line_error(
            source,
            lineno,
            f"a JSON {_JSON_TYPES.get(type(record), 'value')}, not an object",
            'write one object per line: {"text": ...}',
        )
    texts = {}
    for key in keys:
        if key not in record:
            found = ", ".join(sorted(record)[:5]) or "none"
            raise _line_error(
                source,
                lineno,
                f"no key {key!r} (keys: {found})",
                "add it, or name the text's key with --json-keys",
            )
        if not isinstance(record[key], str):
            raise _line_error(
                source,
                lineno,
                f"{key!r} is a JSON {_JSON_TYPES.get(type(record[key]), 'value')}, not a string",
                "store the document's text as a JSON string",
            )
        texts[key] = record[key]
    return texts


class _Encoder:
    """Per-worker tokenizer (built once per process, not pickled)."""

    def __init__(self, tokenizer_path: str, source: str, keys: list[str], append_eod: bool):
        self.tokenizer_path, self.source, self.keys, self.append_eod = (
            tokenizer_path,
            source,
            keys,
            append_eod,
        )

    def initializer(self) -> None:
        _Encoder.tok = load_tokenizer(self.tokenizer_path)

    def encode(self, numbered: tuple[int, bytes]) -> dict[str, list[int]] | None:
        lineno, raw = numbered
        texts = parse_record(raw, self.source, lineno, self.keys)
        if texts is None:
            return None
        out = {}
        for key, text in texts.items():
            ids = _Encoder.tok(text, add_special_tokens=False)["input_ids"]
            if self.append_eod:
                ids.append(_Encoder.tok.eos_token_id)
            out[key] = ids
        return out


def load_tokenizer(path: str):
    if not Path(path, "tokenizer_config.json").is_file() and not Path(path, "tokenizer.json").is_file():
        what = (
            "does not exist" if not Path(path).exists() else "holds no tokenizer.json / tokenizer_config.json"
        )
        raise ConfigError(f"--tokenizer {path}: {what}. Fix: pass a local Hugging Face tokenizer folder")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        reason = " ".join(str(err).split())[:300]
        raise ConfigError(
            f"--tokenizer {path}: transformers cannot load it ({reason}). Fix: pass a tokenizer folder "
            "written by save_pretrained"
        ) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="JSONL file, one document per line")
    p.add_argument("--output-prefix", required=True)
    p.add_argument("--tokenizer", required=True, help="local Hugging Face tokenizer directory")
    p.add_argument("--json-keys", nargs="+", default=["text"])
    p.add_argument("--append-eod", action="store_true", help="end every document with the eos token")
    p.add_argument("--workers", type=int, default=1)
    return p.parse_args(argv)


def check_input(path: str) -> None:
    p = Path(path)
    if not p.is_file():
        what = "does not exist" if not p.exists() else "is not a file"
        raise ConfigError(f"--input {path}: {what}. Fix: pass a JSONL file, one document per line")


def convert(args: argparse.Namespace, staged: dict[str, str]) -> tuple[int, int]:
    """Tokenize every line into the staged .bin/.idx files; (documents, tokens)."""
    encoder = _Encoder(args.tokenizer, args.input, args.json_keys, args.append_eod)
    encoder.initializer()
    if args.append_eod and _Encoder.tok.eos_token_id is None:
        raise ConfigError(
            f"--append-eod: tokenizer {args.tokenizer} has no eos token. Fix: drop --append-eod, or use a "
            "tokenizer that declares eos_token"
        )
    import numpy as np
    import torch

    from bridge.parallel.runtime import quiet_known_warnings

    quiet_known_warnings()  # before Megatron-Core's import: some fire there
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    dtype = DType.optimal_dtype(len(_Encoder.tok))
    Path(args.output_prefix).parent.mkdir(parents=True, exist_ok=True)  # after the checks above
    builders = {k: IndexedDatasetBuilder(p + ".bin", dtype=dtype) for k, p in staged.items()}
    docs = tokens = 0
    with open(args.input, "rb") as f:
        lines = enumerate(f, start=1)
        pool = None
        if args.workers > 1:
            pool = multiprocessing.Pool(args.workers, initializer=encoder.initializer)
            encoded = pool.imap(encoder.encode, lines, chunksize=32)
        else:
            encoded = map(encoder.encode, lines)
        try:
            for doc in encoded:
                if doc is None:
                    continue
                for key, ids in doc.items():
                    builders[key].add_document(torch.tensor(np.asarray(ids, dtype=np.int64)), [len(ids)])
                    tokens += len(ids)
                docs += 1
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
    for key, builder in builders.items():
        builder.finalize(staged[key] + ".idx")
    if docs == 0:
        raise ConfigError(
            f"--input {args.input}: holds no document (only blank lines, or empty). Fix: pass a JSONL file "
            "with at least one object per line; training cannot read an empty dataset"
        )
    return docs, tokens


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prefixes = {k: f"{args.output_prefix}_{k}_document" for k in args.json_keys}
    staged = {k: f"{p}.tmp-{os.getpid()}" for k, p in prefixes.items()}  # renamed when complete
    start = time.perf_counter()
    try:
        check_input(args.input)
        docs, tokens = convert(args, staged)
        for key, prefix in prefixes.items():
            for ext in (".bin", ".idx"):
                os.replace(staged[key] + ext, prefix + ext)
    except ConfigError as err:
        return report_user_error(err)
    except OSError as err:
        where = err.filename or args.output_prefix
        return report_user_error(
            f"{where}: {err.strerror or err}. Fix: check the path, and that the output folder is writable "
            "and has room for about as many bytes as the input"
        )
    finally:
        for path in staged.values():
            for ext in (".bin", ".idx"):
                Path(path + ext).unlink(missing_ok=True)
    elapsed = time.perf_counter() - start
    for prefix in prefixes.values():
        print(f"wrote {prefix}.bin/.idx: {docs} documents, {tokens} tokens in {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
