"""Qwen3-VL (interleaved M-RoPE, DeepStack) on gloo ranks (slow tier; workers/qwen3_vl_parity.py, one
launch at 1 rank and one at 2): a tiny random Qwen3VLForConditionalGeneration imported at TP=1 and TP=2
gives transformers' image+text logits, its export is bit-identical to the source files, and its parameter
count is transformers'; PP=2 with a DeepStack layer on the second stage is refused. The TP=1 launch also swaps in Megatron-Core's contiguous M-RoPE and turns DeepStack
off: each moves the logits far past the bound (measured 0.34 and 3.2 against a bound of 3.2e-4), so the
comparison sees both."""

from __future__ import annotations

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow
WORKER = REPO_ROOT / "tests/functional/workers/qwen3_vl_parity.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for ranks in (1, 2):
        workdir = str(tmp_path_factory.mktemp(f"qwen3_vl_tp{ranks}"))
        text = assert_ok(torchrun(WORKER, ranks, workdir, timeout=300))
        (out[ranks],) = payloads(text, "qwen3_vl")
    (out["pp2"],) = payloads(text, "qwen3_vl_pp2")
    return out


@pytest.mark.parametrize("tp", [1, 2])
def test_import_equals_transformers_and_export_is_bit_identical(runs, tp):
    run = runs[tp]
    # fp32: tests/tolerances.py's bound from the depth, the widths and the reference logits' magnitude
    assert run["max_logit_diff"] <= run["bound"], run
    assert run["export_differs"] is None


def test_contiguous_mrope_or_no_deepstack_fail_the_comparison(runs):
    run = runs[1]
    assert run["contiguous_mrope_diff"] > 100 * run["bound"], run
    assert run["no_deepstack_diff"] > 100 * run["bound"], run


def test_parameter_count_equals_transformers(runs):
    ours, hf = runs[1]["params"]
    assert ours == hf


def test_pp2_with_deepstack_layers_off_the_first_stage_is_refused(runs):
    refusal = runs["pp2"]["refusal"]
    assert refusal is not None and "decoder layers [2]" in refusal
    assert "num_layers_in_first_pipeline_stage >= 3" in refusal


def test_generation_with_an_image_equals_transformers_with_and_without_the_cache(runs):
    gen = runs[1]["generation"]
    assert gen["gap"] > 1e-3  # fp32 logits within ~1e-6 of transformers': the greedy choice is the same
    assert gen["True"] == gen["reference"] and gen["False"] == gen["reference"], gen
