"""The dry run checks what the run will read, without torch (bridge/config/checks/files.py): data files
non-empty, a Hugging Face tokenizer folder declaring an eos token, NullTokenizer JSONL holding token ids.
Each is one ConfigError naming the field, the value, the rule and the fix."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider

REPO_ROOT = Path(__file__).resolve().parents[2]


def tiny() -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1024, seq_length=128
    )
    cfg = ConfigContainer(model=model)
    cfg.train.global_batch_size = 8
    cfg.train.train_iters = 10
    cfg.scheduler.lr_warmup_iters = 2
    cfg.validation.eval_interval = 0
    return cfg


def validate(*overrides: str):
    return build_plan(apply_overrides(tiny(), list(overrides)), 1, cuda=False)


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and ". Fix: " in text, text
    return text


# ---- data files -------------------------------------------------------------------------------------


def test_empty_indexed_files_are_refused(tmp_path):
    prefix = tmp_path / "d"
    (tmp_path / "d.bin").write_bytes(b"\0" * 8)
    (tmp_path / "d.idx").write_bytes(b"")
    with pytest.raises(ConfigError) as err:
        validate("dataset.kind=indexed", f"dataset.data_paths=[{prefix}]")
    assert one_line(err).startswith(f"dataset.data_paths = '{prefix}': {prefix}.idx is empty (0 bytes)")
    (tmp_path / "d.idx").write_bytes(b"\0" * 8)
    with pytest.raises(ConfigError) as err:  # non-empty but no index: the plan reads its document count
        validate("dataset.kind=indexed", f"dataset.data_paths=[{prefix}]")
    assert one_line(err).startswith(
        f"dataset.data_paths = '{prefix}': {prefix}.idx is not a Megatron indexed"
    )


def test_empty_blend_entry_is_refused(tmp_path):
    full, empty = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    full.write_text('{"text": "1 2 3"}\n')
    empty.write_text("")
    with pytest.raises(ConfigError, match=rf"dataset.data_paths = '{empty}': {empty} is empty \(0 bytes\)"):
        validate("dataset.kind=jsonl", f"dataset.data_paths=['0.5',{full},'0.5',{empty}]")


# ---- NullTokenizer JSONL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"text": "the cat"}\n', "holds 'the', which is not a token id"),
        ('{"text": "1 -2"}\n', "holds '-2', which is not a token id"),
        ('{"text": "1 2 5000"}\n', "holds token id 5000, beyond the NullTokenizer's ids"),
        ('{"body": "1 2"}\n', "is not a JSON object with a 'text' string"),
        ("1 2 3 [\n", "is not JSON"),
    ],
)
def test_null_tokenizer_jsonl_must_hold_token_ids(tmp_path, text, problem):
    data = tmp_path / "d.jsonl"
    data.write_text("\n" + text)
    with pytest.raises(ConfigError) as err:
        validate("dataset.kind=jsonl", f"dataset.data_paths=[{data}]")
    message = one_line(err)
    assert message.startswith(f"dataset.data_paths = '{data}': {data}:2 {problem}"), message
    assert "ids 0..1023" in message and "HuggingFaceTokenizer" in message


def test_null_tokenizer_jsonl_of_ids_passes_and_blank_files_are_refused(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "1 2 1023"}\n{"text": "not checked: the loader reports it"}\n')
    validate("dataset.kind=jsonl", f"dataset.data_paths=[{data}]")
    data.write_text("\n\n")
    with pytest.raises(ConfigError, match=r"holds no documents \(only blank lines\)"):
        validate("dataset.kind=jsonl", f"dataset.data_paths=[{data}]")


# ---- Hugging Face tokenizer folder ------------------------------------------------------------------


def hf(folder: Path) -> tuple[str, ...]:
    return (
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={folder}",
        "~tokenizer.vocab_size",
    )


def test_missing_tokenizer_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "no-such-tokenizer"
    with pytest.raises(ConfigError) as err:
        validate(*hf(missing))
    assert one_line(err).startswith(f"tokenizer.tokenizer_model = '{missing}': does not exist")
    with pytest.raises(ConfigError, match=r"tokenizer.tokenizer_model = 'org/model': does not exist"):
        validate(*hf(Path("org/model")))  # a hub name that is not in the cache


def test_tokenizer_folder_without_tokenizer_files_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"the folder holds no tokenizer \(none of tokenizer_config.json"):
        validate(*hf(tmp_path))


@pytest.mark.parametrize(
    ("files", "accepted"),
    [
        ({"tokenizer_config.json": {"eos_token": "<eos>", "tokenizer_class": "TokenizersBackend"}}, True),
        ({"tokenizer_config.json": {"eos_token": {"content": "</s>"}}}, True),
        ({"tokenizer.json": {}, "special_tokens_map.json": {"eos_token": "</s>"}}, True),
        (
            {"tokenizer_config.json": {"tokenizer_class": "GPT2TokenizerFast"}},
            True,
        ),  # the class's default eos
        ({"tokenizer.json": {}, "config.json": {"model_type": "llama"}}, True),  # class from the model type
        ({"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"}}, False),
        ({"tokenizer_config.json": {"eos_token": None, "tokenizer_class": "TokenizersBackend"}}, False),
        ({"tokenizer.json": {}}, False),
    ],
)
def test_tokenizer_must_declare_an_eos_token(tmp_path, files, accepted):
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    if accepted:
        validate(*hf(tmp_path))
        return
    with pytest.raises(ConfigError) as err:
        validate(*hf(tmp_path))
    assert one_line(err).startswith(
        f"tokenizer.tokenizer_model = '{tmp_path}': the tokenizer declares no eos token"
    )


def test_a_saved_tokenizer_with_and_without_eos(tmp_path):
    """The rule agrees with transformers: a tokenizer saved without an eos token loads without one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(["a b c"], trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
    for eos in ("<eos>", None):
        out = tmp_path / ("with_eos" if eos else "without_eos")
        extra = {"eos_token": eos} if eos else {}
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **extra).save_pretrained(out)
        loaded = AutoTokenizer.from_pretrained(out, local_files_only=True).eos_token_id
        if eos:
            assert loaded is not None
            validate(*hf(out))
        else:
            assert loaded is None
            with pytest.raises(ConfigError, match="declares no eos token"):
                validate(*hf(out))


def test_a_hub_name_in_the_cache_is_read_from_its_snapshot(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    snapshot = cache / "models--org--model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (cache / "models--org--model" / "refs").mkdir()
    (cache / "models--org--model" / "refs" / "main").write_text("abc123")
    (snapshot / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    with pytest.raises(
        ConfigError, match="tokenizer.tokenizer_model = 'org/model': the tokenizer declares no eos"
    ):
        validate(*hf(Path("org/model")))
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    validate(*hf(Path("org/model")))


# ---- the dry run refuses them, without torch --------------------------------------------------------


def test_dry_run_refuses_empty_data(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("run_recipe", REPO_ROOT / "scripts/training/run_recipe.py")
    run_recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_recipe)
    (tmp_path / "d.bin").write_bytes(b"")
    (tmp_path / "d.idx").write_bytes(b"")
    argv = [
        "--recipe",
        "llama32_1b_pretrain_config",
        "--dry-run",
        "dataset.kind=indexed",
        f"dataset.data_paths=[{tmp_path / 'd'}]",
    ]
    assert run_recipe.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: dataset.data_paths = '{tmp_path / 'd'}': {tmp_path}/d.bin is empty"), err
    assert err.count("\n") == 1


def test_the_checks_import_no_torch():
    code = (
        "import sys, bridge.config.checks.files, bridge.config.validation\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)
