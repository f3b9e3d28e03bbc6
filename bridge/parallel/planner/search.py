"""Recommend a parallel layout for a model on a cluster, with per-GPU memory and speed estimates. Pure Python.

The search follows the sizing rules of docs/parallelism.md ("How `bridge plan` chooses a layout"): every
candidate that passes ParallelLayout validation and fits the memory budget gets a step-time estimate
(speed.py); the seeds' rules rank them (seeds.py) and the fastest of those that keep the most rules wins.
The candidates, in their order of preference (which breaks ties):

- cp: sequences of 8K tokens and more get context parallelism (about one CP rank per 16K tokens, at
  least 2; up to 8x that when memory needs it); shorter sequences never. CP is a choice, never a
  precondition: when no CP group divides the GPUs (or no layout with it fits) cp falls back to 1.
- dense models: tp is sized by the active parameters and kept inside a node (<= gpus_per_node; <= 4 over
  ethernet, too slow for more TP traffic); pp adds depth across nodes (for 70B+ models on several nodes
  always, uneven stages where the layer count needs them: stages.py); smallest model-parallel group first.
- MoE models: tp stays small (sized by the *active* parameters), ep is the main dimension (as many
  experts spread as the GPUs allow), pp handles depth across nodes; etp stays 1 (rarely useful).
- pp > 1 is interleaved (vpp: about four layers per virtual stage) when the micro batches allow it; a
  requested pipeline schedule (PlanRequest.pp_schedule: one of bridge.parallel.schedules.NAMES) decides
  instead: gpipe and 1f1b keep one stage per rank, the multi-stage ones need vpp >= 2. The reasons state
  the schedule's bubble fraction and the other schedules' at the same layout (bridge.parallel.schedules).
- sequence_parallel whenever tp > 1 (it shards the norm activations; MoE with tp > 1 requires it).
- activation recomputation (full): for dense models only when no layout fits without it; for MoE
  models before raising tp (small TP is worth the recompute, as in the MoE recipes).
dp and edp are implied: world / (tp*pp*cp) and world / (pp*ep*etp). A default global batch (a recipe's,
round_global_batch) is rounded down to a multiple of micro_batch_size*dp rather than ruling a layout out.

The data-parallel strategy (PlanRequest.strategy) does not change the order of the candidates, only
which of them are valid (ParallelLayout's strategy rules) and the memory model that checks the fit
(bridge.parallel.memory). `auto` (NeMo AutoModel's decision tree) picks per candidate: one GPU:
megatron with everything 1 (no distributed setup); otherwise fsdp2 whenever fsdp2 accepts the request
(not fp16, not zero_bubble) and the layout (for MoE: ep | dp*cp, etp 1), else
megatron, and the reasons name the branch and fsdp2's refusal. megatron_fsdp plans turn sequence
parallelism off (Megatron-FSDP refuses it).
"""

from __future__ import annotations

from dataclasses import replace

from bridge.errors import ConfigError, config_error
from bridge.parallel.layout import ParallelLayout
from bridge.parallel.memory import TrainingSetup, estimate_memory
from bridge.parallel.param_count import count_parameters
from bridge.parallel.planner.candidates import candidate_layout, candidates, tp_start
from bridge.parallel.planner.reasons import reasons
from bridge.parallel.planner.request import (
    USABLE_FRACTION,
    Choice,
    Plan,
    PlanRequest,
    strategies_to_try,
    wants_pipeline,
)
from bridge.parallel.planner.seeds import rank
from bridge.parallel.planner.speed import estimate_step
from bridge.parallel.planner.stages import layout_split

MAX_PARAMETERS = 1e15  # a thousand times the largest published models: a shape beyond it is a typo


def search(req: PlanRequest, active: int, total: int | None = None, *, first_only: bool = False):
    """(fitting choices, fastest first; the lowest-memory valid candidate as (layout, recompute, memory)).

    Every candidate's sizes are tried under the first strategy that accepts them, without recomputation
    and (only when that does not fit) with full recomputation; pipeline sizes that split the layers
    unevenly only for a large model that no even pipeline fits, or a --pp the user fixed.
    The layouts that keep the seeds' sizing rules rank first, fastest first (bridge.parallel.planner.seeds). `first_only`: stop at the first
    fitting candidate (what the advice needs to know)."""
    budget = req.gpu_memory_gb * USABLE_FRACTION
    closest = None
    fitting: list[Choice] = []
    setups = {r: req.setup(r) for r in req.recompute_options}
    strategies = strategies_to_try(req)
    total = count_parameters(req.model).total if total is None else total
    seen = set()
    for sizes, _ in candidates(req, active, uneven=False):
        if sizes in seen:
            continue
        seen.add(sizes)
        closest = _evaluate(req, sizes, setups, strategies, budget, fitting, closest)
        if first_only and fitting:
            return fitting, closest
    # uneven stages only where the layer count needs them: a large model with no fitting even pipeline
    if wants_pipeline(req, total) and not any(c.layout.pp > 1 for c in fitting) or "pp" in req.fixed:
        for sizes, _ in candidates(req, active, uneven=True):
            if sizes not in seen:
                seen.add(sizes)
                closest = _evaluate(req, sizes, setups, strategies, budget, fitting, closest)
    return rank(req, total, tp_start(active), fitting), closest


def _evaluate(req, sizes, setups, strategies, budget, fitting: list[Choice], closest):
    """Add the fitting layouts of `sizes` to `fitting` (with their speed); return the new closest.

    The first strategy that accepts the sizes is used (auto's decision tree); recomputation only when
    the layout does not fit without it (it only slows a layout that fits)."""
    for recompute in req.recompute_options:
        built = _first_valid(req, sizes, setups[recompute], strategies)
        if built is None:
            return closest
        layout, setup = built
        mem = estimate_memory(layout.model, layout, setup, req.memory_model)
        if closest is None or mem.total < closest[2].total:
            closest = (layout, recompute, mem)
        if mem.total <= budget:
            split = layout_split(layout)
            est = estimate_step(req.model, layout, setup, split, req.system, req.link)
            fitting.append(Choice(layout, recompute, mem, split, est))
            return closest
    return closest


def _first_valid(
    req: PlanRequest, sizes: tuple, setup: TrainingSetup, strategies: tuple[str, ...]
) -> tuple[ParallelLayout, TrainingSetup] | None:
    """The layout of these sizes under the first strategy that accepts them (None: none does)."""
    for strategy in strategies:
        try:
            return candidate_layout(req, *sizes, setup, strategy)
        except ConfigError:
            continue
    return None


def _advice(req: PlanRequest, active: int) -> list[str]:
    out = [
        "full activation recomputation was tried and is not enough on its own"
        if req.recompute is None
        else f"recomputation as the recipe sets it ({req.recompute})"
    ]
    for factor in (2, 4, 8, 16, 32, 64):
        gpus = req.gpus * factor
        bigger = replace(req, gpus=gpus)
        found, _ = search(bigger, active, first_only=True)
        if found:
            layout, recompute, mem = found[0].layout, found[0].recompute, found[0].memory
            out.append(
                f"more GPUs: {gpus} GPUs fit ({layout.describe()}, strategy={layout.strategy}, recompute={recompute}, "
                f"{mem.total:.1f} GB per GPU)"
            )
            break
    else:
        out.append(f"more GPUs: not even {req.gpus * 64} GPUs fit with these settings")
    if req.recompute == "none":  # the recipe's choice, kept: say whether recomputing would fit
        found, _ = search(replace(req, recompute="full"), active, first_only=True)
        if found:
            out.append(f"full recomputation: --recompute full fits ({found[0].layout.describe()})")
    if req.micro_batch_size > 1:
        found, _ = search(replace(req, micro_batch_size=1), active, first_only=True)
        if found:
            out.append(f"a smaller micro batch: --micro-batch-size 1 fits ({found[0].layout.describe()})")
    if req.precision == "fp32":
        found, _ = search(replace(req, precision="bf16"), active, first_only=True)
        if found:
            out.append(f"mixed precision: --precision bf16 fits ({found[0].layout.describe()})")
    if req.fixed:
        found, _ = search(replace(req, fixed={}), active, first_only=True)
        if found:
            out.append(
                f"drop the fixed sizes ({', '.join('--' + k for k in req.fixed)}): {found[0].layout.describe()} fits"
            )
    return out


def _no_valid_layout(req: PlanRequest) -> ConfigError:
    """The error when no candidate is valid, in terms of what the user set: the sizes the planner would
    choose (tp, pp, cp, ep, etp not given) are taken at 1, so no message blames a size the user never set.
    That layout is among the candidates, so its own rule violation is the reason nothing is valid."""
    sizes = {name: req.fixed.get(name, 1) for name in ("tp", "pp", "cp", "ep", "etp")}
    try:  # the last strategy tried is the most permissive one (auto: megatron)
        candidate_layout(req, **sizes, setup=req.setup("none"), strategy=strategies_to_try(req)[-1])
    except ConfigError as err:
        return err
    given = ", ".join(f"--{k} {v}" for k, v in req.fixed.items()) or "no fixed sizes"
    return config_error(
        "gpus",
        req.gpus,
        f"no valid layout for this model with {given}",
        "change the GPU count or the fixed sizes",
    )


def plan(req: PlanRequest) -> Plan:
    """The recommended layout for `req` (the fastest that fits), or (fits=False) advice on what would."""
    count = count_parameters(req.model)
    if count.total > MAX_PARAMETERS:
        raise config_error(
            "model",
            f"{count.total:.3g} parameters",
            f"is more than {MAX_PARAMETERS:.0e}, beyond any cluster's memory (a typo in the config?)",
            "check hidden_size, intermediate_size, the layer and expert counts",
        )
    ranked, closest = search(req, count.active, count.total)
    if not ranked:
        if closest is None:  # no candidate is even valid: the fixed sizes (or the GPU count) rule it out
            raise _no_valid_layout(req)
        return Plan(req, count, fits=False, advice=_advice(req, count.active), closest=closest)
    best = ranked[0]
    return Plan(
        req,
        count,
        fits=True,
        layout=best.layout,
        recompute=best.recompute,
        memory=best.memory,
        reasons=reasons(req, count, best, ranked),
        estimate=best.estimate,
        split=best.split,
        ranked=ranked,
    )
