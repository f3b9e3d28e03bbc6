"""Training data: mock determinism, JSONL epochs, DP sharding + resume, preprocess_data -> GPTDataset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bridge.config.checks.data import blend_paths, parse_split
from bridge.config.run_plan import DataPlan, build_plan
from bridge.config.sections import TokenizerConfig
from bridge.errors import ConfigError
from bridge.training.data.jsonl import JsonlDataset
from bridge.training.data.loaders import build_iterator
from bridge.training.data.mock import MockDataset
from bridge.training.data.samplers import DataParallelSampler
from bridge.training.data.splits import split_ranges
from bridge.training.data.tokenizer import HFTokenizer, NullTokenizer, build_tokenizer


def data_plan(
    kind: str, paths: list[str], split: str, sizes: tuple, seq_length: int, seed: int, **kw
) -> DataPlan:
    """The DataPlan validation would give for these dataset settings."""
    found, weights = blend_paths(paths) if paths else ([], None)
    fields = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, num_workers=0,
                  cache_dir=None) | kw  # fmt: skip
    return DataPlan(kind=kind, paths=tuple(found), weights=tuple(weights) if weights else None,
                    split=parse_split(split), split_text=split, seq_length=seq_length, seed=seed,
                    sample_counts=sizes, **fields)  # fmt: skip


REPO = Path(__file__).resolve().parents[2]
WORDS = "the cat sat on a mat while dog ran far away from big red house".split()


def _make_tokenizer(tmp: Path) -> Path:
    """A word-level tokenizer trained locally with `tokenizers` (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
    out = tmp / "tok"
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(out)
    return out


def _make_jsonl(path: Path, n_docs: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) for _ in range(n_docs)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return docs


def test_mock_is_a_function_of_seed_and_index():
    a = MockDataset(100, 16, 50, seed=7)
    b = MockDataset(100, 16, 50, seed=7)
    c = MockDataset(100, 16, 50, seed=8)
    s = a[42]
    assert torch.equal(s["tokens"], b[42]["tokens"])
    assert not torch.equal(s["tokens"], c[42]["tokens"])
    assert not torch.equal(s["tokens"], a[43]["tokens"])
    assert s["tokens"].shape == (16,) and int(s["tokens"].max()) < 50
    # labels are the next tokens: sample i's labels[:-1] == tokens[1:]
    assert torch.equal(s["labels"][:-1], s["tokens"][1:])
    assert torch.equal(s["position_ids"], torch.arange(16))
    with pytest.raises(IndexError):
        a[100]


def test_sampler_shards_disjointly_and_resumes():
    total, mbs, dp = 48, 2, 3
    per_rank = [list(DataParallelSampler(total, 0, mbs, r, dp)) for r in range(dp)]
    seen = [i for batches in per_rank for b in batches for i in b]
    assert sorted(seen) == list(range(total))  # every sample exactly once across DP ranks
    assert per_rank[1][0] == [2, 3] and per_rank[2][1] == [10, 11]
    # resuming at consumed=18 continues exactly where the uninterrupted sampler was
    resumed = list(DataParallelSampler(total, 18, mbs, 1, dp))
    assert resumed == per_rank[1][3:]


def test_iterator_resume_matches_uninterrupted():
    ds = MockDataset(64, 8, 100, seed=3)
    full = build_iterator(ds, 0, 2, dp_rank=1, dp_size=2)
    batches = [next(full) for _ in range(6)]
    resumed = build_iterator(ds, 3 * 2 * 2, 2, dp_rank=1, dp_size=2)
    for expected in batches[3:]:
        got = next(resumed)
        assert torch.equal(got["tokens"], expected["tokens"])
    assert batches[0]["tokens"].shape == (2, 8)


def test_jsonl_windows_do_not_repeat_within_an_epoch():
    stream = np.arange(1 + 10 * 4, dtype=np.int64)  # exactly 10 windows of 4 (+1 extra token)
    ds = JsonlDataset(stream, num_samples=25, seq_length=4, seed=0, eod=-1)
    firsts = [int(ds[i]["tokens"][0]) for i in range(25)]
    assert sorted(firsts[:10]) == list(range(0, 40, 4))
    assert sorted(firsts[10:20]) == list(range(0, 40, 4))
    assert firsts[:10] != firsts[10:20]  # each epoch reshuffled
    s = ds[3]
    assert torch.equal(s["labels"], s["tokens"] + 1)


def test_split_parsing():
    assert parse_split("969,30,1") == pytest.approx((0.969, 0.030, 0.001))
    assert split_ranges(10, parse_split("8,2")) == [(0, 8), (8, 10), (10, 10)]
    with pytest.raises(ConfigError, match="dataset.split"):
        parse_split("a,b")


def test_sample_counts_are_what_the_run_reads():
    from bridge.config.container import ConfigContainer
    from bridge.models.gpt_provider import GPTModelProvider

    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
    )
    cfg = ConfigContainer(model=model)
    cfg.train.train_iters, cfg.train.global_batch_size, cfg.scheduler.lr_warmup_iters = 10, 8, 0
    cfg.validation.eval_interval, cfg.validation.eval_iters = 5, 2
    # train: iters x gbs; valid: the loop's iters // interval evaluations x eval_iters x gbs; the test
    # split is never read (Megatron-LM's formula asks one more evaluation and eval_iters x gbs of test)
    assert build_plan(cfg, 1, cuda=False).data.sample_counts == (80, 2 * 2 * 8, 0)
    cfg.validation.eval_interval = 11  # past train_iters: never evaluates
    assert build_plan(cfg, 1, cuda=False).data.sample_counts == (80, 0, 0)
    cfg.validation.eval_interval = 0
    assert build_plan(cfg, 1, cuda=False).data.sample_counts == (80, 0, 0)


def test_tokenizer_checks(tmp_path):
    assert build_tokenizer(TokenizerConfig(), 128).vocab_size == 128
    assert NullTokenizer(10).eod == 10 and NullTokenizer(10).vocab_size == 11
    with pytest.raises(ConfigError, match="model.vocab_size"):
        build_tokenizer(TokenizerConfig(vocab_size=300), 256)


def test_preprocess_then_indexed_dataset_reproduces_the_text(tmp_path):
    tok_dir = _make_tokenizer(tmp_path)
    docs = _make_jsonl(tmp_path / "c.jsonl", 40)
    prefix = tmp_path / "out" / "corpus"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/data/preprocess_data.py"),
            "--input",
            str(tmp_path / "c.jsonl"),
            "--tokenizer",
            str(tok_dir),
            "--output-prefix",
            str(prefix),
            "--append-eod",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    tok = HFTokenizer(str(tok_dir))
    expected = [tok.tokenize(d) + [tok.eod] for d in docs]
    indexed = IndexedDataset(str(prefix) + "_text_document")
    assert len(indexed) == len(docs)
    for i in (0, 17, 39):
        assert indexed[i].tolist() == expected[i]

    from bridge.training.data.indexed import build_indexed_datasets

    plan = data_plan("indexed", [str(prefix) + "_text_document"], "9,1,0", (30, 4, 0), seq_length=8, seed=5,
                     cache_dir=str(tmp_path / "cache"))  # fmt: skip
    train, valid, test = build_indexed_datasets(plan, tok)
    assert test is None and len(train) >= 30 and len(valid) >= 4
    stream = [t for doc in expected for t in doc]
    s = train[0]
    # every sample is a contiguous window of the document stream, labels shifted by one
    window = s["tokens"].tolist() + [s["labels"][-1].item()]
    assert any(stream[j : j + 9] == window for j in range(len(stream) - 8))
    assert torch.equal(s["labels"][:-1], s["tokens"][1:])
    # weights/prefix pairs
    assert blend_paths(["0.3", str(prefix) + "_text_document"]) == ([str(prefix) + "_text_document"], [0.3])


def test_jsonl_through_build_datasets_with_document_masking(tmp_path):
    from bridge.training.data.loaders import build_datasets

    # NullTokenizer reads whitespace-separated ids; eod (= 50) ends every document
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": " ".join(map(str, range(i, i + 5)))}) + "\n"
                                              for i in range(0, 40, 5)))  # fmt: skip
    plan = data_plan("jsonl", [str(tmp_path / "d.jsonl")], "1", (6, 0, 0), seq_length=8, seed=0,
                     reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True)  # fmt: skip
    train, valid, test = build_datasets(plan, NullTokenizer(50))
    assert valid is None and test is None and len(train) == 6
    stream = [t for i in range(0, 40, 5) for t in [*range(i, i + 5), 50]]
    for idx in range(6):
        s = train[idx]
        start = stream.index(int(s["tokens"][0]))
        assert s["tokens"].tolist() == stream[start : start + 8]
        eods = [j for j, t in enumerate(s["tokens"].tolist()) if t == 50]
        for j in eods:
            assert s["loss_mask"][j] == 0  # eod_mask_loss
            if j + 1 < 8:
                assert s["position_ids"][j + 1] == 0  # positions restart after a document
                assert bool(s["attention_mask"][0, j + 1, j])  # True = masked: no attention across documents
