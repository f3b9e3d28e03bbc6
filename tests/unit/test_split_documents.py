"""Small datasets: every split the run reads holds documents (one ConfigError before training), and no
samples are asked of a split the run never reads (Megatron-Core's GPTDataset loops forever on an empty
split asked for samples: issue 42)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config.checks.split_documents import idx_sequence_count, megatron_split_bounds
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError

WORKERS = Path(__file__).resolve().parents[1] / "functional" / "workers"
sys.path.insert(0, str(WORKERS))
from train_common import tiny_config, write_learnable_indexed_data  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPLITS = ["969,30,1", "98,2,0", "1,0,0", "8,1,1", "1,1,1", "999,1,0", "90,10"]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("n", [1, 10, 200, 500, 501, 12345])
def test_bounds_are_megatron_cores(n, split):
    """Reference: Megatron-Core's own split matrix and its rounding in _build_megatron_dataset_splits."""
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    from bridge.config.checks.data import parse_split

    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    expected = [(int(round(m[0] * n)), int(round(m[1] * n))) if m else (0, 0) for m in matrix]
    assert megatron_split_bounds(n, parse_split(split)) == expected


def _indexed_plan(tmp_path, n_docs, *overrides):
    prefix = write_learnable_indexed_data(tmp_path / f"d{n_docs}" / "count", n_docs=n_docs)
    cfg = tiny_config(
        "dataset.kind=indexed",
        f"dataset.data_paths=[{prefix}]",
        f"dataset.cache_dir={tmp_path}/cache",
        "train.train_iters=4",
        *overrides,
    )
    return cfg, prefix


@pytest.mark.parametrize("n_docs", [1, 10, 200])
def test_indexed_data_without_evaluation_builds_at_the_default_split(tmp_path, n_docs):
    """eval_interval=0: only the train split is asked for samples and built; the 0-document test split
    of the default 969,30,1 (every n <= 500) is not, so the build returns (it looped forever before)."""
    from bridge.training.data.indexed import build_indexed_datasets
    from bridge.training.data.tokenizer import build_tokenizer

    cfg, prefix = _indexed_plan(tmp_path, n_docs, 'dataset.split="969,30,1"')
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    assert idx_sequence_count(prefix) == len(IndexedDataset(prefix)) == n_docs
    plan = build_plan(cfg, 1, cuda=False)
    assert plan.data.sample_counts == (4 * 8, 0, 0)
    tokenizer = build_tokenizer(plan.config.tokenizer, plan.provider.padded_vocab_size())
    train, valid, test = build_indexed_datasets(plan.data, tokenizer)
    assert valid is None and test is None and len(train) >= 32
    assert train[31]["tokens"].shape == (32,)


@pytest.mark.parametrize(
    ("n_docs", "split", "counts"),
    [
        (1, "969,30,1", "train 1, validation 0, test 0"),
        (10, "969,30,1", "train 10, validation 0, test 0"),
        (200, "999,1,0", "train 200, validation 0, test 0"),
        (10, "98,2,0", "train 10, validation 0, test 0"),
    ],
)
def test_evaluation_on_an_empty_validation_split_is_one_error_with_a_fix_that_works(
    tmp_path, n_docs, split, counts
):
    cfg, prefix = _indexed_plan(
        tmp_path, n_docs, f'dataset.split="{split}"', "validation.eval_interval=2", "validation.eval_iters=1"
    )
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, 1, cuda=False)
    msg = str(err.value)
    assert msg.startswith(f"dataset.split = '{split}': {prefix}.idx holds {n_docs} documents")
    assert f"cuts into {counts}: the validation split gets no document" in msg
    assert "asks it for 16 samples" in msg and "validation.eval_interval=0" in msg
    from bridge.config.overrides import apply_overrides

    if n_docs >= 2:  # the suggested split gives the validation split a document: the plan builds
        fix = re.search(r"e\.g\. '(dataset\.split=\"[0-9,]+\")'", msg).group(1)
        plan = build_plan(apply_overrides(cfg, [fix]), 1, cuda=False)
        assert plan.data.sample_counts[1] == 2 * 8
    else:
        assert "add documents to the data (at least 2" in msg
    # the other fix: no evaluation
    assert (
        build_plan(apply_overrides(cfg, ["validation.eval_interval=0"]), 1, cuda=False).data.sample_counts[1]
        == 0
    )


def test_evaluation_that_never_happens_asks_no_validation_samples(tmp_path):
    # train_iters 4 < eval_interval 5: the loop never evaluates, so the 0-document split is not read
    cfg, _ = _indexed_plan(tmp_path, 10, "validation.eval_interval=5", "validation.eval_iters=1")
    assert build_plan(cfg, 1, cuda=False).data.sample_counts == (32, 0, 0)


def test_documents_of_no_tokens_are_refused(tmp_path):
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = str(tmp_path / "empty")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for length in (0, 0, 5):  # the last document (the validation split's) is not empty
        builder.add_document(torch.arange(length, dtype=torch.int64), [length])
    builder.finalize(prefix + ".idx")
    cfg = tiny_config("dataset.kind=indexed", f"dataset.data_paths=[{prefix}]", 'dataset.split="2,1,0"')
    with pytest.raises(
        ConfigError, match=r"the train split gets 2 documents of 0 tokens, while train.train_iters"
    ):
        build_plan(cfg, 1, cuda=False)


def _jsonl(path: Path, n_docs: int) -> str:
    path.write_text("".join(json.dumps({"text": " ".join(str((i + k) % 200) for k in range(40))}) + "\n"
                            for i in range(n_docs)))  # fmt: skip
    return str(path)


@pytest.mark.parametrize("n_docs", [1, 10, 200])
def test_jsonl_small_datasets(tmp_path, n_docs):
    from bridge.training.data.loaders import build_datasets
    from bridge.training.data.tokenizer import build_tokenizer

    path = _jsonl(tmp_path / "d.jsonl", n_docs)
    cfg = tiny_config("dataset.kind=jsonl", f"dataset.data_paths=[{path}]", "train.train_iters=4")
    plan = build_plan(cfg, 1, cuda=False)  # the default split, no evaluation: the test split is not read
    tok = build_tokenizer(plan.config.tokenizer, plan.provider.padded_vocab_size())
    train, valid, test = build_datasets(plan.data, tok)
    assert len(train) == 32 and valid is None and test is None
    from bridge.config.overrides import apply_overrides

    evaluating = apply_overrides(cfg, ["validation.eval_interval=2", "validation.eval_iters=1"])
    plan = build_plan(evaluating, 1, cuda=False)
    if n_docs < 50:  # 969,30,1 gives the validation split round(0.03 n) = 0 documents
        with pytest.raises(ConfigError, match=rf"{path} holds {n_docs} documents, .*the validation split gets no "
                           r"document, while validation .* asks it for 16 samples"):  # fmt: skip
            build_datasets(plan.data, tok)
    else:
        _, valid, _ = build_datasets(plan.data, tok)
        assert len(valid) == 16


@pytest.mark.parametrize("n_docs", [1, 10, 200])
def test_sft_small_datasets(tmp_path, n_docs):
    from bridge.training.data.loaders import build_datasets
    from bridge.training.data.tokenizer import build_tokenizer

    path = tmp_path / "sft.jsonl"
    path.write_text(
        "".join(json.dumps({"input": f"{i} 1 2", "output": f"3 4 {i}"}) + "\n" for i in range(n_docs))
    )
    cfg = tiny_config("dataset.kind=sft", f"dataset.data_paths=[{path}]", "train.train_iters=4",
                      "validation.eval_interval=2", "validation.eval_iters=1")  # fmt: skip
    plan = build_plan(cfg, 1, cuda=False)
    tok = build_tokenizer(plan.config.tokenizer, plan.provider.padded_vocab_size())
    if n_docs < 50:
        with pytest.raises(
            ConfigError, match=rf"holds {n_docs} documents, .*the validation split gets no document"
        ):
            build_datasets(plan.data, tok)
    else:
        train, valid, test = build_datasets(plan.data, tok)
        assert len(train) == 32 and len(valid) == 16 and test is None


def test_preprocessed_hf_tokenizer_data_at_the_default_split(tmp_path):
    """scripts/data/preprocess_data.py output (an HF tokenizer), 200 documents: the plan counts its
    documents from the .idx header, and the datasets build without evaluation."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = "the cat sat on a mat while dog ran far away".split()
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(words)], trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(
        tmp_path / "tok"
    )
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(words[: 3 + i % 8])}) + "\n" for i in range(200)))
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/data/preprocess_data.py"), "--input", str(src), "--tokenizer",
         str(tmp_path / "tok"), "--output-prefix", str(tmp_path / "out"), "--append-eod"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    prefix = str(tmp_path / "out_text_document")
    assert idx_sequence_count(prefix) == 200
    cfg = tiny_config("dataset.kind=indexed", f"dataset.data_paths=[{prefix}]", f"dataset.cache_dir={tmp_path}/c",
                      "tokenizer.tokenizer_type=HuggingFaceTokenizer", f"tokenizer.tokenizer_model={tmp_path}/tok",
                      "train.train_iters=2")  # fmt: skip
    plan = build_plan(cfg, 1, cuda=False)
    from bridge.training.data.indexed import build_indexed_datasets
    from bridge.training.data.tokenizer import build_tokenizer

    train, valid, test = build_indexed_datasets(plan.data, build_tokenizer(plan.config.tokenizer, 256))
    assert len(train) >= 16 and valid is None and test is None
