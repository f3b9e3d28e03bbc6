"""DPO's data and rules (issue 48): preference pairs tokenized as transformers' tokenizer writes them, with
the loss mask on each answer and its eos only; every bad input is one ConfigError before launch, naming
the field or the file and line. The loss itself is checked against transformers + torch in
tests/functional/test_dpo_parity.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.config.compose import compose
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.training.data.loaders import build_datasets
from bridge.training.data.tokenizer import HFTokenizer
from recipes import get_recipe
from tests.finetune_fixtures import make_tiny_llama

ROWS = [
    {"prompt": "what is the sky", "chosen": "the sky is blue", "rejected": "a dog ran"},
    {"prompt": "where is the cat", "chosen": "on the mat", "rejected": "fast car red bus"},
]


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("hf"))


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(hf: Path, data: Path, *extra: str):
    cfg, _ = compose(
        get_recipe("llama32_1b_dpo_config")(),
        overrides=[
            f"checkpoint.pretrained_checkpoint={hf}",
            f"dataset.data_paths=[{data}]",
            'dataset.split="1,0,0"',
            "model.seq_length=16",
            "train.global_batch_size=2",
            "train.train_iters=2",
            "validation.eval_iters=0",
            "validation.eval_interval=0",
            "scheduler.lr_warmup_iters=0",
            "checkpoint.save=null",
            "checkpoint.save_interval=0",
            "logger.tensorboard_dir=null",
            *extra,
        ],
    )
    return cfg


def test_a_pair_is_two_rows_with_the_loss_on_each_answer_and_eos(tmp_path, hf):
    from transformers import AutoTokenizer

    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    plan = build_plan(config(hf, data), 1, cuda=False)
    assert plan.dpo is not None and plan.dpo.reference == "frozen_copy" and plan.dpo.beta == 0.1
    assert (
        "objective: DPO (beta 0.1, label smoothing 0.0), reference: frozen_copy; a micro batch is 2 x 1 rows"
        in (plan.summary_lines())
    )
    train, _, _ = build_datasets(plan.data, HFTokenizer(str(hf)))
    ref = AutoTokenizer.from_pretrained(hf)
    seen = {}
    for i in range(len(train)):  # one epoch: every pair once
        item = train[i]
        assert item["tokens"].shape == (2, 16)
        for r in ROWS:
            p = ref(r["prompt"], add_special_tokens=False).input_ids
            if item["tokens"][0, : len(p)].tolist() == p:
                seen[r["prompt"]] = (r, item, p)
    assert len(seen) == len(ROWS)
    for r, item, p in seen.values():
        for row, answer in enumerate((r["chosen"], r["rejected"])):
            a = ref(answer, add_special_tokens=False).input_ids + [ref.eos_token_id]
            ids = p + a
            n = len(ids) - 1
            assert item["tokens"][row, :n].tolist() == ids[:-1]
            assert item["labels"][row, :n].tolist() == ids[1:]
            # the labels the loss counts: exactly the answer and its eos
            assert item["labels"][row][item["loss_mask"][row].bool()].tolist() == a
            assert item["loss_mask"][row, n:].sum() == 0


def test_a_row_missing_rejected_is_one_error_naming_the_line_before_launch(tmp_path, hf):
    data = write_jsonl(tmp_path / "pairs.jsonl", [ROWS[0], {"prompt": "a", "chosen": "b"}])
    with pytest.raises(
        ConfigError, match=r"pairs.jsonl:2 has no 'rejected'.*\"rejected\": \"<other answer>\""
    ):
        build_plan(config(hf, data), 1, cuda=False)


@pytest.mark.parametrize(
    "override, match",
    [
        ("dpo.beta=0", r"dpo.beta = 0.0: must be a finite number > 0"),
        ("dpo.loss_type=kto", r"dpo.loss_type = 'kto': must be one of sigmoid, ipo"),
        ("dpo.reference=adapters_off", r"dpo.reference = 'adapters_off': .*peft.scheme is null"),
        ("dataset.packed_sequence_size=16", r"dataset.packed_sequence_size = 16: a preference sample is a"),
    ],
)
def test_bad_dpo_settings_are_one_error_each(tmp_path, hf, override, match):
    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    with pytest.raises(ConfigError, match=match):
        build_plan(config(hf, data, override), 1, cuda=False)


def test_ipo_takes_no_label_smoothing(tmp_path, hf):
    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    cfg = config(hf, data, "dpo.loss_type=ipo", "dpo.label_smoothing=0.1")
    with pytest.raises(ConfigError, match=r"dpo.label_smoothing = 0.1: smooths the sigmoid loss only"):
        build_plan(cfg, 1, cuda=False)


def test_context_parallelism_is_refused_with_the_reason(tmp_path, hf):
    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    cfg = config(hf, data, "model.context_parallel_size=2")
    with pytest.raises(ConfigError, match=r"model.context_parallel_size = 2: DPO sums each sequence"):
        build_plan(cfg, 2, cuda=False)


def test_lora_dpo_takes_the_base_with_adapters_off_as_reference(tmp_path, hf):
    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    plan = build_plan(config(hf, data, "peft.scheme=lora"), 1, cuda=False)
    assert plan.dpo.reference == "adapters_off"


def test_a_zero_blend_weight_is_refused(tmp_path, hf):
    data = write_jsonl(tmp_path / "pairs.jsonl", ROWS)
    cfg, _ = compose(config(hf, data), overrides=[f"dataset.data_paths=['0',{data}]"])
    with pytest.raises(ConfigError, match=r"blend weights must be > 0"):
        build_plan(cfg, 1, cuda=False)


def test_chat_pairs_put_the_loss_on_the_assistant_turn_the_template_renders(tmp_path, hf):
    from transformers import AutoTokenizer

    prompt = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "what is the sky"}]
    row = {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": "the sky is blue"}],
        "rejected": [{"role": "assistant", "content": "a dog ran"}],
    }
    data = write_jsonl(tmp_path / "chat_pairs.jsonl", [row, row])
    plan = build_plan(config(hf, data), 1, cuda=False)
    train, _, _ = build_datasets(plan.data, HFTokenizer(str(hf)))
    item = train[0]
    ref = AutoTokenizer.from_pretrained(hf)
    head = ref.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    head = list(head["input_ids"] if hasattr(head, "keys") else head)  # a BatchEncoding in recent releases
    for r, key in enumerate(("chosen", "rejected")):
        full = ref.apply_chat_template(prompt + row[key], tokenize=True)
        full = list(full["input_ids"] if hasattr(full, "keys") else full)
        assert full[: len(head)] == head
        n = len(full) - 1
        assert item["tokens"][r, :n].tolist() == full[:-1]
        assert item["labels"][r][item["loss_mask"][r].bool()].tolist() == full[len(head) :]


def test_a_chat_pair_with_a_user_turn_as_answer_is_one_error(tmp_path, hf):
    row = {"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "user", "content": "x"}],
           "rejected": [{"role": "assistant", "content": "y"}]}  # fmt: skip
    data = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(
        ConfigError, match=r"bad.jsonl:1 'chosen' holds a message whose role is not 'assistant'"
    ):
        build_plan(config(hf, data), 1, cuda=False)
