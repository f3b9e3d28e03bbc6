"""Why the planner chose a layout: one line per dimension, the strategy's branch, the pipeline bubble. Pure Python."""

from __future__ import annotations

from bridge.errors import ConfigError
from bridge.parallel import schedules
from bridge.parallel.layout import ParallelLayout
from bridge.parallel.param_count import ParamCount
from bridge.parallel.planner.candidates import candidate_layout
from bridge.parallel.planner.request import (
    LARGE_DENSE,
    LONG_SEQUENCE,
    Choice,
    PlanRequest,
    fsdp2_request_refusal,
    planned_global_batch,
    wants_pipeline,
)
from bridge.parallel.planner.stages import describe_fields


def _b(n: float) -> str:
    return f"{n / 1e9:.1f}B"


def reasons(req: PlanRequest, count: ParamCount, choice: Choice, ranked: list[Choice]) -> list[str]:
    """One line per decision: the strategy, each size (or that the user fixed it), SP, recompute, dp/edp,
    and the speed estimate that chose among the layouts that fit."""
    layout, recompute = choice.layout, choice.recompute

    def fixed_or(name: str, text: str) -> str:
        return f"{name}={getattr(layout, name)}: fixed by --{name}" if name in req.fixed else text

    out = [_strategy_reason(req, count, layout, recompute, ranked)]
    out.append(_speed_text(req, count, choice, ranked))
    out.append(fixed_or("tp", _tp_text(req, count, layout)))
    out.append(fixed_or("pp", _pp_text(req, count, choice)))
    if not choice.split.even:
        out.append(_uneven_text(choice))
    if layout.pp > 1:
        out.append(fixed_or("vpp", _vpp_text(req, layout)))
        out.append(_bubble_reason(req, layout))
    out.append(fixed_or("cp", _cp_text(req, layout)))
    shape = req.model
    if shape.is_moe:
        out.append(
            fixed_or(
                "ep",
                f"ep={layout.ep}: the main MoE dimension, "
                f"{shape.num_moe_experts // layout.ep} of {shape.num_moe_experts} experts per GPU",
            )
        )
        out.append(fixed_or("etp", f"etp={layout.etp}: expert tensor parallelism is rarely needed"))
    else:
        out.append("ep=1, etp=1: dense model (no experts)")
    out.append(_sequence_parallel_text(req, layout))
    out.append(_recompute_text(req, recompute))
    out.append(f"dp={layout.dp}, edp={layout.edp}: implied by world/(tp*pp*cp) and world/(pp*ep*etp)")
    gbs = planned_global_batch(req, layout.dp)
    if gbs != req.global_batch_size:
        out.append(
            f"global_batch_size={gbs}: the default {req.global_batch_size} rounded down to a multiple of "
            f"micro_batch_size*dp = {req.micro_batch_size}*{layout.dp} (give --global-batch-size to choose)"
        )
    return out


def _tp_text(req: PlanRequest, count: ParamCount, layout: ParallelLayout) -> str:
    per_node = req.gpus_per_node
    if layout.tp == 1:
        return f"tp=1: {_b(count.active)} active parameters fit without tensor parallelism"
    tp_text = (
        f"tp={layout.tp}: sized by the {_b(count.active)} active parameters and memory; kept inside "
        f"one node ({per_node} GPUs, {'nvlink' if layout.tp <= per_node else 'CROSSES NODES'})"
    )
    if req.link == "ethernet":
        tp_text += "; at most 4 over ethernet (too slow for more TP traffic)"
    return tp_text


def _speed_text(req: PlanRequest, count: ParamCount, choice: Choice, ranked: list[Choice]) -> str:
    est = choice.estimate
    text = (
        f"estimate: {est.tokens_per_s_per_gpu:.0f} tokens/s/GPU, {est.tflops_per_gpu:.0f} TFLOP/s/GPU "
        f"(MFU {100 * est.mfu:.1f}% of {req.system.name} {req.precision}), {est.step_time_s:.2f} s per step; "
        f"the fastest of {len(ranked)} fitting layouts"
    )
    others = [c for c in ranked if c is not choice]
    if others:
        nxt = others[0]
        text += (
            f"; next of those: {nxt.layout.describe()} recompute={nxt.recompute}: "  # describe(): strategy, VPP
            f"{nxt.estimate.tokens_per_s_per_gpu:.0f}"
        )
    faster = [c for c in ranked if c.estimate.tokens_per_s_per_gpu > est.tokens_per_s_per_gpu]
    if faster:
        text += (
            f"; {faster[0].layout.describe()} (strategy={faster[0].layout.strategy}) is estimated faster "
            f"({faster[0].estimate.tokens_per_s_per_gpu:.0f}) but breaks the seeds' rules: "
            + "; ".join(faster[0].broken)
        )
    return text


def _pp_text(req: PlanRequest, count: ParamCount, choice: Choice) -> str:
    layout = choice.layout
    if layout.pp == 1:
        if wants_pipeline(req, count.total):
            return (
                "pp=1: no layout with pipeline stages fits (the seeds put PP across nodes for large models)"
            )
        return "pp=1: the model fits without pipeline parallelism"
    across = layout.world_size > req.gpus_per_node
    why = "pipeline stages handle depth" + (" across nodes" if across else "")
    if wants_pipeline(req, count.total):
        why += f" (the seeds' rule for {_b(count.total)} parameters on more than one node: PP across nodes, TP inside)"
    else:
        why += ", chosen as the fastest fitting layout"
    return f"pp={layout.pp}: {choice.split.describe()}; {why}"


def _uneven_text(choice: Choice) -> str:
    split = choice.split
    return (
        f"{describe_fields(split.fields)}: "
        f"pp={split.pp}{'' if choice.layout.vpp is None else f' x vpp={choice.layout.vpp}'} does not divide the "
        f"layers evenly, so Megatron-Core's uneven stages carry "
        f"{split.middle} layers on each middle stage; memory and speed are sized on the heaviest stage "
        f"({split.heaviest} layers)"
    )


def _vpp_text(req: PlanRequest, layout: ParallelLayout) -> str:
    num_layers = req.model.num_layers
    schedule = schedules.effective(req.pp_schedule, layout.vpp if layout.interleaved else None)
    if layout.interleaved and schedule != "interleaved_1f1b":
        return (
            f"vpp={layout.vpp}: {layout.vpp} virtual stages per rank for {schedule}, "
            f"{num_layers // (layout.pp * layout.vpp)} layers per virtual stage"
        )
    if layout.interleaved:
        return (
            f"vpp={layout.vpp}: interleaved 1F1B, {num_layers // (layout.pp * layout.vpp)} "
            "layers per virtual stage, to shrink the pipeline bubble"
        )
    if schedule in ("1f1b", "gpipe") and req.pp_schedule is not None:
        return f"vpp unset: pp_schedule {schedule} runs one stage per pipeline rank"
    return (
        "vpp unset: no interleaving (the layers per stage or the micro batches per step "
        "do not divide into virtual stages)"
    )


def _cp_text(req: PlanRequest, layout: ParallelLayout) -> str:
    if layout.cp == 1 and req.seq < LONG_SEQUENCE:
        return f"cp=1: sequence {req.seq} < {LONG_SEQUENCE} needs no context parallelism"
    if layout.cp == 1:
        return (
            f"cp=1: a sequence of {req.seq} >= {LONG_SEQUENCE} tokens would use context parallelism, but no "
            f"layout with it is valid and fits on {layout.world_size} GPU(s)"
        )
    return f"cp={layout.cp}: sequence {req.seq} >= {LONG_SEQUENCE} is split across {layout.cp} ranks"


def _sequence_parallel_text(req: PlanRequest, layout: ParallelLayout) -> str:
    if layout.sequence_parallel:
        return "sequence_parallel=True: with tp > 1 it shards norm activations by tp" + (
            " (and MoE with tp > 1 requires it)" if req.model.is_moe else ""
        )
    if layout.tp > 1:  # megatron_fsdp: the only strategy the planner turns SP off for
        return f"sequence_parallel=False: strategy {layout.strategy} does not support it"
    return "sequence_parallel=False: needs tp > 1"


def _recompute_text(req: PlanRequest, recompute: str) -> str:
    if req.recompute is not None:
        return f"activation recomputation: {recompute} (the recipe's)"
    if recompute == "none":
        return "activation recomputation: none (fits without)"
    if req.model.is_moe:
        return "activation recomputation: full (needed to fit at this small tp; cheaper than more TP)"
    return "activation recomputation: full (no layout fits without it)"


def _strategy_text(layout: ParallelLayout) -> str:
    """What the layout's strategy does with its data-parallel ranks."""
    s = layout.strategy
    if s == "fsdp2":
        r = layout.dp_replicate_size or 1
        text = f"PyTorch FSDP2 shards params, grads and optimizer state over dp_shard*cp = {layout.dp // r * layout.cp}"
        if r > 1:
            text += f", replicated over dp_replicate = {r} (HSDP)"
        if layout.ep > 1:
            text += f"; experts over ep_shard = world/(pp*ep) = {layout.moe_mesh_shape[1]}"
        return text
    if s == "megatron_fsdp":
        return (
            f"Megatron-FSDP shards params, grads and optimizer state over dp*cp = {layout.dp * layout.cp} "
            "(no PP, EP or SP)"
        )
    if s == "ddp":
        return "PyTorch DDP replicates the whole model on every rank (data parallelism only)"
    return (
        "Megatron-Core DDP with the distributed optimizer supports every dimension (TP, PP, VPP, CP, EP, SP)"
    )


def _auto_branch(req: PlanRequest, count: ParamCount, layout: ParallelLayout) -> str:
    """Which branch of auto's decision tree the request takes (docs/parallelism.md)."""
    shape = req.model
    if shape.is_moe:
        branch = f"MoE ({shape.num_moe_experts} experts): expert parallelism first (ep={layout.ep})"
    elif count.total >= LARGE_DENSE:
        branch = (
            f"large dense model ({_b(count.total)} >= 70B parameters): fsdp2 with TP, plus PP where "
            f"memory needs it (tp={layout.tp}, pp={layout.pp})"
        )
    elif req.gpus > req.gpus_per_node:
        nodes = -(-req.gpus // req.gpus_per_node)
        branch = (
            f"dense, multi-node ({req.gpus} GPUs on {nodes} nodes): fsdp2 with TP/PP sized to fit "
            f"(tp={layout.tp}, pp={layout.pp})"
        )
    else:
        branch = f"dense, one node ({req.gpus} GPUs): fsdp2, the multi-GPU default"
    if req.seq >= LONG_SEQUENCE:
        branch += f"; long sequence ({req.seq} >= {LONG_SEQUENCE}): cp={layout.cp}"
    return branch


def _fsdp2_layout_refusal(req: PlanRequest, layout: ParallelLayout, recompute: str) -> str:
    """The ConfigError fsdp2 raises for the sizes of `layout` (which auto then planned with megatron)."""
    sizes = (layout.tp, layout.pp, layout.cp, layout.ep, layout.etp)
    try:
        candidate_layout(req, *sizes, req.setup(recompute), "fsdp2")
    except ConfigError as err:
        return " ".join(str(err).split())
    return "none"  # not reached: auto plans with megatron only when fsdp2 refuses the sizes


def _strategy_reason(
    req: PlanRequest, count: ParamCount, layout: ParallelLayout, recompute: str, ranked: list[Choice]
) -> str:
    """One line: the strategy, and (auto) the decision tree's branch and why."""
    s = layout.strategy
    if req.strategy != "auto":
        return f"strategy={s}: given by --strategy; {_strategy_text(layout)}"
    if req.gpus == 1:
        return "strategy=megatron (auto): one GPU: no data parallelism, no distributed setup"
    refusal = fsdp2_request_refusal(req)
    if refusal is not None:
        return f"strategy=megatron (auto): fsdp2 refuses this request: {refusal}"
    branch = _auto_branch(req, count, layout)
    refusal = _fsdp2_layout_refusal(req, layout, recompute) if s == "megatron" else None
    if s == "megatron" and refusal == "none":
        sizes = (layout.tp, layout.pp, layout.cp, layout.ep, layout.etp)
        fsdp2 = [c for c in ranked if c.layout.strategy == "fsdp2" and _sizes(c.layout) == sizes]
        versus = (
            f" ({fsdp2[0].estimate.tokens_per_s_per_gpu:.0f} tokens/s/GPU)" if fsdp2 else " (or does not fit)"
        )
        return (
            f"strategy=megatron (auto): {branch}; fsdp2 accepts these sizes but is estimated slower{versus}: it "
            "all-gathers every layer's parameters in forward and backward of each micro batch, Megatron-Core "
            f"DDP once per step. {_strategy_text(layout)}"
        )
    if s == "megatron":
        return f"strategy=megatron (auto): {branch}; but fsdp2 refuses this layout: {refusal}"
    if req.model.is_moe and layout.ep > 1:
        branch += (
            f"; fsdp2 accepts it (ep={layout.ep} divides dp*cp = {layout.dp * layout.cp}, etp={layout.etp})"
        )
    elif req.model.is_moe:
        branch += "; fsdp2 accepts it (ep=1: the experts shard with their layer)"
    return f"strategy=fsdp2 (auto): {branch}. {_strategy_text(layout)}"


def _sizes(layout: ParallelLayout) -> tuple[int, ...]:
    return (layout.tp, layout.pp, layout.cp, layout.ep, layout.etp)


def _bubble_reason(req: PlanRequest, layout: ParallelLayout) -> str:
    """The schedule, its bubble fraction, and the other schedules' at this layout (equal stage times)."""
    vpp = layout.vpp if layout.interleaved else None
    name = schedules.effective(req.pp_schedule, vpp)
    p = layout.pp
    gbs = planned_global_batch(req, layout.dp)
    m = None if gbs is None else gbs // (req.micro_batch_size * layout.dp)
    formula = {
        "1f1b": "(p-1)/(m+p-1)",
        "gpipe": "(p-1)/(m+p-1)",
        "interleaved_1f1b": "(p-1)/(v*m+p-1)",
        "dfs": "(p-1)/(v*m+p-1)",
        "looped_bfs": "(p-1)/(v*m+p-1)",
        "zero_bubble": "(p-1)/(3*v*m+p-1)",
    }[name]
    engine = (
        "Megatron-Core" if schedules.SCHEDULES[name].engine == "megatron" else "torch.distributed.pipelining"
    )
    if m is None:
        return f"pp_schedule={name} ({engine}): bubble {formula} of a step (no global batch: m unknown)"
    text = (
        f"pp_schedule={name} ({engine}): bubble {formula} = {100 * schedules.bubble_fraction(name, p, m, vpp):.2f}% "
        f"of a step with p={p}, m={m} micro batches per data-parallel rank" + (f", v={vpp}" if vpp else "")
    )
    v = vpp or 2
    others = [("1f1b", None), ("interleaved_1f1b", v), ("zero_bubble", v)]
    text += "; at this p and m: " + ", ".join(
        f"{o}{f' (v={ov})' if ov else ''} {100 * schedules.bubble_fraction(o, p, m, ov):.2f}%"
        for o, ov in others
        if o != name
    )
    if name in ("gpipe", "looped_bfs"):
        text += f"; {name} keeps all {m} micro batches' activations until the backward"
    return text + " (equal stage times; zero_bubble: equal forward, input- and weight-backward times)"
