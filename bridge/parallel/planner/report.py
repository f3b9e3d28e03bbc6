"""A Plan as JSON, as dotted overrides for run_recipe.py, or as a readable table."""

from __future__ import annotations

import shlex

from bridge.parallel.layout import ParallelLayout
from bridge.parallel.planner.request import USABLE_FRACTION, Plan
from bridge.parallel.planner.stages import field_values
from bridge.parallel.sizes import SIZE_FIELDS

_LAYOUT_KEYS = (*SIZE_FIELDS.items(), ("sequence_parallel", "sequence_parallel"))


def _layout_fields(layout: ParallelLayout | None) -> dict:
    out = {
        "strategy": layout.strategy if layout else None,
        "dp_replicate_size": layout.dp_replicate_size if layout else None,
    }
    out.update({key: getattr(layout, attr) if layout else None for key, attr in _LAYOUT_KEYS})
    out["data_parallel_size"] = layout.dp if layout else None
    out["expert_data_parallel_size"] = layout.edp if layout else None
    out["min_gpus"] = layout.min_gpus if layout else None
    return out


def plan_to_json(p: Plan) -> dict:
    """One JSON object: the layout by Megatron field names, parameter counts, memory, reasons, warnings.

    The layout keys, the derived sizes (data_parallel_size, expert_data_parallel_size, min_gpus) and
    memory_gb are always those of `p.candidate`: the recommendation, or when nothing fits the closest
    candidate (also under "closest"); whether it fits is the separate `fits` field."""
    req = p.request
    layout, recompute, mem = p.candidate or (None, "none", None)
    out = _layout_fields(layout)
    out.update(
        recompute_granularity=None if recompute == "none" else recompute,
        params_total=p.params.total,
        params_active=p.params.active,
        memory_gb=mem.as_dict() if mem else None,
        reasons=list(p.reasons),
        warnings=p.warnings,
        fits=p.fits,
        gpus=req.gpus,
        gpu_memory_gb=req.gpu_memory_gb,
        usable_memory_gb=round(p.budget_gb, 3),
        memory_model=req.memory_model,
        strategy_requested=req.strategy,
        seq_length=req.seq,
        global_batch_size=p.global_batch_size,
    )
    out["gpu"] = req.system.name
    out["estimate"] = _estimate_json(p.estimate) if p.estimate else None
    if p.split is not None and not p.split.even:
        out.update({name.removeprefix("model."): v for name, v in field_values(p.split.fields).items()})
        out["stage_layers"] = (
            [p.split.first, p.split.middle, p.split.last]
            if p.split.pp > 2
            else [
                p.split.first,
                p.split.last,
            ]
        )
    if not p.fits:
        out["advice"] = list(p.advice)
        if p.closest is not None:
            layout, recompute, mem = p.closest
            out["closest"] = {
                **_layout_fields(layout),
                "recompute_granularity": None if recompute == "none" else recompute,
                "memory_gb": mem.as_dict(),
            }
    return out


def _estimate_json(est) -> dict:
    """The speed estimate: tokens/s/GPU, TFLOP/s/GPU, MFU, step time and seconds per step by part."""
    out = est.as_dict()
    out["breakdown"] = out.pop("breakdown_s")
    return out


def compare_rows(p: Plan, top: int = 5) -> list[dict]:
    """The `top` fitting layouts, in the planner's order, with their estimates (--compare)."""
    rows = []
    for choice in p.ranked[:top]:
        lay = choice.layout
        rows.append(
            {
                **_layout_fields(lay),
                "recompute_granularity": None if choice.recompute == "none" else choice.recompute,
                "stages": choice.split.describe(),
                "memory_gb": round(choice.memory.total, 2),
                "estimate": _estimate_json(choice.estimate),
                "seed_rules_broken": list(choice.broken),
            }
        )
    return rows


def format_compare(p: Plan, top: int = 5) -> str:
    """The top layouts side by side, and why the first wins."""
    if not p.ranked:
        return "nothing fits: no layouts to compare"
    head = f"{'#':<3}{'layout':<44}{'strategy':<15}{'vpp':<5}{'recompute':<10}{'GB':>7}{'tok/s/GPU':>11}{'TFLOP/s':>9}{'MFU':>7}{'step s':>9}"
    lines = [head]
    for i, c in enumerate(p.ranked[:top], 1):
        lay, est = c.layout, c.estimate
        sizes = f"TP={lay.tp} PP={lay.pp} CP={lay.cp} EP={lay.ep} ETP={lay.etp} DP={lay.dp}"
        lines.append(
            f"{i:<3}{sizes:<44}{lay.strategy:<15}{lay.vpp or '-'!s:<5}{c.recompute:<10}{c.memory.total:>7.1f}"
            f"{est.tokens_per_s_per_gpu:>11.0f}{est.tflops_per_gpu:>9.0f}{100 * est.mfu:>6.1f}%{est.step_time_s:>9.2f}"
        )
        if c.broken:
            lines.append(f"   breaks the seeds' rules: {'; '.join(c.broken)}")
    best = p.ranked[0]
    lines += ["", "why the first wins", *(f"  - {r}" for r in p.reasons[:2])]
    parts = ", ".join(f"{k} {v:.2f}" for k, v in best.estimate.breakdown.items() if v > 0)
    lines.append(f"  - its step by part (s): {parts}")
    return "\n".join(lines)


def plan_overrides(p: Plan, explicit: dict[str, object] | None = None) -> list[str]:
    """Dotted overrides that set the plan's layout (and the inputs the user gave explicitly)."""
    if p.layout is None:
        return []
    lay = p.layout
    out = [f"distributed.strategy={lay.strategy}"]
    if lay.dp_replicate_size is not None:
        out.append(f"distributed.dp_replicate_size={lay.dp_replicate_size}")
    if lay.strategy in ("fsdp2", "ddp"):
        # validation warns that the distributed optimizer (Megatron-Core's ZeRO-1) does nothing there
        out.append("optimizer.use_distributed_optimizer=False")
    elif lay.strategy == "megatron":
        # the estimate's optimizer sharding (a recipe's setting, else the distributed optimizer): the run's
        out.append(f"optimizer.use_distributed_optimizer={p.request.distributed_optimizer}")
    else:  # megatron_fsdp shards through the distributed optimizer (validation requires it)
        out.append("optimizer.use_distributed_optimizer=True")
    out += [
        f"model.tensor_model_parallel_size={lay.tp}",
        f"model.pipeline_model_parallel_size={lay.pp}",
        f"model.virtual_pipeline_model_parallel_size={'null' if lay.vpp is None else lay.vpp}",
        *_uneven_overrides(p, explicit or {}),
        f"model.context_parallel_size={lay.cp}",
        f"model.expert_model_parallel_size={lay.ep}",
        f"model.expert_tensor_parallel_size={lay.etp}",
        f"model.sequence_parallel={lay.sequence_parallel}",
    ]
    if p.request.pp_schedule is not None:
        out.append(f"distributed.pp_schedule={p.request.pp_schedule}")
    explicit = explicit or {}
    if p.request.recompute is not None and explicit.get("recompute") is None:
        pass  # the recipe's own recomputation settings stay as they are
    elif p.recompute == "full":
        out += [
            "model.recompute_granularity=full",
            "model.recompute_method=uniform",
            "model.recompute_num_layers=1",
        ]
    else:
        out.append("model.recompute_granularity=null")
    explicit = explicit or {}
    names = {
        "seq_length": "model.seq_length",
        "global_batch_size": "train.global_batch_size",
        "micro_batch_size": "train.micro_batch_size",
        "optimizer": "optimizer.optimizer",
    }
    for key, dotted in names.items():
        if key == "global_batch_size" and p.global_batch_size != p.request.global_batch_size:
            out.append(f"{dotted}={p.global_batch_size}")  # the default, rounded to fit dp
        elif explicit.get(key) is not None:
            out.append(f"{dotted}={explicit[key]}")
    precision = explicit.get("precision")
    if precision in ("bf16", "fp16"):
        out.append(f"mixed_precision.precision={precision}_mixed")
    elif precision == "fp32":
        out.append("mixed_precision.precision=fp32")
    return out


def _uneven_overrides(p: Plan, explicit: dict[str, object]) -> list[str]:
    """Megatron-Core's split fields the planner chose or the user gave (a recipe's own split is the recipe's
    already)."""
    if explicit.get("pipeline_layout") is not None:
        # quoted: '|', '*' and parentheses are shell syntax
        return [shlex.quote(f"model.pipeline_model_parallel_layout={explicit['pipeline_layout']}")]
    if p.split is None or p.split.even or p.request.split is not None:
        return []
    return [f"{name}={value}" for name, value in field_values(p.split.fields).items()]


def _estimate_lines(p: Plan) -> list[str]:
    est = p.estimate
    parts = ", ".join(f"{k} {v:.2f}" for k, v in est.breakdown.items() if v > 0)
    return [
        f"estimate on {est.system} ({p.request.precision}, global batch {est.global_batch_size})",
        f"  {est.tokens_per_s_per_gpu:.0f} tokens/s/GPU, {est.tflops_per_gpu:.0f} TFLOP/s/GPU, MFU "
        f"{100 * est.mfu:.1f}%, {est.step_time_s:.2f} s per step",
        f"  by part (s): {parts}",
    ]


def _b(n: int) -> str:
    return f"{n / 1e9:.2f}B"


def _memory_lines(mem, budget: float, gpu_gb: float) -> list[str]:
    accounting = f"{mem.memory_model} accounting" + (
        f" for strategy {mem.strategy}" if mem.memory_model == "megatron" else ""
    )
    lines = [f"memory per GPU (GB, {accounting}, pipeline stage {mem.stage})"]
    names = ["params", "grads", "optimizer", "activations"] + (["gathered"] if mem.gathered else [])
    for name in names:
        lines.append(f"  {name:<12} {getattr(mem, name):8.2f}")
    lines.append(
        f"  {'total':<12} {mem.total:8.2f}   of {budget:.1f} usable ({gpu_gb:g} GB x {USABLE_FRACTION:g})"
    )
    return lines


def _strategy_field(layout: ParallelLayout) -> str:
    replicate = layout.dp_replicate_size
    return f"strategy={layout.strategy}" + (f" dp_replicate_size={replicate}" if replicate else "")


def format_table(p: Plan, model_name: str, overrides: list[str]) -> str:
    req = p.request
    lines = [
        f"bridge plan: {model_name} on {req.gpus} GPUs ({req.gpus_per_node} per node, {req.link}), "
        f"{req.gpu_memory_gb:g} GB each",
        f"  seq {req.seq}, micro batch {req.micro_batch_size}, global batch {p.global_batch_size or '-'}, "
        f"{req.precision}, {req.optimizer}"
        + (
            ""
            if req.trainable_params is None
            else f", PEFT: {req.trainable_params / 1e6:.1f}M adapter parameters train"
        ),
        f"parameters: {_b(p.params.total)} total, {_b(p.params.active)} active per token",
        "",
    ]
    if p.fits:
        lay = p.layout
        lines += [
            f"layout   {lay.describe()}",
            f"         {_strategy_field(lay)} vpp={lay.vpp} sequence_parallel={lay.sequence_parallel} "
            f"recompute={p.recompute} min_gpus={lay.min_gpus}",
            f"         {p.split.describe()}",
            "",
            *_memory_lines(p.memory, p.budget_gb, req.gpu_memory_gb),
            "",
            *_estimate_lines(p),
            "",
            "why",
            *(f"  - {r}" for r in p.reasons),
        ]
        if p.warnings:
            lines += ["warnings", *(f"  - {w}" for w in p.warnings)]
        lines += ["", "overrides for run_recipe.py", "  " + " ".join(overrides)]
    else:
        lines.append("NOTHING FITS: no valid layout fits the memory budget on these GPUs.")
        if p.closest is not None:
            layout, recompute, mem = p.closest
            lines += [
                f"closest  {layout.describe()}",
                f"         {_strategy_field(layout)} vpp={layout.vpp} "
                f"sequence_parallel={layout.sequence_parallel} recompute={recompute} min_gpus={layout.min_gpus}",
                "",
                *_memory_lines(mem, p.budget_gb, req.gpu_memory_gb),
                f"  does not fit: {mem.total:.2f} GB > {p.budget_gb:.1f} GB usable per GPU",
            ]
        lines += ["", "what would fit", *(f"  - {a}" for a in p.advice)]
    return "\n".join(lines)
