"""Turn JSONL text into Megatron indexed data (.bin/.idx) with a local Hugging Face tokenizer.

    python scripts/data/preprocess_data.py --input corpus.jsonl --tokenizer /path/to/tokenizer \
        --output-prefix /data/corpus [--json-keys text] [--append-eod] [--workers 2]

Writes {output_prefix}_{key}_document.bin/.idx per JSON key (Megatron's naming); each JSON line is
one document. Pass the printed prefix to dataset.data_paths with dataset.kind=indexed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path


class _Encoder:
    """Per-worker tokenizer (built once per process, not pickled)."""

    def __init__(self, tokenizer_path: str, keys: list[str], append_eod: bool):
        self.tokenizer_path, self.keys, self.append_eod = tokenizer_path, keys, append_eod

    def initializer(self) -> None:
        from transformers import AutoTokenizer

        _Encoder.tok = AutoTokenizer.from_pretrained(self.tokenizer_path, local_files_only=True)

    def encode(self, line: str) -> dict[str, list[int]] | None:
        if not line.strip():
            return None
        record = json.loads(line)
        out = {}
        for key in self.keys:
            ids = _Encoder.tok(record[key], add_special_tokens=False)["input_ids"]
            if self.append_eod:
                ids.append(_Encoder.tok.eos_token_id)
            out[key] = ids
        return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="JSONL file, one document per line")
    p.add_argument("--output-prefix", required=True)
    p.add_argument("--tokenizer", required=True, help="local Hugging Face tokenizer directory")
    p.add_argument("--json-keys", nargs="+", default=["text"])
    p.add_argument("--append-eod", action="store_true", help="end every document with the eos token")
    p.add_argument("--workers", type=int, default=1)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    encoder = _Encoder(args.tokenizer, args.json_keys, args.append_eod)
    encoder.initializer()
    if args.append_eod and _Encoder.tok.eos_token_id is None:
        print(f"error: --append-eod: tokenizer {args.tokenizer} has no eos token", file=sys.stderr)
        return 2
    dtype = DType.optimal_dtype(len(_Encoder.tok))
    Path(args.output_prefix).parent.mkdir(parents=True, exist_ok=True)
    prefixes = {k: f"{args.output_prefix}_{k}_document" for k in args.json_keys}
    builders = {k: IndexedDatasetBuilder(p + ".bin", dtype=dtype) for k, p in prefixes.items()}

    start, docs, tokens = time.perf_counter(), 0, 0
    with open(args.input, encoding="utf-8") as f:
        if args.workers > 1:
            pool = multiprocessing.Pool(args.workers, initializer=encoder.initializer)
            encoded = pool.imap(encoder.encode, f, chunksize=32)
        else:
            pool, encoded = None, map(encoder.encode, f)
        for doc in encoded:
            if doc is None:
                continue
            for key, ids in doc.items():
                builders[key].add_document(torch.tensor(np.asarray(ids, dtype=np.int64)), [len(ids)])
                tokens += len(ids)
            docs += 1
        if pool is not None:
            pool.close()
            pool.join()
    for key, builder in builders.items():
        builder.finalize(prefixes[key] + ".idx")
    elapsed = time.perf_counter() - start
    for prefix in prefixes.values():
        print(f"wrote {prefix}.bin/.idx: {docs} documents, {tokens} tokens in {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
