"""The planner: docs/parallelism.md's worked examples, the memory accountings, the decision rules, the CLI."""

import contextlib
import io
import json
import subprocess
import sys

import pytest

from bridge.cli.plan import main as plan_main
from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.memory import TrainingSetup, activation_memory, estimate_memory, seed_state_memory
from bridge.parallel.param_count import count_parameters
from bridge.parallel.planner import USABLE_FRACTION, PlanRequest, plan
from bridge.parallel.planner.stages import describe_fields
from tests.unit.published_shapes import LLAMA31_8B, LLAMA31_70B, LLAMA32_1B, MIXTRAL_8X7B, QWEN3_30B_A3B

# A DeepSeek-V3-sized MoE (671.6B total, 38.1B active; MLA approximated by plain attention).
MOE_671B = ModelShape(
    64,
    128,
    128,
    18432,
    num_moe_experts=256,
    moe_router_topk=8,
    moe_ffn_hidden_size=1856,
    moe_shared_expert_intermediate_size=1856,
    hidden_size=7168,
    vocab_size=129280,
    kv_channels=56,
    seq_length=4096,
)
SMALL_MOE = ModelShape(
    16,
    16,
    8,
    4096,
    num_moe_experts=16,
    moe_router_topk=2,
    moe_ffn_hidden_size=1024,
    hidden_size=1024,
    vocab_size=32000,
)


def _check_plan(p):
    """A recommendation validates from scratch and fits the budget by its own estimate (an uneven pipeline
    with the split fields the planner chose, checked by the run's rule code, bridge.parallel.stages)."""
    assert p.fits
    lay = p.layout
    again = ParallelLayout(
        world_size=lay.world_size,
        tp=lay.tp,
        pp=lay.pp,
        vpp=lay.vpp,
        cp=lay.cp,
        ep=lay.ep,
        etp=lay.etp,
        sequence_parallel=lay.sequence_parallel,
        strategy=lay.strategy,
        dp_replicate_size=lay.dp_replicate_size,
        model=p.request.model,
        split=lay.split,
    )
    assert again == lay
    setup = p.request.setup(p.recompute)
    mem = estimate_memory(lay.model, lay, setup, p.request.memory_model)
    assert mem == p.memory
    assert mem.total <= p.request.gpu_memory_gb * USABLE_FRACTION
    if setup.global_batch_size is not None:
        assert setup.global_batch_size % (setup.micro_batch_size * lay.dp) == 0
    return lay


# ---- docs/parallelism.md's worked examples ------------------------------------------------------------


def test_seed_memory_example_70b_fp16_adam():
    # The 2+2+4 accounting: 70B, FP16, Adam, no parallelism: 140 / 140 / 280 GB;
    # TP=4, PP=4, DP=4 (64 GPUs): 8.75 / 8.75 / 17.5.
    assert seed_state_memory(70e9, ParallelLayout(1), "fp16", "adam") == (140.0, 140.0, 280.0)
    assert seed_state_memory(70e9, ParallelLayout(64, tp=4, pp=4), "fp16", "adam") == (8.75, 8.75, 17.5)


def test_seed_memory_model_through_estimate_uses_the_same_accounting():
    layout = ParallelLayout(64, tp=4, pp=4, sequence_parallel=True, model=LLAMA31_70B)
    est = estimate_memory(LLAMA31_70B, layout, TrainingSetup(4096, precision="fp16"), "seed")
    n = count_parameters(LLAMA31_70B).total
    assert (est.params, est.grads, est.optimizer) == pytest.approx((n * 2 / 16e9, n * 2 / 16e9, n * 4 / 16e9))
    assert est.params == pytest.approx(8.82, abs=0.01)  # 70.55B parameters, not a round 70B


@pytest.mark.parametrize("gpus,dp,edp", [(8, 4, 1), (16, 8, 2), (32, 16, 4)])
def test_seed_tp2_ep8_example_through_the_planner(gpus, dp, edp):
    p = plan(PlanRequest(SMALL_MOE, gpus, fixed={"tp": 2, "ep": 8, "pp": 1, "cp": 1, "etp": 1}))
    lay = _check_plan(p)
    assert (lay.tp, lay.ep, lay.min_gpus, lay.dp, lay.edp) == (2, 8, 8, dp, edp)
    assert any("fixed by --tp" in r for r in p.reasons)


def test_llama_70b_on_64_gpus_tp_inside_node_pp_across_nodes():
    p = plan(PlanRequest(LLAMA31_70B, 64, strategy="megatron"))
    lay = _check_plan(p)
    assert 4 <= lay.tp <= 8  # sized by 70B active parameters, inside one 8-GPU node
    assert lay.pp > 1 and lay.world_size // lay.pp > 8  # each pipeline stage spans more than one node
    assert lay.interleaved and LLAMA31_70B.num_layers % (lay.pp * lay.vpp) == 0
    assert lay.sequence_parallel and lay.warnings == []


def test_moe_671b_on_256_gpus_small_tp_ep_main_pp_across_nodes():
    count = count_parameters(MOE_671B)
    assert round(count.total / 1e9) == 672 and round(count.active / 1e9) == 38
    p = plan(PlanRequest(MOE_671B, 256, strategy="megatron"))
    lay = _check_plan(p)
    assert lay.tp <= 2
    assert lay.ep > max(lay.tp, lay.pp, lay.cp)  # EP is the main dimension
    assert lay.pp > 1 and lay.world_size // lay.pp > 8
    assert lay.etp == 1 and lay.sequence_parallel == (lay.tp > 1)


def test_deepseek_v3_tp2_pp16_ep64_needs_1024_gpus_and_what_fits_on_256():
    # Every pipeline stage holds ep*etp expert ranks and tp*cp dense ranks: min_gpus = pp*max(tp*cp, ep*etp).
    from bridge.models import preset

    shape = preset("deepseek_v3").model_shape()
    with pytest.raises(
        ConfigError, match=r"min_gpus = pp\*max\(tp\*cp, ep\*etp\) = 16\*max\(2\*1, 64\*1\) = 1024"
    ):
        ParallelLayout(256, tp=2, pp=16, ep=64, sequence_parallel=True, model=shape)
    # and on 1024 GPUs its 61 layers still do not split into 16 whole-layer stages (no uneven stages)
    with pytest.raises(ConfigError, match=r"must divide model.num_layers \(61\)"):
        ParallelLayout(1024, tp=2, pp=16, ep=64, sequence_parallel=True, model=shape)
    fits = ParallelLayout(256, tp=2, ep=64, sequence_parallel=True, model=shape)
    assert (fits.min_gpus, fits.dp, fits.edp) == (64, 128, 4)
    # the planner follows the seeds (issue 33): PP across nodes for a large MoE, with uneven stages since
    # 61 is prime (Megatron-Core's num_layers_in_first/last_pipeline_stage); its pick validates and fits
    p = plan(PlanRequest(shape, 256, strategy="megatron"))
    lay = _check_plan(p)
    assert lay.pp > 1 and lay.ep > lay.tp and lay.pp * max(lay.tp * lay.cp, lay.ep * lay.etp) <= 256
    split = p.split
    assert split.first + split.middle * (lay.pp - 2) + split.last == 61 and not split.even
    assert any(r.startswith(describe_fields(split.fields)) for r in p.reasons)


@pytest.mark.parametrize("seq,expect_cp", [(4096, False), (8192, True), (32768, True)])
def test_long_sequences_get_context_parallelism(seq, expect_cp):
    p = plan(PlanRequest(LLAMA31_8B, 16, seq_length=seq))
    lay = _check_plan(p)
    assert (lay.cp > 1) == expect_cp
    assert seq % (2 * lay.cp) == 0


# ---- memory accounting by hand ------------------------------------------------------------------------


def test_megatron_accounting_is_6_plus_12_over_dp_bytes_per_parameter():
    shape = ModelShape(4, 8, 8, 512, hidden_size=256, vocab_size=1024)  # vocab a multiple of 128: no padding
    n = count_parameters(shape).total
    layout = ParallelLayout(4, model=shape)  # dp = 4
    est = estimate_memory(shape, layout, TrainingSetup(128), "megatron")
    assert (est.params, est.grads, est.optimizer) == pytest.approx(
        (2 * n / 1e9, 4 * n / 1e9, 12 * n / 4 / 1e9)
    )
    fp32 = estimate_memory(shape, layout, TrainingSetup(128, precision="fp32", optimizer="sgd"), "megatron")
    assert (fp32.params, fp32.grads, fp32.optimizer) == pytest.approx(
        (4 * n / 1e9, 4 * n / 1e9, 4 * n / 4 / 1e9)
    )


def test_activation_formula_by_hand():
    # h=8, 2 heads of 4 (q=8), 1 kv group (kv=4), gated ffn 16, 2 layers, vocab 128, 4 tokens, tp=pp=cp=1.
    shape = ModelShape(2, 2, 1, 16, hidden_size=8, vocab_size=128, kv_channels=4)
    layout = ParallelLayout(1, model=shape)
    per_token_layer = 4 * 8 + (2 * 8 + 2 * 4) + 3 * 16  # norms + Q,K,V,attn-out + gate,up,act = 104 values
    expected = 2 * 4 * per_token_layer * 2 + 4 * 128 * (2 + 4)  # bf16 layers + logits (bf16 + fp32 copy)
    assert activation_memory(shape, layout, TrainingSetup(4), 0, in_flight=1.0) == expected
    full = TrainingSetup(4, recompute="full")
    assert (
        activation_memory(shape, layout, full, 0, in_flight=1.0)
        == 2 * 4 * 8 * 2 + 4 * per_token_layer * 2 + 4 * 128 * 6
    )


def test_pipeline_first_stage_holds_pp_microbatches():
    shape = LLAMA31_8B
    setup = TrainingSetup(4096, global_batch_size=64)
    lay = ParallelLayout(8, pp=4, model=shape)
    one = activation_memory(shape, lay, setup, 0, in_flight=1.0)
    est = estimate_memory(shape, lay, setup)
    if est.stage == 0:
        assert est.activations == pytest.approx(4 * one / 1e9)


# ---- decisions, fixed sizes, nothing-fits advice -----------------------------------------------------

MODELS = {
    "llama32_1b": LLAMA32_1B,
    "llama31_8b": LLAMA31_8B,
    "llama31_70b": LLAMA31_70B,
    "qwen3_30b_a3b": QWEN3_30B_A3B,
    "mixtral_8x7b": MIXTRAL_8X7B,
    "moe_671b": MOE_671B,
}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("gpus", [8, 16, 64, 256])
@pytest.mark.parametrize("seq", [4096, 32768])
def test_every_recommendation_on_a_grid_validates_and_fits(model, gpus, seq):
    req = PlanRequest(MODELS[model], gpus, seq_length=seq, global_batch_size=gpus * 8)
    p = plan(req)
    if p.fits:
        _check_plan(p)
    else:
        assert p.advice and p.closest is not None
        assert p.closest[2].total > req.gpu_memory_gb * USABLE_FRACTION


def test_nothing_fits_says_how_many_gpus_would():
    p = plan(PlanRequest(LLAMA31_70B, 8))
    assert not p.fits and p.layout is None
    more = [a for a in p.advice if a.startswith("more GPUs")]
    assert more, p.advice
    gpus = int(more[0].split(": ")[1].split()[0])
    assert _check_plan(plan(PlanRequest(LLAMA31_70B, gpus)))
    assert not plan(PlanRequest(LLAMA31_70B, gpus // 2)).fits


def test_nothing_fits_suggests_a_smaller_micro_batch():
    p = plan(PlanRequest(LLAMA32_1B, 1, gpu_memory_gb=40, micro_batch_size=16, seq_length=4096))
    assert not p.fits
    assert any("--micro-batch-size 1 fits" in a for a in p.advice), p.advice


def test_fixed_sizes_are_kept_and_invalid_ones_raise():
    p = plan(PlanRequest(LLAMA31_70B, 64, fixed={"tp": 4, "pp": 4}))
    lay = _check_plan(p)
    assert (lay.tp, lay.pp) == (4, 4)
    # tp=16 divides the GPUs but not the 8 key/value heads: no candidate is valid, the rule is reported
    with pytest.raises(
        ConfigError, match=r"tensor_model_parallel_size\) = 16: must divide model.num_query_groups"
    ):
        plan(PlanRequest(LLAMA31_70B, 64, fixed={"tp": 16}))


def test_interleaving_only_when_microbatches_divide_into_pp_groups():
    fixed = {"tp": 8, "pp": 4, "cp": 1}
    ok = plan(PlanRequest(LLAMA31_70B, 64, seq_length=4096, global_batch_size=16, fixed=fixed))
    assert _check_plan(ok).vpp is not None  # dp=2: 8 micro batches, a multiple of pp=4
    odd = plan(PlanRequest(LLAMA31_70B, 64, seq_length=4096, global_batch_size=6, fixed=fixed))
    assert _check_plan(odd).vpp is None  # 3 micro batches per step


def test_ethernet_keeps_tp_at_most_4():
    lay = _check_plan(plan(PlanRequest(LLAMA31_70B, 64, interconnect="ethernet", strategy="megatron")))
    assert lay.tp <= 4 and lay.pp > 1


def test_moe_tp_above_one_turns_sequence_parallel_on():
    p = plan(PlanRequest(QWEN3_30B_A3B, 16, fixed={"tp": 2}))
    lay = _check_plan(p)
    assert lay.sequence_parallel


def test_bad_requests_raise_config_errors():
    with pytest.raises(ConfigError, match="interconnect"):
        PlanRequest(LLAMA32_1B, 8, interconnect="carrier-pigeon")
    with pytest.raises(ConfigError, match="global_batch_size"):
        PlanRequest(LLAMA32_1B, 8, global_batch_size=7, micro_batch_size=2)
    with pytest.raises(ConfigError, match="precision"):
        PlanRequest(LLAMA32_1B, 8, precision="int4")


# ---- CLI ---------------------------------------------------------------------------------------------

JSON_KEYS = {
    "strategy",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "data_parallel_size",
    "expert_data_parallel_size",
    "min_gpus",
    "params_total",
    "params_active",
    "memory_gb",
    "reasons",
    "warnings",
}


def _run(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = plan_main(list(argv))
    return code, out.getvalue()


def test_cli_json_for_a_recipe():
    code, out = _run("--model", "llama31_70b_pretrain_config", "--gpus", "64", "--json")
    assert code == 0
    data = json.loads(out)
    assert JSON_KEYS <= set(data)
    assert set(data["memory_gb"]) == {"params", "grads", "optimizer", "activations", "gathered", "total"}
    assert data["params_total"] == count_parameters(LLAMA31_70B).total
    lay = ParallelLayout(
        64,
        tp=data["tensor_model_parallel_size"],
        pp=data["pipeline_model_parallel_size"],
        vpp=data["virtual_pipeline_model_parallel_size"],
        cp=data["context_parallel_size"],
        sequence_parallel=data["sequence_parallel"],
        model=LLAMA31_70B,
    )
    assert (lay.dp, lay.edp, lay.min_gpus) == (
        data["data_parallel_size"],
        data["expert_data_parallel_size"],
        data["min_gpus"],
    )
    assert data["memory_gb"]["total"] <= 80 * USABLE_FRACTION and data["reasons"]


def test_cli_seed_memory_model_and_preset_name():
    code, out = _run(
        "--model",
        "llama31_70b",
        "--gpus",
        "64",
        "--memory-model",
        "seed",
        "--precision",
        "fp16",
        "--tp",
        "4",
        "--pp",
        "4",
        "--cp",
        "1",
        "--json",
    )
    assert code == 0
    mem = json.loads(out)["memory_gb"]
    assert (mem["params"], mem["grads"], mem["optimizer"]) == pytest.approx((8.82, 8.82, 17.64), abs=0.01)


def test_cli_overrides_and_hf_config(tmp_path):
    cfg = dict(
        model_type="qwen3_moe",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        hidden_act="silu",
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out = _run("--model", str(tmp_path), "--gpus", "16", "--seq-length", "4096", "--overrides")
    assert code == 0
    overrides = dict(item.split("=", 1) for item in out.split())
    code, js = _run(
        "--model", str(tmp_path / "config.json"), "--gpus", "16", "--seq-length", "4096", "--json"
    )
    data = json.loads(js)
    assert overrides["model.tensor_model_parallel_size"] == str(data["tensor_model_parallel_size"])
    assert overrides["model.expert_model_parallel_size"] == str(data["expert_model_parallel_size"])
    assert overrides["model.sequence_parallel"] == str(data["sequence_parallel"])
    assert overrides["model.seq_length"] == "4096"
    assert data["params_total"] == count_parameters(QWEN3_30B_A3B).total


def test_cli_nothing_fits_exits_1_with_advice():
    code, out = _run("--model", "llama31_70b", "--gpus", "8")
    assert code == 1 and "NOTHING FITS" in out and "more GPUs" in out
    assert "seq 4096" in out  # a preset's context window (131072) is not taken as the training length


def test_cli_unknown_model_suggests_close_names(capsys):
    assert plan_main(["--model", "llama31_70b_pretrain_confg", "--gpus", "8"]) == 2
    assert "llama31_70b_pretrain_config" in capsys.readouterr().err


def test_cli_imports_nothing_heavy():
    code = (
        "import sys, contextlib, io\n"
        "from bridge.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--model', 'llama31_70b_pretrain_config', '--gpus', '64', '--json'])\n"
        "heavy = [m for m in ('torch', 'megatron', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
