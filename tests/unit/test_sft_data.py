"""SFT / chat data: loss masks against hand-computed token ids, the chat template's prefix rule, one
error naming file:line per data mistake, truncation, splits and epochs, and .json / .parquet inputs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bridge.config.checks.data import parse_split
from bridge.config.run_plan import DataPlan
from bridge.errors import ConfigError
from bridge.training.data.loaders import build_datasets
from bridge.training.data.sft import build_sft_datasets, read_records
from bridge.training.data.tokenizer import HFTokenizer, NullTokenizer
from bridge.training.logging import logger
from tests.finetune_fixtures import make_tokenizer, write_chat_jsonl, write_sft_jsonl

PAD, EOS = "<pad>", "<eos>"


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> HFTokenizer:
    return HFTokenizer(str(make_tokenizer(tmp_path_factory.mktemp("tok"))))


def ids_of(tok: HFTokenizer, text: str) -> list[int]:
    """The vocabulary's ids of whitespace-separated words (the fixture tokenizer is word-level)."""
    vocab = tok._tok.get_vocab()
    return [vocab[w] for w in text.split()]


def plan(tmp: Path, kind: str, paths: list, counts=(4, 0, 0), split="1,0,0", seq_length=16, **kw) -> DataPlan:
    fields = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, num_workers=0,
                  cache_dir=str(tmp / "cache"), seed=3) | kw  # fmt: skip
    return DataPlan(kind=kind, paths=tuple(map(str, paths)), weights=None, split=parse_split(split),
                    split_text=split, seq_length=seq_length, sample_counts=counts, **fields)  # fmt: skip


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_epoch(ds) -> list[dict]:
    return [ds[i] for i in range(len(ds))]


def unpadded_ids(sample: dict, pad: int) -> list[int]:
    """The sample's ids back (tokens and the last label); the fixture's pad id never occurs in data."""
    n = int((sample["labels"] != pad).sum())
    return sample["tokens"][:n].tolist() + sample["labels"][n - 1 : n].tolist()


def render_by_hand(tok: HFTokenizer, messages: list[dict]) -> list[int]:
    """The fixture's chat template, written out: "<|role|> content <|end|> " per message."""
    return ids_of(tok, " ".join(f"<|{m['role']}|> {m['content']} <|end|>" for m in messages))


@pytest.fixture
def warnings_seen():
    """The bridge.training warnings logged while the test runs (the logger may not propagate)."""
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


def test_sft_sample_masks_the_prompt_and_pads_on_the_right(tmp_path, tok):
    f = write_jsonl(tmp_path / "a.jsonl", [{"input": "the cat sat", "output": "on a mat"}])
    (ds, valid, test) = build_sft_datasets(plan(tmp_path, "sft", [f], counts=(2, 0, 0), seq_length=10), tok)
    assert valid is None and test is None and len(ds) == 2
    ids = ids_of(tok, "the cat sat on a mat") + ids_of(tok, EOS)
    pad = ids_of(tok, PAD)[0]
    s = ds[0]
    assert sorted(s) == ["labels", "loss_mask", "position_ids", "tokens"]
    assert s["tokens"].tolist() == ids[:-1] + [pad] * 4
    assert s["labels"].tolist() == ids[1:] + [pad] * 4
    # labels: cat sat | on a mat eos | pad...: the prompt's labels and the padding carry no loss
    assert s["loss_mask"].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert s["position_ids"].tolist() == list(range(10))
    assert [str(s[k].dtype) for k in ("tokens", "labels", "loss_mask", "position_ids")] == [
        "torch.int64",
        "torch.int64",
        "torch.float32",
        "torch.int64",
    ]

    full = build_sft_datasets(plan(tmp_path, "sft", [f], seq_length=10, answer_only_loss=False), tok)[0]
    assert full[0]["loss_mask"].tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]


def test_sft_with_the_null_tokenizer_reads_ids_and_pads_with_eod(tmp_path):
    f = write_jsonl(tmp_path / "n.jsonl", [{"input": "5 6", "output": "7"}])
    s = build_sft_datasets(plan(tmp_path, "sft", [f], seq_length=6), NullTokenizer(50))[0][0]
    assert s["tokens"].tolist() == [5, 6, 7, 50, 50, 50]
    assert s["labels"].tolist() == [6, 7, 50, 50, 50, 50]
    assert s["loss_mask"].tolist() == [0, 1, 1, 0, 0, 0]
    bad = write_jsonl(tmp_path / "b.jsonl", [{"input": "5", "output": "7"}, {"input": "5 x", "output": "7"}])
    with pytest.raises(ConfigError, match=r"b\.jsonl:2: .*'x' is not one"):
        build_sft_datasets(plan(tmp_path, "sft", [bad]), NullTokenizer(50))


CONVERSATION = [
    {"role": "system", "content": "the cat"},
    {"role": "user", "content": "a dog"},
    {"role": "assistant", "content": "yes no"},
    {"role": "user", "content": "why"},
    {"role": "assistant", "content": "sun"},
]


def test_chat_loss_is_on_the_assistant_turns_only(tmp_path, tok):
    f = write_jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATION}])
    s = build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=24), tok)[0][0]
    # the fixture's template: "<|role|> content <|end|> " per turn
    ids = ids_of(tok, "<|system|> the cat <|end|> <|user|> a dog <|end|> <|assistant|> yes no <|end|> "
                      "<|user|> why <|end|> <|assistant|> sun <|end|>")  # fmt: skip
    trained = [0] * 9 + [1, 1, 1] + [0] * 4 + [1, 1]  # "yes no <|end|>" and "sun <|end|>"
    assert len(trained) == len(ids) == 18
    n = len(ids) - 1
    assert s["tokens"][:n].tolist() == ids[:-1] and s["labels"][:n].tolist() == ids[1:]
    assert s["loss_mask"].tolist() == trained[1:] + [0] * (24 - n)

    full = build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=24, answer_only_loss=False), tok)[0][0]
    assert full["loss_mask"].tolist() == [1] * n + [0] * (24 - n)

    # two assistant messages in a row, then turns that are not trained on
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "yes"},
                {"role": "assistant", "content": "no"}, {"role": "system", "content": "sun"},
                {"role": "user", "content": "why"}]  # fmt: skip
    f = write_jsonl(tmp_path / "d.jsonl", [{"messages": messages}])
    s = build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=24), tok)[0][0]
    ids = render_by_hand(tok, messages)
    trained = [0] * 4 + [1, 1] + [0] + [1, 1] + [0] * 6  # "yes <|end|>", "no <|end|>" (not their tags)
    assert len(trained) == len(ids) == 15
    assert s["tokens"][:14].tolist() == ids[:-1] and s["loss_mask"][:14].tolist() == trained[1:]


def test_a_template_that_breaks_the_prefix_rule_is_an_error(tmp_path, tok):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tok.path)
    # the first word depends on the number of messages: a prefix renders differently
    hf.chat_template = "{% if messages|length > 3 %}big {% else %}small {% endif %}" + hf.chat_template
    hf.save_pretrained(tmp_path / "broken")
    broken = HFTokenizer(str(tmp_path / "broken"))
    f = write_jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATION[1:3]}, {"messages": CONVERSATION}])
    with pytest.raises(ConfigError, match=r"broken'.*first 2 messages of .*c\.jsonl:2 .*not a prefix") as err:
        build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=32), broken)
    assert "answer_only_loss=false" in str(err.value)
    # without answer-only masking the template is only rendered whole, which is fine
    ds = build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=32, answer_only_loss=False), broken)[0]
    assert ds[0]["tokens"][0].item() in (ids_of(tok, "big")[0], ids_of(tok, "small")[0])


def test_a_template_that_refuses_a_conversation_names_the_record(tmp_path, tok):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tok.path)
    hf.chat_template = (
        "{% if messages[-1]['content'] == 'why' %}{{ raise_exception('no why') }}{% endif %}"
        + (hf.chat_template)
    )
    hf.save_pretrained(tmp_path / "strict")
    f = write_jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATION[:3]}, {"messages": CONVERSATION}])
    with pytest.raises(
        ConfigError, match=r"c\.jsonl:2: the chat template .*strict'.* first 4 messages .*no why"
    ):
        build_sft_datasets(plan(tmp_path, "chat", [f], seq_length=32), HFTokenizer(str(tmp_path / "strict")))


def test_chat_needs_a_tokenizer_with_a_template(tmp_path, tok):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tok.path)
    hf.chat_template = None
    hf.save_pretrained(tmp_path / "plain")
    (tmp_path / "plain" / "chat_template.jinja").unlink(missing_ok=True)
    f = tmp_path / "c.jsonl"
    write_chat_jsonl(f, 3)
    with pytest.raises(ConfigError, match=r"plain'.* has no chat template"):
        build_sft_datasets(plan(tmp_path, "chat", [f]), HFTokenizer(str(tmp_path / "plain")))


USER, ANSWER = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}


def chat(*messages) -> str:
    return json.dumps({"messages": list(messages)})


SFT, CHAT = json.dumps({"input": "a", "output": "b"}), chat(USER, ANSWER)
BAD_DATA = [  # (kind, file text, where, what)
    ("sft", f'{SFT}\n\n{{"input": "a", oops}}\n', ":3:", "malformed JSON"),
    ("sft", f'{SFT}\n{{"input": "a"}}\n', ":2:", "has no 'output'"),
    ("sft", f'{SFT}\n\n{SFT}\n{{"input": "a", "output": 5}}\n', ":4:", "'output' is int 5, not a string"),
    ("sft", f"{SFT}\n[1, 2]\n", ":2:", "not a JSON object"),
    ("chat", f'{CHAT}\n{{"messages": "hi"}}\n', ":2:", "'messages' is str 'hi', not a list"),
    ("chat", f'{CHAT}\n{{"msgs": []}}\n', ":2:", "has no 'messages'"),
    ("chat", f"{CHAT}\n{chat({'role': 'bot', 'content': 'a'}, ANSWER)}\n", ":2:", "role 'bot'; roles are"),
    (
        "chat",
        f"{CHAT}\n{chat({'role': 'user'}, ANSWER)}\n",
        ":2:",
        "message 1 (user) has no string 'content'",
    ),
    (
        "chat",
        f"{CHAT}\n{chat(USER, {'role': 'assistant', 'content': [1]})}\n",
        ":2:",
        "message 2 (assistant) has",
    ),
    ("chat", f"{CHAT}\n{CHAT}\n{chat(USER)}\n", ":3:", "no assistant message"),
]


@pytest.mark.parametrize("kind,text,where,what", BAD_DATA)
def test_each_data_mistake_is_one_error_naming_file_and_line(tmp_path, tok, kind, text, where, what):
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        build_sft_datasets(plan(tmp_path, kind, [f]), tok)
    assert f"{f}{where}" in str(err.value) and what in str(err.value), str(err.value)
    assert "fix" in str(err.value)


def test_empty_files_and_json_arrays_name_file_and_row(tmp_path, tok):
    write_sft_jsonl(tmp_path / "ok.jsonl", 3)
    for name, text in (("empty.jsonl", ""), ("blank.json", "\n\n"), ("none.json", "[]")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=rf"{tmp_path / name} holds no records \(empty file\)"):
            build_sft_datasets(plan(tmp_path, "sft", [tmp_path / "ok.jsonl", tmp_path / name]), tok)
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps([{"input": "a", "output": "b"}, {"input": "a", "output": 7}], indent=1))
    with pytest.raises(ConfigError, match=r"arr\.json: row 2: 'output' is int 7"):
        build_sft_datasets(plan(tmp_path, "sft", [arr]), tok)
    arr.write_text('[{"input": "a", "output": "b"},\n{"input": "a" "output": "c"}]')
    with pytest.raises(ConfigError, match=r"arr\.json:2: is malformed JSON"):
        build_sft_datasets(plan(tmp_path, "sft", [arr]), tok)


def test_json_and_parquet_give_the_same_samples_as_jsonl(tmp_path, tok):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = write_sft_jsonl(tmp_path / "a.jsonl", 12, seed=1)
    (tmp_path / "a.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    got = {}
    for name in ("a.jsonl", "a.json", "a.parquet"):
        ds = build_sft_datasets(
            plan(tmp_path, "sft", [tmp_path / name], counts=(12, 0, 0), seq_length=20), tok
        )
        got[name] = [s["tokens"].tolist() + s["loss_mask"].tolist() for s in one_epoch(ds[0])]
    assert got["a.jsonl"] == got["a.json"] == got["a.parquet"]
    assert {(r.value, r.row) for r in read_records([tmp_path / "a.parquet"], "sft")} == {
        ((r["input"], r["output"]), i) for i, r in enumerate(rows)
    }
    pq.write_table(
        pa.Table.from_pylist([{"input": "a", "output": "b"}, {"input": "c"}]), tmp_path / "m.parquet"
    )
    with pytest.raises(ConfigError, match=r"m\.parquet: row 2: has no 'output' \(keys: \['input'\]\)"):
        build_sft_datasets(plan(tmp_path, "sft", [tmp_path / "m.parquet"]), tok)


def sft_rows(lengths: list[tuple[int, int]]) -> list[dict]:
    return [{"input": " ".join(["cat"] * a), "output": " ".join(["dog"] * b)} for a, b in lengths]


@pytest.mark.parametrize("truncation", ["right", "drop"])
def test_truncation_cuts_or_drops_and_warns_once_with_the_count(tmp_path, tok, warnings_seen, truncation):
    # ids = input + output + eos; the limit is seq_length + 1 = 9 ids
    lengths = [(2, 2), (3, 6), (2, 3), (9, 1), (4, 4)]  # 5, 10, 6, 11, 9 ids: two too long
    f = write_jsonl(tmp_path / "t.jsonl", sft_rows(lengths))
    ds = build_sft_datasets(
        plan(tmp_path, "sft", [f], counts=(20, 0, 0), seq_length=8, truncation=truncation), tok
    )[0]
    pad = ids_of(tok, PAD)[0]
    cat, dog, eos = ids_of(tok, f"cat dog {EOS}")
    samples = {tuple(unpadded_ids(s, pad)): s["loss_mask"].sum().item() for s in one_epoch(ds)}
    # loss on the dogs and eos; (3, 6) cut on the right keeps 9 ids: its dogs, no eos; (9, 1) keeps no dog
    want = {(cat,) * 2 + (dog,) * 2 + (eos,): 3, (cat,) * 2 + (dog,) * 3 + (eos,): 4,
            (cat,) * 4 + (dog,) * 4 + (eos,): 5}  # fmt: skip
    if truncation == "right":
        want[(cat,) * 3 + (dog,) * 6] = 6
    assert samples == want and len(ds.samples) == len(want)
    how = "cut on the right" if truncation == "right" else "left out"
    message = (f"dataset (train split): 2 of 5 samples are longer than model.seq_length + 1 = 9 ids: {how} "
               f"(dataset.truncation={truncation})")  # fmt: skip
    if truncation == "right":
        message += "; 1 left out with no loss tokens (nothing of the answer within the limit)"
    assert warnings_seen == [message]


def test_a_split_left_empty_is_an_error(tmp_path, tok):
    f = write_jsonl(tmp_path / "t.jsonl", sft_rows([(9, 1), (3, 9)]))
    left = r"none of its samples is left \(2 of 2 samples are longer .*; 0 left out .*\)"
    with pytest.raises(
        ConfigError, match=left + "; raise model.seq_length, or set dataset.truncation=right$"
    ):
        build_sft_datasets(plan(tmp_path, "sft", [f], seq_length=8, truncation="drop"), tok)


def test_splits_epochs_and_build_datasets(tmp_path, tok):
    rows = write_chat_jsonl(tmp_path / "c.jsonl", 20, seed=2)
    p = plan(tmp_path, "chat", [tmp_path / "c.jsonl"], counts=(32, 3, 0), split="8,2,0", seq_length=64)
    train, valid, test = build_datasets(p, tok)
    assert test is None and len(train) == 32 and len(valid) == 3
    assert len(train.samples) == 16 and len(valid.samples) == 4  # records 0..15 and 16..19

    pad = ids_of(tok, PAD)[0]
    epoch0 = [unpadded_ids(train[i], pad) for i in range(16)]
    epoch1 = [unpadded_ids(train[i], pad) for i in range(16, 32)]
    want = [render_by_hand(tok, r["messages"]) for r in rows[:16]]
    assert sorted(epoch0) == sorted(epoch1) == sorted(want)  # every sample once per epoch
    assert epoch0 != epoch1  # reshuffled by (seed, epoch)
    assert [unpadded_ids(s, pad) for s in one_epoch(build_datasets(p, tok)[0])[:16]] == epoch0
    none = build_datasets(
        plan(tmp_path, "chat", [tmp_path / "c.jsonl"], counts=(4, 0, 0), split="8,2,0"), tok
    )
    assert none[1] is None


def test_datasets_folders_give_the_same_records_as_jsonl(tmp_path, tok):
    """A `save_to_disk` folder (Dataset or DatasetDict) and a folder of data files, read by `datasets`
    itself, give the JSONL file's records and samples; bad folders and rows are one error each."""
    import datasets

    from bridge.training.data.preference import read_preference_records

    rows = write_sft_jsonl(tmp_path / "a.jsonl", 12, seed=2)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dict"))
    (tmp_path / "files").mkdir()
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "files" / "train.parquet"))
    want = [((r["input"], r["output"]), i) for i, r in enumerate(rows)]
    samples = {}
    for name in ("a.jsonl", "saved", "dict", "files"):
        assert [(r.value, r.row) for r in read_records([tmp_path / name], "sft")] == want, name
        ds = build_sft_datasets(
            plan(tmp_path, "sft", [tmp_path / name], counts=(12, 0, 0), seq_length=20), tok
        )
        samples[name] = [s["tokens"].tolist() + s["loss_mask"].tolist() for s in one_epoch(ds[0])]
    assert samples["a.jsonl"] == samples["saved"] == samples["dict"] == samples["files"]

    datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "noval")
    )
    with pytest.raises(
        ConfigError, match=r"holds the splits \['validation'\] and no 'train' split.*noval/validation"
    ):
        read_records([tmp_path / "noval"], "sft")
    (tmp_path / "empty_folder").mkdir()
    with pytest.raises(ConfigError, match=r"the folder .*empty_folder cannot be read as a dataset"):
        read_records([tmp_path / "empty_folder"], "sft")
    datasets.Dataset.from_list([{"input": "a", "output": "b"}, {"input": "c", "output": None}]).save_to_disk(
        str(tmp_path / "bad")
    )
    with pytest.raises(ConfigError, match=r"bad: row 2: has no 'output'"):
        read_records([tmp_path / "bad"], "sft")

    pairs = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(5)]
    datasets.Dataset.from_list(pairs).save_to_disk(str(tmp_path / "pairs"))
    got = read_preference_records([tmp_path / "pairs"])
    assert [r.row for r in got] == list(range(5)) and len({repr(r.value) for r in got}) == 5
    datasets.Dataset.from_list([{"prompt": "q", "chosen": "a"}]).save_to_disk(str(tmp_path / "halfpair"))
    with pytest.raises(ConfigError, match=r"halfpair: row 1:"):
        read_preference_records([tmp_path / "halfpair"])
