"""Blended finetuning data (issue 48): SFT and preference files mixed by Megatron's blend weights, each
source's share equal to its weight over the run (within one sample at every prefix), each source visiting
its own records epoch by epoch, and the shares reported at start."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from bridge.config.checks.data import parse_split
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.training.data.loaders import build_datasets
from bridge.training.data.tokenizer import HFTokenizer
from bridge.training.logging import logger
from tests.finetune_fixtures import make_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> HFTokenizer:
    return HFTokenizer(str(make_tokenizer(tmp_path_factory.mktemp("tok"))))


def write_jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def plan(tmp: Path, kind: str, paths: list, weights, counts, split="1,0,0") -> DataPlan:
    return DataPlan(
        kind=kind, paths=tuple(paths), weights=weights, split=parse_split(split), split_text=split,
        seq_length=16, seed=3, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        num_workers=0, cache_dir=str(tmp / "cache"), sample_counts=counts, packed_sequence_size=0,
    )  # fmt: skip


def first_word(tok: HFTokenizer, ids) -> str:
    vocab = {i: w for w, i in tok._tok.get_vocab().items()}
    return vocab[int(ids[0])]


def test_sft_sources_take_their_weights_share_at_every_prefix(tmp_path, tok, caplog):
    # source a's prompts start with "cat", b's with "dog": a sample's first token names its source
    a = write_jsonl(
        tmp_path / "a.jsonl", [{"input": f"cat {w}", "output": "yes"} for w in ("red", "blue", "sun", "sky")]
    )
    b = write_jsonl(
        tmp_path / "b.jsonl", [{"input": f"dog {w}", "output": "no"} for w in ("red", "blue", "sun", "sky")]
    )
    size = 40
    propagate, logger.propagate = logger.propagate, True  # to caplog's handler
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            train, _, _ = build_datasets(plan(tmp_path, "sft", [a, b], (0.75, 0.25), (size, 0, 0)), tok)
    finally:
        logger.propagate = propagate
    sources = [first_word(tok, train[i]["tokens"]) for i in range(size)]
    for n in range(1, size + 1):
        assert abs(sources[:n].count("cat") - 0.75 * n) <= 1, n
    assert Counter(sources) == {"cat": 30, "dog": 10}
    # each source cycles through its records: a's 4 records 7 or 8 times each in its 30 samples
    seconds = Counter((first_word(tok, train[i]["tokens"]), int(train[i]["tokens"][1])) for i in range(size))
    assert sorted(v for (s, _), v in seconds.items() if s == "dog") == [2, 2, 3, 3]
    assert sorted(v for (s, _), v in seconds.items() if s == "cat") == [7, 7, 8, 8]
    assert (
        f"dataset blend (train split, 40 samples): {a}: 30 samples (75.0%, weight 0.750), {b}: 10 samples"
        in caplog.text
    )


def test_preference_sources_blend_too(tmp_path, tok):
    rows = lambda w: [{"prompt": f"{w} is", "chosen": "yes", "rejected": "no"} for _ in range(3)]  # noqa: E731
    a, b = write_jsonl(tmp_path / "a.jsonl", rows("cat")), write_jsonl(tmp_path / "b.jsonl", rows("dog"))
    train, _, _ = build_datasets(plan(tmp_path, "preference", [a, b], (1.0, 3.0), (8, 0, 0)), tok)
    assert Counter(first_word(tok, train[i]["tokens"][0]) for i in range(8)) == {"cat": 2, "dog": 6}


def test_a_source_without_records_in_a_split_it_must_feed_is_an_error(tmp_path, tok):
    a = write_jsonl(tmp_path / "a.jsonl", [{"input": "cat", "output": "yes"}] * 10)
    b = write_jsonl(tmp_path / "b.jsonl", [{"input": "dog", "output": "no"}])  # 1 record: all train
    with pytest.raises(ConfigError, match=r"b.jsonl has no records in the valid split, and its blend weight"):
        build_datasets(plan(tmp_path, "sft", [a, b], (0.5, 0.5), (4, 4, 0), split="9,1,0"), tok)


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> Path:
    from tests.finetune_fixtures import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("blend_hf") / "hf")


def _sft_plan(hf: Path, data_paths: str):
    from bridge.config.compose import compose
    from bridge.config.run_plan import build_plan
    from recipes.llama_finetune import llama32_1b_sft_config

    overrides = [
        f"checkpoint.pretrained_checkpoint={hf}", f"tokenizer.tokenizer_model={hf}", "dataset.kind=sft",
        f"dataset.data_paths={data_paths}", "model.seq_length=16", "dataset.packed_sequence_size=0",
    ]  # fmt: skip
    return build_plan(compose(llama32_1b_sft_config(), overrides=overrides)[0], 1, cuda=False)


def test_a_weighted_sft_blend_plans_and_a_weight_of_zero_or_below_is_one_error(tmp_path, hf):
    a = write_jsonl(tmp_path / "a.jsonl", [{"input": "cat", "output": "yes"}] * 10)
    b = write_jsonl(tmp_path / "b.jsonl", [{"input": "dog", "output": "no"}] * 10)
    plan_ = _sft_plan(hf, f"['0.7',{a},'0.3',{b}]")  # the weights are no files (the finetuning rules)
    assert (plan_.data.paths, plan_.data.weights) == ((a, b), (0.7, 0.3))
    for weight in ("0", "-0.5"):
        with pytest.raises(ConfigError, match=r"dataset.data_paths = .*blend weights must be > 0"):
            _sft_plan(hf, f"['{weight}',{a},'1.0',{b}]")
