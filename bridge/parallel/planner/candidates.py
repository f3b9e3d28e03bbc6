"""The candidate layouts the planner tries, in their order of preference, and the validated layout of one. Pure Python."""

from __future__ import annotations

from dataclasses import replace

from bridge.errors import ConfigError, config_error
from bridge.parallel import schedules
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.memory import TrainingSetup
from bridge.parallel.planner.request import LONG_SEQUENCE, PlanRequest, planned_global_batch
from bridge.parallel.planner.stages import choose_split
from bridge.parallel.stages import parse_layout


def _divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of n up to `limit` (default n): a scan bounded by the sizes that can occur, so a huge
    GPU count costs no more than a small one."""
    top = n if limit is None else min(n, limit)
    return [d for d in range(1, top + 1) if n % d == 0]


def _powers_of_two_dividing(n: int, limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit and n % p == 0:
        out.append(p)
        p *= 2
    return out


def tp_start(active: int) -> int:
    """Tensor parallelism by active parameters (a starting table; memory decides)."""
    billions = active / 1e9
    if billions < 10:
        return 1
    if billions < 40:
        return 2
    if billions < 120:
        return 4
    return 8


def _cp_start(seq: int) -> int:
    if seq < LONG_SEQUENCE:
        return 1
    cp = 2
    while cp * 2 * 16384 <= seq:
        cp *= 2
    return cp


def _cp_choices(seq: int, gpus: int) -> list[int]:
    """CP sizes to try, in order: from _cp_start's size for this sequence up (at most 4 sizes), then the
    smaller ones down to 1. CP is the planner's choice, never a precondition: a GPU count that no CP
    group divides (1, 3, ...) or a layout that only fits without CP still gets a plan at cp=1."""
    cp0 = _cp_start(seq)
    powers = _powers_of_two_dividing(gpus, max(1, seq // 2))  # each CP rank takes 2 chunks of the sequence
    if cp0 == 1:
        return [1]
    return [c for c in powers if c >= cp0][:4] + sorted((c for c in powers if c < cp0), reverse=True)


def _layers_per_stage(num_layers: int, pp: int) -> int:
    """The layer slots of a stage that virtual stages split: num_layers / pp when pp divides them, else
    with the embedding and the loss counted as layers when that divides (stages.split_options), else the
    middle stages' ceil(num_layers / pp)."""
    if num_layers % pp == 0:
        return num_layers // pp
    if (num_layers + 2) % pp == 0:
        return (num_layers + 2) // pp
    return -(-num_layers // pp)


def _choose_vpp(shape: ModelShape, pp: int, setup: TrainingSetup, dp: int, per_stage: int) -> int | None:
    """vpp for pp stages of `per_stage` layers: the schedule's (setup.pp_schedule), else interleaving when
    the micro batches allow. A schedule that needs virtual stages and gets none raises ConfigError (the
    candidate is invalid)."""
    schedule = setup.pp_schedule
    if pp == 1 or schedule in ("1f1b", "gpipe"):
        return None
    m = setup.num_microbatches(dp)
    options = [v for v in _divisors(per_stage) if v >= 2]
    if schedule is None or schedule == "interleaved_1f1b":
        ok = m is None or schedules.interleaved_microbatch_rule(pp, None, m) is None
    else:
        ok = m is None or schedules.microbatch_rule(schedule, pp, m) is None
    if not ok or not options:
        if schedule is not None:
            raise config_error(
                "pp_schedule",
                schedule,
                f"needs virtual stages, and pp={pp} with {per_stage} layers per stage and {m} micro batches "
                "per step has none",
                "another layout or schedule",
            )
        return None
    return min(options, key=lambda v: (abs(per_stage / v - 4), -v))


def candidates(req: PlanRequest, active: int, uneven: bool = False):
    """((tp, pp, cp, ep, etp), recompute) in order of preference; the caller checks validity. Pipeline
    sizes split the layers evenly, or (uneven) also unevenly (stages.stage_split)."""
    shape, gpus, fixed = req.model, req.gpus, req.fixed
    tp_cap = min(req.gpus_per_node, 4 if req.link == "ethernet" else req.gpus_per_node)
    start = tp_start(active)
    tps = [fixed["tp"]] if "tp" in fixed else _divisors(gpus, tp_cap)
    tps = sorted(tps, key=lambda t: (t < start, t))  # from the starting tp upwards, smaller only if forced
    # pp up to one layer per stage; stage_split makes the stages uneven where pp does not divide the layers
    pps = [fixed["pp"]] if "pp" in fixed else _divisors(gpus, shape.num_layers)
    if not uneven and not (req.split is not None and req.split.given):
        # a recipe's own uneven split (a layout string, first/last counts) decides which pp it takes
        pps = [p for p in pps if shape.num_layers % p == 0]
    # cp only for long sequences (from LONG_SEQUENCE tokens up, more when memory needs it)
    cps = [fixed["cp"]] if "cp" in fixed else _cp_choices(req.seq, gpus)
    etp = fixed.get("etp", 1)
    if shape.is_moe:
        eps = (
            [fixed["ep"]]
            if "ep" in fixed
            else sorted((e for e in _divisors(shape.num_moe_experts, gpus) if gpus % e == 0), reverse=True)
        )
        # MoE: keep tp small; recompute before raising tp (as the MoE recipes do); then cp, then the
        # fewest pipeline stages with the widest expert parallelism.
        for tp in tps:
            for recompute in ("none", "full"):
                for cp in cps:
                    for pp in pps:
                        for ep in eps:
                            yield (tp, pp, cp, ep, etp), recompute
    else:
        # Dense: no recompute while more model parallelism helps; tp from the starting size; then the
        # smallest model-parallel group; on a tie the larger tp (inside the node) before more pp.
        ep = fixed.get("ep", 1)
        pairs = sorted(
            ((t, p) for t in tps for p in pps),
            key=lambda tp_pp: (tp_pp[0] < start, tp_pp[0] * tp_pp[1], -tp_pp[0]),
        )
        for recompute in ("none", "full"):
            for cp in cps:
                for tp, pp in pairs:
                    yield (tp, pp, cp, ep, etp), recompute


def candidate_layout(
    req: PlanRequest,
    tp,
    pp,
    cp,
    ep,
    etp,
    setup: TrainingSetup,
    strategy: str = "megatron",
    vpp: int | None | str = "choose",
) -> tuple[ParallelLayout, TrainingSetup]:
    """The validated layout for these sizes and strategy, and `setup` with the global batch it trains with.

    The pipeline split is the recipe's (req.split) or the lightest Megatron-Core accepts
    (bridge.parallel.planner.stages.choose_split); the layout holds the real model and that split, so
    ParallelLayout checks it with the run's own rule code (bridge.parallel.stages) and the memory
    estimate covers every stage."""
    world = req.gpus
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 1
    setup = replace(setup, global_batch_size=planned_global_batch(req, dp))
    shape = req.model
    if "vpp" in req.fixed:
        vpp = req.fixed["vpp"] if req.fixed["vpp"] > 1 else None  # --vpp 1: no virtual stages
    elif vpp == "choose":
        vpp = _vpp_of_layout(req, pp)
        if vpp == "choose":
            vpp = _choose_vpp(shape, pp, setup, dp, _layers_per_stage(shape.num_layers, pp))
            if vpp is not None and setup.pp_schedule is None:
                try:  # interleaving where a split takes it (VPP with uneven stages too), else none
                    choose_split(shape.num_layers, pp, vpp, req.split)
                except ConfigError:
                    vpp = None
    fields, _ = choose_split(shape.num_layers, pp, vpp, req.split)
    layout = ParallelLayout(
        world_size=world,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep,
        etp=etp,
        sequence_parallel=tp > 1 and strategy != "megatron_fsdp" and req.sequence_parallel is not False,
        strategy=strategy,
        dp_replicate_size=req.dp_replicate_size if strategy == "fsdp2" else None,
        gpus_per_node=req.gpus_per_node,
        model=shape,
        split=fields,
    )
    gbs = setup.global_batch_size
    if gbs is not None and gbs % (setup.micro_batch_size * layout.dp):
        raise config_error(
            "train.global_batch_size",
            gbs,
            f"must be divisible by micro_batch_size*dp = {setup.micro_batch_size}*{layout.dp}",
            "change the global batch or the layout",
        )
    m = setup.num_microbatches(layout.dp)
    if (
        layout.vpp
        and m is not None
        and schedules.effective(setup.pp_schedule, layout.vpp) == "interleaved_1f1b"
    ):
        broken = schedules.interleaved_microbatch_rule(layout.pp, None, m)
        if broken:  # the run's own check (bridge.config.checks.pipeline) refuses it the same way
            raise config_error(
                "train.global_batch_size",
                gbs,
                f"the interleaved schedule (virtual stages) runs {broken}",
                "a larger global batch, or no virtual stages",
            )
    return layout, setup


def _vpp_of_layout(req: PlanRequest, pp: int) -> int | None | str:
    """A recipe's pipeline layout string fixes the virtual stages (its stages / pp); else "choose"."""
    if req.split is None or req.split.layout is None:
        return "choose"
    stages = len(parse_layout(req.split.layout))
    return stages // pp if stages % pp == 0 and stages // pp > 1 else None
