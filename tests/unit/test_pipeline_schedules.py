"""Pipeline schedules: names, bubble and memory formulas (bridge.parallel.schedules), the validation rules of
distributed.pp_schedule / scale_grads_in_schedule, and the plan's pipeline decision. No process group."""

from __future__ import annotations

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.overrides import apply_overrides
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.parallel import schedules


def tiny(*overrides: str) -> ConfigContainer:
    cfg = ConfigContainer(
        model=GPTModelProvider(
            num_layers=8, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
        )
    )
    cfg.train.train_iters, cfg.train.global_batch_size = 10, 16
    cfg.scheduler.lr_warmup_iters = 0
    cfg.validation.eval_interval = 0
    return apply_overrides(cfg, list(overrides))


def pp(n: int, vpp: int | None = None, schedule: str | None = None) -> list[str]:
    out = [f"model.pipeline_model_parallel_size={n}"]
    out += [f"model.virtual_pipeline_model_parallel_size={vpp}"] if vpp else []
    return out + ([f"distributed.pp_schedule={schedule}"] if schedule else [])


def test_bubble_fractions_are_the_documented_formulas():
    p, m, v = 4, 8, 2
    assert schedules.bubble_fraction("1f1b", p, m) == pytest.approx(3 / 11)  # (p-1)/(m+p-1)
    assert schedules.bubble_fraction("gpipe", p, m) == pytest.approx(3 / 11)
    for name in ("interleaved_1f1b", "dfs", "looped_bfs"):  # (p-1)/(v*m+p-1)
        assert schedules.bubble_fraction(name, p, m, v) == pytest.approx(3 / 19), name
    assert schedules.bubble_fraction("zero_bubble", p, m, v) == pytest.approx(3 / 51)  # (p-1)/(3vm+p-1)
    assert schedules.bubble_fraction("v_schedule", p, m, 2) == 0.0  # m >= 2p - 1
    assert schedules.bubble_fraction("gpipe", 1, m) == 0.0
    # more micro batches or more virtual stages always shrink the bubble
    assert schedules.bubble_fraction("1f1b", p, 32) < schedules.bubble_fraction("1f1b", p, 8)
    assert schedules.bubble_fraction("dfs", p, m, 4) < schedules.bubble_fraction("dfs", p, m, 2)


def test_activations_in_flight_per_schedule():
    assert schedules.activations_in_flight("1f1b", 4, 16) == 4.0  # min(p, m)
    assert schedules.activations_in_flight("1f1b", 4, 2) == 2.0
    assert schedules.activations_in_flight("gpipe", 4, 16) == 16.0  # every forward before a backward
    assert schedules.activations_in_flight("looped_bfs", 4, 16, 2) == 16.0
    for name in ("interleaved_1f1b", "dfs", "zero_bubble"):
        assert schedules.activations_in_flight(name, 4, 16, 2) == pytest.approx(4 * (1 + 3 / 8)), name
    assert schedules.activations_in_flight("gpipe", 1, 16) == 1.0


def test_names_aliases_and_microbatch_rules():
    assert schedules.NAMES == (
        "1f1b",
        "interleaved_1f1b",
        "gpipe",
        "looped_bfs",
        "dfs",
        "zero_bubble",
        "v_schedule",
    )
    assert [schedules.normalize(n) for n in ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble")] == [
        "interleaved_1f1b",
        "looped_bfs",
        "zero_bubble",
    ]
    assert schedules.effective(None, None) == "1f1b" and schedules.effective(None, 2) == "interleaved_1f1b"
    assert schedules.microbatch_rule("dfs", 4, 8) is None and schedules.microbatch_rule("dfs", 4, 3) is None
    assert "max(1, m // pp) = 2 rounds" in schedules.microbatch_rule("zero_bubble", 4, 9)
    assert (
        schedules.microbatch_rule("gpipe", 4, 9) is None
        and schedules.microbatch_rule("looped_bfs", 4, 9) is None
    )


@pytest.mark.parametrize(
    "overrides, world, engine, torch_class, stages",
    [
        (pp(4, schedule="gpipe"), 4, "torch", "ScheduleGPipe", 1),
        (pp(2, 2, "looped_bfs"), 4, "torch", "ScheduleLoopedBFS", 2),
        (pp(2, 2, "dfs"), 4, "torch", "ScheduleInterleaved1F1B", 2),
        (pp(4, 2, "zero_bubble"), 4, "torch", "ScheduleInterleavedZeroBubble", 2),
        (pp(2, 2, "interleaved1f1b"), 2, "megatron", None, 2),  # AutoModel's spelling
        (pp(2, schedule="1f1b"), 2, "megatron", None, 1),
        (pp(2, 2), 2, "megatron", None, 2),  # no schedule: Megatron-Core's choice by vpp
        ([*pp(2, 2, "dfs"), "distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"], 4,
         "torch", "ScheduleInterleaved1F1B", 2),
    ],
)  # fmt: skip
def test_accepted_schedules_and_the_plan_they_make(overrides, world, engine, torch_class, stages):
    plan = build_plan(tiny(*overrides), world, cuda=False)
    p = plan.pipeline
    assert (p.engine, p.torch_class, p.stages_per_rank) == (engine, torch_class, stages)
    assert p.schedule in schedules.NAMES and plan.config.distributed.pp_schedule in (None, p.schedule)
    vpp = plan.layout.vpp if plan.layout.interleaved else None
    assert p.bubble_fraction == schedules.bubble_fraction(
        p.schedule, plan.layout.pp, plan.num_microbatches, vpp
    )
    assert not any("has no effect" in w or "distributed.pp_schedule" in w for w in plan.warnings)
    line = next(x for x in plan.summary_lines() if x.startswith("pipeline: "))
    assert p.schedule in line and (torch_class or "Megatron-Core") in line


@pytest.mark.parametrize(
    "overrides, world, expected",
    [
        (pp(2, 2, "v_schedule"), 2,
         r"distributed.pp_schedule = 'v_schedule': ScheduleZBVZeroBubble needs the V stage layout .* "
         r"Megatron-Core builds virtual stage v\*pp \+ r on pipeline rank r \(loop order\)"),
        (pp(2, 2, "gpipe"), 2,
         r"distributed.pp_schedule = 'gpipe': ScheduleGPipe runs one stage per pipeline rank, and "
         r"model.virtual_pipeline_model_parallel_size = 2 builds 2"),
        (pp(2, schedule="looped_bfs"), 2,
         r"distributed.pp_schedule = 'looped_bfs': ScheduleLoopedBFS is a multi-stage schedule"),
        (pp(2, schedule="zero_bubble"), 2, r"ScheduleInterleavedZeroBubble is a multi-stage schedule"),
        ([*pp(2, 2, "dfs"), "train.global_batch_size=5"], 2,
         r"train.global_batch_size = 5: pp_schedule dfs with 5 micro batches per step .* "
         r"max\(1, m // pp\) = 2 rounds and needs m = 5 to be a multiple of that"),
        ([*pp(2, 2, "zero_bubble"), "distributed.activation_checkpointing=True"], 2,
         r"distributed.activation_checkpointing = True: .*\"Checkpointing is not compatible with .grad\(\)"),
        ([*pp(2, 2, "zero_bubble"), "model.recompute_granularity=selective"], 2,
         r"model.recompute_granularity = 'selective': pp_schedule zero_bubble computes input gradients"),
        ([*pp(2, 2, "zero_bubble"), "distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"], 2,
         r"distributed.strategy = 'fsdp2': pp_schedule zero_bubble .* the step never finishes"),
        ([*pp(2, schedule="gpipe"), "model.calculate_per_token_loss=True",
          "distributed.scale_grads_in_schedule=True"], 2,
         r"distributed.scale_grads_in_schedule = True: with model.calculate_per_token_loss"),
        (["model.calculate_per_token_loss=True", "distributed.strategy=megatron",
          "distributed.average_in_collective=True"], 1,
         r"distributed.average_in_collective = True: with model.calculate_per_token_loss .* \(Megatron-Core's "
         r"DistributedDataParallel refuses the pair"),
        (pp(2, schedule="pipedream"), 2, r"distributed.pp_schedule = 'pipedream': must be one of 1f1b"),
    ],
)  # fmt: skip
def test_refused_before_launch(overrides, world, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        build_plan(tiny(*overrides), world, cuda=False)
    assert "Fix:" in str(err.value)


def test_zero_bubble_refuses_gradient_accumulation_fusion_where_it_runs():
    from bridge.config.environment import Environment

    overrides = [*pp(2, 2, "zero_bubble"), "model.gradient_accumulation_fusion=True"]
    gpu = Environment(cuda=True, device_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                      packages={"transformer_engine": "2.8.0", "fused_weight_gradient_mlp_cuda": "0.1"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"model.gradient_accumulation_fusion = True: .*added twice"):
        build_plan(tiny(*overrides), 2, env=gpu)
    # on CPU the fusion does not run (the plan reports it inactive): the schedule is fine
    plan = build_plan(tiny(*overrides), 2, cuda=False)
    assert not plan.provider.gradient_accumulation_fusion and plan.pipeline.schedule == "zero_bubble"


def test_settings_without_effect_are_warnings():
    w = build_plan(
        tiny("distributed.pp_schedule=gpipe", "distributed.scale_grads_in_schedule=true"), 1
    ).warnings
    assert "distributed.pp_schedule=gpipe has no effect with pipeline size 1." in w
    assert "distributed.scale_grads_in_schedule=true has no effect with pipeline size 1." in w
    w = build_plan(tiny(*pp(2, schedule="1f1b"), "distributed.scale_grads_in_schedule=true"), 2).warnings
    assert any("Megatron-Core's schedules divide each micro batch's loss" in x for x in w)
    plan = build_plan(
        tiny(*pp(2, schedule="gpipe"), "distributed.scale_grads_in_schedule=true"), 2, cuda=True
    )
    assert plan.pipeline.scale_grads_in_schedule is True and plan.warnings == ()
    # gpipe on pp > 2: its own bubble note instead of the layout's "set vpp" advice (gpipe refuses vpp)
    (w,) = build_plan(tiny(*pp(4, schedule="gpipe")), 4, cuda=True).warnings
    assert w.startswith(
        "pp_schedule gpipe on pp=4: 15.8% of each step is pipeline bubble ((p-1)/(m+p-1) with m=16)"
    )
    assert any(
        "without interleaving has large pipeline bubbles" in x for x in build_plan(tiny(*pp(4)), 4).warnings
    )


def test_memory_estimate_follows_the_schedule():
    # 16 micro batches on pp=4: gpipe holds all 16 in flight on the first stage, 1f1b 4
    one = build_plan(tiny(*pp(4, schedule="1f1b")), 4, cuda=True).memory
    fill_drain = build_plan(tiny(*pp(4, schedule="gpipe")), 4, cuda=True).memory
    assert fill_drain.activations > 3 * one.activations
    assert (fill_drain.params, fill_drain.grads, fill_drain.optimizer) == (
        one.params,
        one.grads,
        one.optimizer,
    )


def test_planner_plans_for_a_requested_schedule():
    from bridge.parallel.planner import PlanRequest, plan
    from tests.unit.published_shapes import LLAMA31_8B

    def request(schedule):
        return PlanRequest(
            model=LLAMA31_8B, gpus=16, global_batch_size=32, fixed={"pp": 4}, pp_schedule=schedule
        )

    default, fill_drain, zb = plan(request(None)), plan(request("gpipe")), plan(request("zero_bubble"))
    assert default.layout.vpp == 2 and fill_drain.layout.vpp is None and zb.layout.vpp == 2
    m = 32 // fill_drain.layout.dp
    assert (fill_drain.layout.pp, fill_drain.layout.dp, m) == (4, 4, 8)  # 16 GPUs: tp 1, cp 1 (4096 tokens)
    line = next(
        r for r in fill_drain.reasons if r.startswith("pp_schedule=gpipe (torch.distributed.pipelining)")
    )
    assert "bubble (p-1)/(m+p-1) = 27.27% of a step with p=4, m=8" in line  # 3/11
    assert "keeps all 8 micro batches' activations" in line
    zb_line = next(
        r for r in zb.reasons if r.startswith("pp_schedule=zero_bubble (torch.distributed.pipelining)")
    )
    assert (
        "bubble (p-1)/(3*v*m+p-1) = 5.88% of a step with p=4, m=8 micro batches per data-parallel rank, v=2"
        in (zb_line)
    )  # 3/51
    assert any(r.startswith("pp_schedule=interleaved_1f1b (Megatron-Core)") for r in default.reasons)
    # gpipe holds all 8 micro batches in flight on the first stage, interleaved 1F1B 4 x (1 + 3/8) = 5.5
    assert fill_drain.memory.activations > 1.3 * default.memory.activations
    with pytest.raises(ConfigError, match=r"pp_schedule = 'v_schedule': ScheduleZBVZeroBubble needs the V"):
        request("v_schedule")


def test_planner_cli_overrides_carry_the_schedule(capsys):
    from bridge.cli.plan import main

    # --recompute full: the recipe recomputes nothing, and looped_bfs holds every micro batch's activations
    code = main(["--model", "llama31_8b_pretrain_config", "--gpus", "16", "--global-batch-size", "32", "--pp", "4",
                 "--pp-schedule", "looped_bfs", "--recompute", "full", "--overrides"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "distributed.pp_schedule=looped_bfs" in out
    assert "model.virtual_pipeline_model_parallel_size=2" in out
