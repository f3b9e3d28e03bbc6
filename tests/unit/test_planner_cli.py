"""`bridge plan` on the cases the planner once refused or misreported.

- CP is the planner's choice: a long sequence on 1 or 3 GPUs still gets a plan (at cp=1), and no message
  mentions a CP the user did not set;
- with every size fixed and memory not fitting, the derived sizes are still reported (`fits` is false);
- the unsharded 70B example is answered with its estimate and "does not fit" (exit 1);
- a malformed config.json or an unknown --model is one "error: ..." line (exit 2), no traceback.
"""

import contextlib
import io
import json
import re
import subprocess
import sys

import pytest

from bridge.cli.plan import main as plan_main
from bridge.errors import ConfigError
from bridge.parallel.layout import ParallelLayout
from bridge.parallel.param_count import count_parameters, padded_vocab_size
from bridge.parallel.planner import USABLE_FRACTION, PlanRequest, plan
from tests.unit.published_shapes import LLAMA31_70B, LLAMA32_1B, QWEN3_30B_A3B

# a context-parallel size above 1 ("cp=2", "CP=4", "context_parallel_size = 2") or the --cp flag, in a
# message about a run where the user set no --cp (the tp*pp*cp formulas are checked by value below)
_CP_ABOVE_1 = re.compile(r"((?<![\w*])(cp|CP)\s*=\s*[2-9]|context_parallel_size\D{0,4}[2-9]|--cp\b)")


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = plan_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _messages(data: dict) -> str:
    return "\n".join([*data["reasons"], *data["warnings"], *data.get("advice", [])])


# ---- CP is a choice, never a precondition -------------------------------------------------------------


@pytest.mark.parametrize("gpus", [1, 3])
def test_llama32_1b_recipe_plans_on_1_and_3_gpus(gpus):
    args = ("--model", "llama32_1b_pretrain_config", "--gpus", str(gpus))
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] and data["seq_length"] == 8192  # the recipe's 8K sequence
    # no power-of-two CP group of 2 or more divides 1 or 3 GPUs; TP=3 does not divide 8 kv heads and
    # PP=3 does not divide 16 layers, so the only layout is pure data parallelism
    assert data["context_parallel_size"] == 1
    assert (data["tensor_model_parallel_size"], data["pipeline_model_parallel_size"]) == (1, 1)
    assert data["data_parallel_size"] == gpus and data["min_gpus"] == 1
    # the recipe's global batch of 512 rounded down to a multiple of micro_batch*dp = 1*gpus
    assert data["global_batch_size"] == 512 // gpus * gpus
    assert data["memory_gb"]["total"] <= 80 * USABLE_FRACTION
    assert not _CP_ABOVE_1.search(_messages(data)), _messages(data)
    code, table, err = _run(*args)
    assert code == 0 and not _CP_ABOVE_1.search(table + err), table
    code, overrides, _ = _run(*args, "--overrides")
    assert code == 0 and "model.context_parallel_size=1" in overrides.split()
    if gpus == 3:
        assert "train.global_batch_size=510" in overrides.split()


def test_long_sequences_still_get_cp_when_the_gpus_allow_it():
    # the fallback to cp=1 comes last: 8 GPUs and an 8K sequence keep the CP=2 the sizing rule starts from
    p = plan(PlanRequest(LLAMA32_1B, 8, seq_length=8192))
    assert p.fits and p.layout.cp == 2


def test_a_tp_the_user_fixed_falls_back_to_cp_1_instead_of_raising():
    # tp=8 on 8 GPUs leaves no room for CP=2 (min_gpus would be 8*2 = 16): plan at cp=1
    code, out, err = _run("--model", "llama32_1b_pretrain_config", "--gpus", "8", "--tp", "8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["tensor_model_parallel_size"], data["context_parallel_size"]) == (8, 1)
    assert not _CP_ABOVE_1.search(_messages(data))


def test_no_valid_layout_error_names_only_what_the_user_set():
    # tp=3 does not divide 8 GPUs: the error is about --tp, with cp at its default of 1 in the formula
    code, out, err = _run("--model", "llama32_1b_pretrain_config", "--gpus", "8", "--tp", "3")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "tp*pp*cp = 3*1*1" in err and not _CP_ABOVE_1.search(err), err


def test_a_default_global_batch_is_rounded_but_a_given_one_is_kept():
    given = PlanRequest(LLAMA32_1B, 3, seq_length=8192, global_batch_size=512)
    with pytest.raises(ConfigError, match=r"global_batch_size = 512: .* 1\*3") as info:
        plan(given)
    assert not _CP_ABOVE_1.search(str(info.value))
    p = plan(PlanRequest(LLAMA32_1B, 3, seq_length=8192, global_batch_size=512, round_global_batch=True))
    assert p.fits and p.global_batch_size == 510 and p.setup().num_microbatches(p.layout.dp) == 170
    assert any(r.startswith("global_batch_size=510: the default 512") for r in p.reasons)
    code, _, err = _run("--model", "llama32_1b_pretrain_config", "--gpus", "3", "--global-batch-size", "512")
    assert code == 2 and "global_batch_size = 512" in err


# ---- every size fixed, memory not fitting: the derived sizes are still reported ------------------------


def test_all_sizes_fixed_and_not_fitting_reports_derived_sizes():
    fixed = ("--tp", "2", "--ep", "8", "--etp", "1", "--pp", "1", "--cp", "1")
    code, out, _ = _run(
        "--model", "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", "--gpus", "8", *fixed, "--json"
    )
    data = json.loads(out)
    assert code == 1 and data["fits"] is False
    assert data["memory_gb"]["total"] > data["usable_memory_gb"]
    # the arithmetic: dp = 8/(tp*pp*cp) = 8/2, edp = 8/(pp*ep*etp) = 8/8, min_gpus = pp*max(tp*cp, ep*etp)
    assert data["data_parallel_size"] == 8 // (2 * 1 * 1) == 4
    assert data["expert_data_parallel_size"] == 8 // (1 * 8 * 1) == 1
    assert data["min_gpus"] == 1 * max(2 * 1, 8 * 1) == 8
    sizes = (
        "tensor_model_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
    )
    assert [data[k] for k in sizes] == [2, 8, 1, 1, 1]
    assert data["sequence_parallel"] is True
    lay = ParallelLayout(8, tp=2, ep=8, sequence_parallel=True, model=QWEN3_30B_A3B)
    assert (lay.dp, lay.edp, lay.min_gpus) == (4, 1, 8)
    # the top-level candidate is the closest one, reported again under "closest"
    assert {k: data["closest"][k] for k in data["closest"]} == {k: data[k] for k in data["closest"]}


# ---- the unsharded example: answered, "does not fit" --------------------------------------------------


def test_unsharded_70b_fp16_on_one_gpu_prints_the_estimate_and_does_not_fit():
    # --recompute full: the recipe recomputes nothing, and a recipe's settings are what the plan keeps
    args = (
        "--model",
        "llama31_70b_pretrain_config",
        "--gpus",
        "1",
        "--memory-model",
        "seed",
        "--recompute",
        "full",
    )
    code, out, err = _run(*args, "--precision", "fp16")
    assert code == 1, err
    assert "does not fit" in out and "TP=1 PP=1 CP=1 EP=1 ETP=1 DP=1" in out
    printed = {
        m[0]: float(m[1])
        for m in re.findall(r"^  (params|grads|optimizer|activations|total) +([\d.]+)", out, re.M)
    }
    # by hand: 2 + 2 + 4 bytes per parameter (fp16 weights and grads, Adam's two fp16 states) ...
    s = LLAMA31_70B
    n = count_parameters(s).total
    assert printed["params"] == pytest.approx(2 * n / 1e9, abs=0.005)
    assert printed["grads"] == pytest.approx(2 * n / 1e9, abs=0.005)
    assert printed["optimizer"] == pytest.approx(4 * n / 1e9, abs=0.005)
    assert (n * 8 / 1e9) == pytest.approx(564.4, abs=0.1)  # 70.55B parameters
    # ... plus activations of one 8192-token micro batch (the recipe's), with full recomputation
    # (--recompute full, printed as recompute=full): each layer's input (h values, 2 bytes), one
    # layer recomputed (norms 4h + q,k,v,out 2q+2kv + gated MLP 3f) and the logits (2 + 4 bytes)
    assert "recompute=full" in out
    tokens, h, layers = 8192, s.hidden_size, s.num_layers
    head = h // s.num_attention_heads  # kv_channels unset: hidden / heads = 128
    q, kv = s.num_attention_heads * head, s.num_query_groups * head
    one_layer = tokens * (4 * h + 2 * q + 2 * kv + 3 * s.ffn_hidden_size) * 2
    logits = tokens * padded_vocab_size(s.vocab_size, 1) * (2 + 4)
    activations = layers * tokens * h * 2 + one_layer + logits
    assert printed["activations"] == pytest.approx(activations / 1e9, abs=0.005)
    assert printed["total"] == pytest.approx((8 * n + activations) / 1e9, abs=0.01)
    # the same answer as JSON
    code, js, _ = _run(*args, "--precision", "fp16", "--json")
    data = json.loads(js)
    assert code == 1 and data["fits"] is False and data["min_gpus"] == 1
    assert data["memory_gb"]["total"] == pytest.approx((8 * n + activations) / 1e9, abs=0.001)


# ---- bad input: one line, exit 2 ----------------------------------------------------------------------


GOOD = dict(
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    hidden_size=2048,
    intermediate_size=8192,
    vocab_size=128256,
    tie_word_embeddings=True,
)  # Llama 3.2 1B's published config


@pytest.mark.parametrize(
    "text,expect",
    [
        ('{"hidden_size": 2048,', "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "not an object"),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "num_attention_heads"}),
            "'num_attention_heads' is missing",
        ),
        (json.dumps({k: v for k, v in GOOD.items() if k != "vocab_size"}), "'vocab_size' is missing"),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "intermediate_size"}),
            "'intermediate_size' is missing",
        ),
        (json.dumps({**GOOD, "hidden_size": "2048"}), "hidden_size = '2048': must be a positive integer"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper"),  # json's decoder: a RecursionError before
    ],
    ids=["truncated", "empty", "list", "no-heads", "no-vocab", "no-ffn", "string-size", "100k-deep"],
)
def test_malformed_config_json_is_one_error_line(tmp_path, text, expect):
    path = tmp_path / "bad.json"
    path.write_text(text)
    code, out, err = _run("--model", str(path), "--gpus", "8")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and expect in err, err


def test_good_config_json_still_plans(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GOOD))
    code, out, _ = _run("--model", str(path), "--gpus", "8", "--json")
    assert code == 0 and json.loads(out)["params_total"] == count_parameters(LLAMA32_1B).total


def test_broken_json_through_the_console_script_has_no_traceback(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    res = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "plan", "--model", str(path), "--gpus", "1"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and "JSONDecodeError" not in res.stderr


def test_unknown_model_points_at_list_recipes_and_the_presets():
    code, out, err = _run("--model", "no_such_model", "--gpus", "8")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "run_recipe.py --list-recipes" in err
    for preset in ("llama31_70b", "llama32_1b", "qwen3_30b_a3b", "mixtral_8x7b"):
        assert preset in err, err
