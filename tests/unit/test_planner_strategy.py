"""`bridge plan --strategy`: the per-strategy memory model, auto's decision tree, and what the CLI prints.

Expected bytes are computed by hand from the shape (h, f, v, layers), not from params_per_rank, and the
formulas are those of bridge/parallel/memory.py's docstring (docs/parallelism.md, "Memory per GPU").
"""

import contextlib
import io
import json

import pytest

from bridge.cli.plan import build_parser
from bridge.cli.plan import main as plan_main
from bridge.config import apply_overrides
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.memory import TrainingSetup, estimate_memory, gathered_params, stage_memory
from bridge.parallel.planner import USABLE_FRACTION, PlanRequest, plan
from recipes import get_recipe
from tests.unit.published_shapes import LLAMA31_8B, LLAMA31_70B, LLAMA32_1B, QWEN3_30B_A3B

GB = 1e9
# 4 layers, h=256, 8 heads of 32 (MHA), gated ffn 512, vocab 1024 (a multiple of 128*tp: no padding)
DENSE = ModelShape(4, 8, 8, 512, hidden_size=256, vocab_size=1024)
# 2 layers, h=64, 4 heads, 4 experts (top-2) of ffn 64, vocab 256
MOE = ModelShape(2, 4, 4, 128, num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=64,
                 hidden_size=64, vocab_size=256)  # fmt: skip
SMALL_MOE = ModelShape(16, 16, 8, 4096, num_moe_experts=16, moe_router_topk=2, moe_ffn_hidden_size=1024,
                       hidden_size=1024, vocab_size=32000)  # fmt: skip
SETUP = TrainingSetup(128)  # bf16, adam


def _dense_rank(tp: int) -> tuple[int, int, int]:
    """(rank total, root unit, one layer) parameters of DENSE on a tp rank (pp = 1), by hand."""
    h, f, v = 256, 512, 1024
    layer = (4 * h * h) // tp + 2 * h + (3 * h * f) // tp  # q,k,v,o + two norms + gate,up,down
    root = 2 * (v * h // tp) + h  # embedding + output layer (untied) + final norm
    return 4 * layer + root, root, layer


def _memory(layout: ParallelLayout, setup: TrainingSetup = SETUP):
    est = estimate_memory(layout.model, layout, setup)
    return est, tuple(round(getattr(est, k) * GB) for k in ("params", "grads", "optimizer", "gathered"))


# ---- the memory model, per strategy, by hand ----------------------------------------------------------


def test_megatron_shards_only_the_optimizer_over_dp():
    n, _, _ = _dense_rank(2)
    est, got = _memory(ParallelLayout(8, tp=2, sequence_parallel=True, model=DENSE))  # dp = 4
    assert est.strategy == "megatron"
    assert got == (2 * n, 4 * n, round(12 * n / 4), 0)  # bf16 params, fp32 grads, (4 + 8) / dp


@pytest.mark.parametrize(
    "world,cp,replicate,shards",
    [(8, 1, None, 4), (8, 1, 2, 2), (16, 2, None, 8), (16, 2, 2, 4)],
    ids=["dp4", "hsdp2x2", "dp4-cp2", "hsdp2x2-cp2"],
)
def test_fsdp2_shards_fp32_params_grads_and_moments_over_dp_shard_times_cp(world, cp, replicate, shards):
    n, root, layer = _dense_rank(2)
    lay = ParallelLayout(world, tp=2, cp=cp, sequence_parallel=True, strategy="fsdp2",
                         dp_replicate_size=replicate, model=DENSE)  # fmt: skip
    assert lay.dp // (replicate or 1) * cp == shards  # dp_shard * cp
    _, got = _memory(lay)
    # 4 (fp32 params) + 4 (fp32 grads) + 8 (Adam moments) bytes over the shards, no master copy; gathered:
    # the bf16 root unit and two layers (the computing one and the prefetched next one)
    assert got == (
        round(4 * n / shards),
        round(4 * n / shards),
        round(8 * n / shards),
        2 * (root + 2 * layer),
    )
    assert gathered_params(DENSE, lay, 0) == root + 2 * layer


def test_fsdp2_fp32_and_sgd():
    n, root, layer = _dense_rank(1)
    lay = ParallelLayout(4, strategy="fsdp2", model=DENSE)  # dp_shard = 4
    _, got = _memory(lay, TrainingSetup(128, precision="fp32", optimizer="sgd"))
    # fp32 shards as in bf16; SGD's one fp32 momentum; the gathered copies are fp32 (no cast)
    assert got == (n, n, n, 4 * (root + 2 * layer))


def test_megatron_fsdp_shards_compute_dtype_params_and_fp32_state_over_dp_cp():
    n, root, layer = _dense_rank(2)
    lay = ParallelLayout(8, tp=2, strategy="megatron_fsdp", model=DENSE)  # no SP; dp*cp = 4
    _, got = _memory(lay)
    assert got == (round(2 * n / 4), n, round(12 * n / 4), 2 * (root + 2 * layer))


def test_ddp_shards_nothing():
    n, _, _ = _dense_rank(1)
    _, got = _memory(ParallelLayout(4, strategy="ddp", model=DENSE))
    assert got == (2 * n, 4 * n, 12 * n, 0)  # 18 bytes per parameter on every rank


def test_moe_experts_shard_over_ep_shard_with_fsdp2_and_edp_with_megatron():
    h, v, experts, per_expert = 64, 256, 4, 3 * 64 * 64
    dense = 2 * (4 * h * h + 2 * h + h * experts) + 2 * v * h + h  # attention, norms, router; tables
    expert = 2 * (experts // 2) * per_expert  # ep = 2: two whole experts per rank and layer
    fsdp2 = ParallelLayout(4, ep=2, strategy="fsdp2", model=MOE)  # dp*cp = 4, ep_shard = 4/2 = 2
    assert fsdp2.moe_mesh_shape[1] == 2
    _, got = _memory(fsdp2)
    sharded = dense / 4 + expert / 2
    assert got[:3] == (round(4 * sharded), round(4 * sharded), round(8 * sharded))
    megatron = ParallelLayout(4, ep=2, model=MOE)  # edp = 4/2 = 2
    _, got = _memory(megatron)
    assert got[:3] == (2 * (dense + expert), 4 * (dense + expert), round(12 * (dense / 4 + expert / 2)))


def test_activations_and_stages_do_not_depend_on_the_strategy():
    lay = {s: ParallelLayout(8, pp=2, strategy=s, model=LLAMA31_8B) for s in ("megatron", "fsdp2")}
    for stage in (0, 1):
        a, b = (stage_memory(LLAMA31_8B, lay[s], SETUP, stage) for s in ("megatron", "fsdp2"))
        assert a.activations == b.activations and a.stage == b.stage == stage


# ---- auto's decision tree ---------------------------------------------------------------------------


def _strategy_reason(p) -> str:
    assert p.reasons[0].startswith("strategy="), p.reasons
    return p.reasons[0]


def test_auto_one_gpu_needs_no_distributed_setup():
    p = plan(PlanRequest(LLAMA32_1B, 1, seq_length=4096))
    lay = p.layout
    assert p.fits and lay.strategy == "megatron"
    assert (lay.tp, lay.pp, lay.cp, lay.ep, lay.etp, lay.dp) == (1, 1, 1, 1, 1, 1)
    assert (
        _strategy_reason(p) == "strategy=megatron (auto): one GPU: no data parallelism, no distributed setup"
    )


def test_auto_dense_single_node_is_fsdp2_and_fits_by_fsdp2_memory():
    auto = plan(PlanRequest(LLAMA31_8B, 8))
    assert auto.fits and auto.layout.strategy == "fsdp2" and auto.memory.strategy == "fsdp2"
    assert _strategy_reason(auto).startswith("strategy=fsdp2 (auto): dense, one node (8 GPUs)")
    # the fit was checked with fsdp2's memory: at tp=1 fsdp2 fits where megatron does not, so
    # --strategy megatron needs tp=2 on the same request
    assert auto.layout.tp == 1
    megatron_at_tp1 = estimate_memory(LLAMA31_8B, ParallelLayout(8, model=LLAMA31_8B), auto.setup())
    assert megatron_at_tp1.total > auto.budget_gb >= auto.memory.total
    assert plan(PlanRequest(LLAMA31_8B, 8, strategy="megatron")).layout.tp == 2


def test_auto_large_dense_model_on_many_nodes_is_fsdp2():
    p = plan(PlanRequest(LLAMA31_70B, 64))
    assert p.fits and p.layout.strategy == "fsdp2"
    assert "large dense model (70.6B >= 70B parameters)" in _strategy_reason(p)
    assert "long sequence (8192 >= 8192): cp=" in _strategy_reason(p)  # the shape's 8K sequence
    assert p.memory.total <= 80 * USABLE_FRACTION


def test_auto_moe_is_expert_parallel_fsdp2_with_ep_dividing_dp_cp():
    p = plan(PlanRequest(QWEN3_30B_A3B, 16, seq_length=4096))
    lay = p.layout
    assert p.fits and lay.strategy == "fsdp2" and lay.ep > 1
    assert (lay.dp * lay.cp) % lay.ep == 0 and lay.pp == 1 and lay.etp == 1
    assert f"MoE (128 experts): expert parallelism first (ep={lay.ep})" in _strategy_reason(p)
    assert f"fsdp2 accepts it (ep={lay.ep} divides dp*cp = {lay.dp * lay.cp}" in _strategy_reason(p)


def test_auto_falls_back_to_megatron_with_fsdp2s_reason():
    # TP=2, EP=8 on 8 GPUs: dp*cp = 4, which ep=8 does not divide: fsdp2 refuses the layout
    p = plan(PlanRequest(SMALL_MOE, 8, fixed={"tp": 2, "ep": 8, "pp": 1, "cp": 1, "etp": 1}))
    assert p.fits and p.layout.strategy == "megatron"
    reason = _strategy_reason(p)
    assert reason.startswith("strategy=megatron (auto): MoE (16 experts): expert parallelism first (ep=8)")
    assert "fsdp2 refuses this layout: ep (model.expert_model_parallel_size) = 8:" in reason
    assert "must divide dp*cp = 4*1 = 4" in reason
    # pp > 1 with ep > 1 runs under fsdp2 (tests/functional/test_fsdp2_moe.py): auto keeps fsdp2
    p = plan(PlanRequest(SMALL_MOE, 16, fixed={"pp": 2, "ep": 2}))
    assert p.layout.strategy == "fsdp2" and (p.layout.pp, p.layout.ep) == (2, 2)


def test_auto_fp16_is_megatron_and_explicit_fsdp2_fp16_is_an_error():
    p = plan(PlanRequest(LLAMA31_8B, 8, precision="fp16"))
    assert p.layout.strategy == "megatron"
    assert "fsdp2 refuses this request: fsdp2 has no fp16 loss scaler" in _strategy_reason(p)
    with pytest.raises(ConfigError, match=r"--strategy = 'fsdp2': fsdp2 has no fp16 loss scaler"):
        PlanRequest(LLAMA31_8B, 8, precision="fp16", strategy="fsdp2")


def test_explicit_strategies_plan_only_layouts_they_accept():
    fsdp = plan(PlanRequest(LLAMA31_8B, 8, strategy="megatron_fsdp"))
    assert (
        fsdp.layout.strategy == "megatron_fsdp" and fsdp.layout.pp == 1 and not fsdp.layout.sequence_parallel
    )
    ddp = plan(PlanRequest(LLAMA32_1B, 8, strategy="ddp", seq_length=4096))
    assert ddp.layout.strategy == "ddp" and ddp.layout.dp == 8
    assert _strategy_reason(ddp).startswith("strategy=ddp: given by --strategy")
    with pytest.raises(ConfigError, match=r"strategy 'megatron_fsdp' does not support expert parallelism"):
        plan(PlanRequest(SMALL_MOE, 8, strategy="megatron_fsdp", fixed={"ep": 8}))


# ---- bad --strategy / --dp-replicate-size: one ConfigError ------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(strategy="zero3"), r"--strategy = 'zero3': must be one of auto, megatron, fsdp2, megatron_fsdp, ddp"),
        (dict(dp_replicate_size=2), r"--dp-replicate-size = 2: HSDP replication is an fsdp2 option; --strategy "
                                    r"is 'auto'\. Fix: add --strategy fsdp2"),
        (dict(strategy="fsdp2", dp_replicate_size=0), r"--dp-replicate-size = 0: must be a positive integer"),
    ],
    ids=["unknown-strategy", "replicate-without-fsdp2", "replicate-zero"],
)  # fmt: skip
def test_bad_strategy_requests_raise(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        PlanRequest(LLAMA31_8B, 16, **kwargs)


def test_a_replicate_size_no_layout_divides_is_the_layouts_rule():
    with pytest.raises(
        ConfigError, match=r"dp_replicate_size \(distributed.dp_replicate_size\) = 3: must divide dp"
    ):
        plan(PlanRequest(LLAMA31_8B, 16, strategy="fsdp2", dp_replicate_size=3))


# ---- the CLI ------------------------------------------------------------------------------------------


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = plan_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_parser_flags_and_defaults():
    args = build_parser().parse_args(["--model", "m", "--gpus", "8"])
    assert (args.strategy, args.dp_replicate_size) == ("auto", None)
    args = build_parser().parse_args(
        ["--model", "m", "--gpus", "8", "--strategy", "fsdp2", "--dp-replicate-size", "2"]
    )
    assert (args.strategy, args.dp_replicate_size) == ("fsdp2", 2)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--strategy", "zero3"], "error: --strategy = 'zero3': must be one of auto, megatron, fsdp2"),
        (["--dp-replicate-size", "2"], "error: --dp-replicate-size = 2: HSDP replication is an fsdp2 option"),
    ],
)
def test_cli_bad_strategy_flags_are_one_error_line(flags, message):
    code, out, err = _run("--model", "llama31_8b", "--gpus", "16", *flags)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err


def test_cli_json_and_table_show_the_strategy():
    args = ("--model", "llama31_8b", "--gpus", "16", "--strategy", "fsdp2", "--dp-replicate-size", "2")
    code, out, _ = _run(*args, "--json")
    data = json.loads(out)
    assert code == 0 and (data["strategy"], data["dp_replicate_size"], data["strategy_requested"]) == (
        "fsdp2", 2, "fsdp2"
    )  # fmt: skip
    mem = data["memory_gb"]
    assert mem["gathered"] > 0
    assert mem["total"] == pytest.approx(
        sum(mem[k] for k in ("params", "grads", "optimizer", "activations", "gathered")), abs=0.002
    )
    code, table, _ = _run(*args)
    assert code == 0 and "strategy=fsdp2 dp_replicate_size=2 " in table
    assert "megatron accounting for strategy fsdp2" in table and "  gathered " in table
    assert "- strategy=fsdp2: given by --strategy; PyTorch FSDP2 shards" in table


def _validated(recipe: str, gpus: int, *flags: str):
    code, out, err = _run("--model", recipe, "--gpus", str(gpus), *flags, "--overrides")
    assert code == 0, err
    overrides = out.split()
    cfg = apply_overrides(get_recipe(recipe)(), overrides)
    return overrides, build_plan(cfg, gpus, cuda=True)


@pytest.mark.parametrize(
    "recipe,gpus,flags,strategy,replicate",
    [
        ("llama31_8b_pretrain_config", 16, [], "fsdp2", None),
        ("llama31_8b_pretrain_config", 16, ["--strategy", "fsdp2", "--dp-replicate-size", "2"], "fsdp2", 2),
        ("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", 16, ["--seq-length", "4096"], "fsdp2", None),
        ("llama32_1b_pretrain_config", 8, ["--strategy", "ddp"], "ddp", None),
        ("llama31_8b_pretrain_config", 8, ["--strategy", "megatron_fsdp"], "megatron_fsdp", None),
    ],
    ids=["auto-dense", "hsdp", "auto-moe", "ddp", "megatron_fsdp"],
)
def test_overrides_validate_through_the_config(recipe, gpus, flags, strategy, replicate):
    overrides, run = _validated(recipe, gpus, *flags)
    assert f"distributed.strategy={strategy}" in overrides
    assert ("optimizer.use_distributed_optimizer=False" in overrides) == (strategy in ("fsdp2", "ddp"))
    assert (f"distributed.dp_replicate_size={replicate}" in overrides) == (replicate is not None)
    assert (run.layout.strategy, run.layout.dp_replicate_size) == (strategy, replicate)
    # validation refuses the distributed optimizer with neither; with fsdp2/ddp it would warn that it is unused
    assert not [w for w in run.warnings if "use_distributed_optimizer" in w], run.warnings
