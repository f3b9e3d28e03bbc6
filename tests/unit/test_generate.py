"""bridge.inference.generate in one process (TP=1) against transformers' generate, the sampling helpers,
and scripts/inference/generate.py (its argument errors, --hf-path and --megatron-path)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import FAMILIES, refused_by_installed_release

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

PROMPT = [5, 17, 42, 99, 3, 7]
NEW_TOKENS = 32
MIN_GAP = 1e-3  # HF's top-2 logit gap at every step: far above the 1e-5 bridge-vs-HF logit difference
CLI_PATH = Path(__file__).resolve().parents[2] / "scripts" / "inference" / "generate.py"


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def sources(family_sources):  # tests/unit/conftest.py
    return family_sources


@pytest.fixture(scope="module")
def cli():
    spec = importlib.util.spec_from_file_location("generate_cli", CLI_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(folder: Path):
    from bridge import AutoBridge

    provider = AutoBridge.from_hf_pretrained(folder).to_megatron_provider(load_weights=True)
    return provider, provider.provide_distributed_model(wrap_with_ddp=False)


def _hf_greedy(model, prompt: list[int], n: int, **kwargs) -> tuple[list[int], float]:
    """transformers' greedy tokens and the smallest top-2 logit gap over the steps."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=n,
        pad_token_id=0,
        output_scores=True,
        return_dict_in_generate=True,
        **kwargs,
    )
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return out.sequences[0, len(prompt) :].tolist(), min(gaps)


# ---- greedy equals transformers, every family -------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_equals_transformers_generate(family, sources):
    from bridge.inference import generate

    folder, hf = sources[family]
    if refused_by_installed_release(family):
        pytest.skip(f"{family}: refused by this megatron-core (test_conversion_tp1 checks the error)")
    provider, chunks = _build(folder)
    reference, gap = _hf_greedy(hf, PROMPT, NEW_TOKENS, eos_token_id=None)
    assert gap > MIN_GAP, f"{family}: a near-tie ({gap:.2e}) would make the comparison meaningless"
    result = generate(chunks, PROMPT, NEW_TOKENS, vocab_size=provider.vocab_size)
    assert result.ids == reference, family
    assert result.tokens_per_s > 0
    # dense RoPE, the sliding window, the hybrid (Mamba state carried in the context): recompute agrees too
    if family in ("llama", "mistral", "nemotron_h"):
        recomputed = generate(chunks, PROMPT, NEW_TOKENS, vocab_size=provider.vocab_size, kv_cache=False)
        assert recomputed.ids == reference, family


def test_eos_stops_generation_and_is_kept(sources):
    from bridge.inference import generate

    provider, chunks = _build(sources["qwen2"][0])
    full = generate(chunks, PROMPT, NEW_TOKENS, vocab_size=provider.vocab_size).ids
    stop = full[3]
    first = full.index(stop)
    result = generate(chunks, PROMPT, NEW_TOKENS, vocab_size=provider.vocab_size, eos_token_id=[999, stop])
    assert result.ids == full[: first + 1]


# ---- sampling ------------------------------------------------------------------------------------------


def test_sampling_is_seeded_and_top_k_1_is_greedy(sources):
    from bridge.inference import generate

    provider, chunks = _build(sources["llama"][0])
    vocab = provider.vocab_size
    greedy = generate(chunks, PROMPT, 16, vocab_size=vocab).ids
    first = generate(chunks, PROMPT, 16, vocab_size=vocab, temperature=1.0, top_p=0.95, seed=11).ids
    again = generate(chunks, PROMPT, 16, vocab_size=vocab, temperature=1.0, top_p=0.95, seed=11).ids
    other = generate(chunks, PROMPT, 16, vocab_size=vocab, temperature=1.0, top_p=0.95, seed=12).ids
    assert first == again
    assert first != other and first != greedy
    assert generate(chunks, PROMPT, 16, vocab_size=vocab, temperature=1.0, top_k=1, seed=3).ids == greedy


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs])


@pytest.mark.parametrize(
    ("probs", "p", "keep"),
    [
        ([0.5, 0.3, 0.15, 0.05], 0.75, [True, True, False, False]),  # 0.5 < 0.75 <= 0.8
        ([0.5, 0.3, 0.15, 0.05], 0.85, [True, True, True, False]),  # 0.8 < 0.85 <= 0.95
        ([0.5, 0.3, 0.15, 0.05], 0.4, [True, False, False, False]),  # the top token always stays
        ([0.15, 0.5, 0.05, 0.3], 0.75, [False, True, False, True]),  # unsorted input: mask in place
        ([0.15, 0.5, 0.05, 0.3], 1.0, [True, True, True, True]),
    ],
)
def test_top_p_mask_by_hand(probs, p, keep):
    from bridge.inference import top_p_mask

    assert top_p_mask(_logits(probs), p).tolist() == keep


def test_filter_logits_applies_top_k_before_top_p():
    from bridge.inference import filter_logits, top_k_mask

    logits = _logits([0.15, 0.5, 0.05, 0.3])
    assert top_k_mask(logits, 2).tolist() == [False, True, False, True]
    # on the full distribution p=0.6 keeps 0.5 and 0.3; after top-2 they are 0.625 / 0.375: 0.5 alone
    assert torch.isfinite(filter_logits(logits, top_p=0.6)).tolist() == [False, True, False, True]
    assert torch.isfinite(filter_logits(logits, top_k=2, top_p=0.6)).tolist() == [False, True, False, False]


def test_request_rules_are_config_errors(sources):
    from bridge.inference import generate

    provider, chunks = _build(sources["llama"][0])
    vocab = provider.vocab_size
    cases = [  # (prompt, max_new_tokens, options, text the message must hold)
        ([], 4, {}, "prompt_ids = []"),
        ([1, vocab], 4, {}, f"prompt_ids = [{vocab}]"),
        (PROMPT, 0, {}, "max_new_tokens = 0"),
        (PROMPT, provider.seq_length, {}, "max sequence length"),
        (PROMPT, 4, {"temperature": -1.0}, "temperature = -1.0"),
        (PROMPT, 4, {"top_p": 0.0}, "top_p = 0.0"),
    ]
    for prompt, n, options, message in cases:
        with pytest.raises(ConfigError, match="Fix:") as err:
            generate(chunks, prompt, n, vocab_size=vocab, **options)
        assert message in str(err.value), (message, str(err.value))


# ---- the CLI ----------------------------------------------------------------------------------------------


def _cli_error(cli, capsys, argv: list[str]) -> str:
    assert cli.main(argv) == cli.EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--prompt-ids", "1"], ["--hf-path / --megatron-path", "neither given", "Fix:"]),
        (["--hf-path", "a", "--megatron-path", "b", "--prompt-ids", "1"], ["both given"]),
        (["--hf-path", "a"], ["--prompt / --prompt-ids", "neither given"]),
        (["--hf-path", "a", "--prompt", "x", "--prompt-ids", "1"], ["--prompt / --prompt-ids", "both given"]),
        (["--hf-path", "a", "--prompt-ids", "1,a,2"], ["--prompt-ids='1,a,2'", "['a']", "integers"]),
        (["--hf-path", "a", "--prompt-ids", "1", "--max-new-tokens", "0"], ["--max-new-tokens=0", ">= 1"]),
        (["--hf-path", "a", "--prompt-ids", "1", "--top-p", "1.5"], ["--top-p=1.5"]),
        (["--hf-path", "a", "--prompt-ids", "1", "--tp", "2"], ["--tp x --pp", "processes (1)", "torchrun"]),
    ],
)
def test_cli_argument_errors(cli, capsys, argv, expected):
    err = _cli_error(cli, capsys, argv)
    for text in expected:
        assert text in err, (text, err)


def test_cli_ids_beyond_the_vocab(cli, capsys, sources):
    err = _cli_error(cli, capsys, ["--hf-path", str(sources["llama"][0]), "--prompt-ids", "3,250,7"])
    assert "--prompt-ids='3,250,7'" in err and "vocab size 250" in err and "[250]" in err


def test_cli_hf_path_text_equals_transformers(cli, capsys, sources):
    from transformers import AutoTokenizer

    folder, hf = sources["llama"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer("w5")["input_ids"]
    reference, _ = _hf_greedy(hf, prompt, 12)
    assert cli.main(["--hf-path", str(folder), "--prompt", "w5", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == tokenizer.decode(reference)


def test_cli_stops_at_the_folders_eos_as_transformers_does(cli, capsys, sources):
    folder, hf = sources["mistral"]
    reference, _ = _hf_greedy(hf, PROMPT, 12)  # generation_config.json's EOS id (2) ends it early
    assert len(reference) < 12 and reference[-1] == hf.generation_config.eos_token_id
    argv = ["--hf-path", str(folder), "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "12"]
    assert cli.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["ids"] == reference


def test_cli_megatron_path_json(cli, capsys, sources, tmp_path):
    from bridge import AutoBridge

    folder, hf = sources["llama"]
    AutoBridge.import_ckpt(folder, tmp_path / "ckpt")
    reference, _ = _hf_greedy(hf, PROMPT, 8, eos_token_id=None)
    argv = ["--megatron-path", str(tmp_path / "ckpt"), "--prompt-ids", ",".join(map(str, PROMPT))]
    assert cli.main([*argv, "--max-new-tokens", "8", "--ignore-eos", "--json"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    parsed = json.loads(last)
    assert last == json.dumps({"ids": parsed["ids"], "tokens_per_s": parsed["tokens_per_s"]})
    assert parsed["ids"] == reference and parsed["tokens_per_s"] > 0


def test_cli_hf_config_the_error_suggests_builds_the_checkpoint(cli, capsys, sources, tmp_path):
    import shutil

    from bridge import AutoBridge
    from bridge.checkpoint.paths import HF_ASSETS_DIR

    folder, hf = sources["llama"]
    AutoBridge.import_ckpt(folder, tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "ckpt" / HF_ASSETS_DIR)  # a checkpoint that records no HF config
    argv = ["--megatron-path", str(tmp_path / "ckpt"), "--prompt-ids", ",".join(map(str, PROMPT))]
    argv += ["--max-new-tokens", "8", "--ignore-eos", "--json"]
    assert "(--hf-config)" in _cli_error(cli, capsys, argv)
    assert cli.main([*argv, "--hf-config", str(folder)]) == 0
    reference, _ = _hf_greedy(hf, PROMPT, 8, eos_token_id=None)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["ids"] == reference
