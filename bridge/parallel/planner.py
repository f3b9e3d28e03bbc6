"""Recommend a parallel layout for a model on a cluster, with a per-GPU memory estimate. Pure Python.

The search follows the sizing rules of docs/parallelism.md ("How `bridge plan` chooses a layout") and
returns the first candidate, in their order of preference, that passes ParallelLayout validation and
fits the memory budget:

- cp: sequences of 8K tokens and more get context parallelism (about one CP rank per 16K tokens, at
  least 2; up to 8x that when memory needs it); shorter sequences never. CP is a choice, never a
  precondition: when no CP group divides the GPUs (or no layout with it fits) cp falls back to 1.
- dense models: tp is sized by the active parameters and kept inside a node (<= gpus_per_node; <= 4 over
  ethernet, too slow for more TP traffic); pp is added for depth, across nodes, when TP alone does not
  fit; the smallest model-parallel group that fits wins (the rest is data parallelism), larger tp first.
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
(not fp16, not zero_bubble) and the layout (for MoE: ep | dp*cp, not pp > 1 with ep > 1, etp 1), else
megatron, and the reasons name the branch and fsdp2's refusal. megatron_fsdp plans turn sequence
parallelism off (Megatron-FSDP refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bridge.errors import ConfigError
from bridge.parallel import schedules
from bridge.parallel.layout import STRATEGIES, ModelShape, ParallelLayout
from bridge.parallel.memory import (
    MEMORY_MODELS,
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
)
from bridge.parallel.param_count import ParamCount, count_parameters

INTERCONNECTS = ("nvlink", "infiniband", "ethernet")
USABLE_FRACTION = 0.9  # of GPU memory: the rest for the CUDA context, NCCL buffers and fragmentation
SIZE_FLAGS = ("tp", "pp", "vpp", "cp", "ep", "etp")
LONG_SEQUENCE = 8192
STRATEGY_CHOICES = ("auto", *STRATEGIES)
LARGE_DENSE = 70e9  # parameters: auto's "large model" branch (fsdp2 with PP + TP)


@dataclass(frozen=True)
class PlanRequest:
    model: ModelShape
    gpus: int
    gpus_per_node: int = 8
    interconnect: str | None = None  # None: nvlink on one node, infiniband across nodes
    gpu_memory_gb: float = 80.0
    seq_length: int | None = None  # None: the model's seq_length, else 4096
    global_batch_size: int | None = None
    micro_batch_size: int = 1
    # True when global_batch_size is only a default (a recipe's): the planner may round it down to a
    # multiple of micro_batch_size*dp (at least one) rather than rule a layout out; see Plan.global_batch_size
    round_global_batch: bool = False
    precision: str = "bf16"
    optimizer: str = "adam"
    memory_model: str = "megatron"
    fixed: dict[str, int] = field(default_factory=dict)  # sizes to keep: tp, pp, vpp, cp, ep, etp
    pp_schedule: str | None = None  # None: Megatron-Core's 1f1b / interleaved_1f1b by vpp
    strategy: str = "auto"  # auto | megatron | fsdp2 | megatron_fsdp | ddp (module docstring)
    dp_replicate_size: int | None = None  # fsdp2 only: HSDP replicas (sharded within each)

    def __post_init__(self):
        if self.pp_schedule is not None:
            name = schedules.normalize(self.pp_schedule)
            if name not in schedules.NAMES:
                raise ConfigError(
                    f"pp_schedule = {self.pp_schedule!r}: must be one of {', '.join(schedules.NAMES)}. "
                    "Fix: pick one of those."
                )
            if name == "v_schedule":
                raise ConfigError(
                    f"pp_schedule = 'v_schedule': {schedules.V_SCHEDULE_REFUSAL}. Fix: {schedules.V_SCHEDULE_FIX}."
                )
            object.__setattr__(self, "pp_schedule", name)
        for name in ("gpus", "gpus_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{name} = {value!r}: must be a positive integer. Fix: give an integer >= 1."
                )
        if self.interconnect is not None and self.interconnect not in INTERCONNECTS:
            raise ConfigError(
                f"interconnect = {self.interconnect!r}: must be one of {', '.join(INTERCONNECTS)}. "
                "Fix: nvlink for one node, infiniband or ethernet between nodes."
            )
        if not self.gpu_memory_gb > 0:
            raise ConfigError(f"gpu_memory_gb = {self.gpu_memory_gb!r}: must be positive. Fix: e.g. 80.")
        if self.memory_model not in MEMORY_MODELS:
            raise ConfigError(
                f"memory_model = {self.memory_model!r}: must be one of {', '.join(MEMORY_MODELS)}. "
                "Fix: pick one of those."
            )
        for name, value in self.fixed.items():
            if name not in SIZE_FLAGS:
                raise ConfigError(f"fixed size {name!r}: unknown. Fix: use one of {', '.join(SIZE_FLAGS)}.")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"--{name} = {value!r}: must be a positive integer. Fix: give an integer >= 1."
                )
        self.setup(recompute="none")  # validates seq/batch/precision/optimizer
        self._check_strategy()

    def _check_strategy(self) -> None:
        if self.strategy not in STRATEGY_CHOICES:
            raise ConfigError(
                f"--strategy = {self.strategy!r}: must be one of {', '.join(STRATEGY_CHOICES)}. "
                "Fix: pick one of those (auto chooses fsdp2 or megatron per layout)."
            )
        r = self.dp_replicate_size
        if r is not None:
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise ConfigError(
                    f"--dp-replicate-size = {r!r}: must be a positive integer. Fix: give an integer >= 1."
                )
            if self.strategy != "fsdp2":
                raise ConfigError(
                    f"--dp-replicate-size = {r}: HSDP replication is an fsdp2 option; --strategy is "
                    f"{self.strategy!r}. Fix: add --strategy fsdp2, or drop --dp-replicate-size."
                )
        if self.strategy == "fsdp2":
            refusal = fsdp2_request_refusal(self)
            if refusal is not None:
                raise ConfigError(f"--strategy = 'fsdp2': {refusal}.")

    @property
    def link(self) -> str:
        if self.interconnect is not None:
            return self.interconnect
        return "nvlink" if self.gpus <= self.gpus_per_node else "infiniband"

    @property
    def seq(self) -> int:
        return self.seq_length or self.model.seq_length or 4096

    def setup(self, recompute: str) -> TrainingSetup:
        return TrainingSetup(
            seq_length=self.seq,
            micro_batch_size=self.micro_batch_size,
            global_batch_size=self.global_batch_size,
            precision=self.precision,
            optimizer=self.optimizer,
            recompute=recompute,
            pp_schedule=self.pp_schedule,
        )


def fsdp2_request_refusal(req: PlanRequest) -> str | None:
    """Why strategy fsdp2 cannot train this request whatever the layout (bridge/config/validation.py's
    rules), with the fix; None when it can."""
    if req.precision == "fp16":
        return (
            "fsdp2 has no fp16 loss scaler (validation refuses mixed_precision.precision=fp16_mixed with "
            "it). Fix: --precision bf16, or --strategy megatron for fp16"
        )
    if req.pp_schedule == "zero_bubble":
        return (
            "pp_schedule zero_bubble computes the weight gradients outside FSDP2's reduce-scatter (the "
            "step never finishes). Fix: another --pp-schedule, or --strategy megatron"
        )
    return None


def strategies_to_try(req: PlanRequest) -> tuple[str, ...]:
    """The strategies a candidate's sizes are tried with, in order; the first that accepts them wins."""
    if req.strategy != "auto":
        return (req.strategy,)
    if req.gpus == 1 or fsdp2_request_refusal(req) is not None:
        return ("megatron",)
    return ("fsdp2", "megatron")


@dataclass
class Plan:
    request: PlanRequest
    params: ParamCount
    fits: bool
    layout: ParallelLayout | None = None  # the recommendation (None when nothing fits)
    recompute: str = "none"
    memory: MemoryEstimate | None = None
    reasons: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)  # when nothing fits: what would
    closest: tuple[ParallelLayout, str, MemoryEstimate] | None = None  # lowest-memory valid candidate

    @property
    def candidate(self) -> tuple[ParallelLayout, str, MemoryEstimate] | None:
        """(layout, recompute, memory) the plan reports: the recommendation, else the closest candidate.
        Its derived sizes (dp, edp, min_gpus) are arithmetic and hold whether or not it fits."""
        if self.layout is not None:
            return self.layout, self.recompute, self.memory
        return self.closest

    @property
    def global_batch_size(self) -> int | None:
        """The global batch the candidate trains with (the request's unless round_global_batch rounds it)."""
        cand = self.candidate
        if cand is None:
            return self.request.global_batch_size
        return planned_global_batch(self.request, cand[0].dp)

    def setup(self) -> TrainingSetup:
        """The TrainingSetup the candidate's memory estimate uses."""
        cand = self.candidate
        setup = self.request.setup(cand[1] if cand else "none")
        return replace(setup, global_batch_size=self.global_batch_size)

    @property
    def warnings(self) -> list[str]:
        return list(self.layout.warnings) if self.layout is not None else []

    @property
    def budget_gb(self) -> float:
        return self.request.gpu_memory_gb * USABLE_FRACTION


# ---- candidate sizes ---------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_start(active: int) -> int:
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
    powers = [c for c in _divisors(gpus) if (c & (c - 1)) == 0]
    if cp0 == 1:
        return [1]
    return [c for c in powers if c >= cp0][:4] + sorted((c for c in powers if c < cp0), reverse=True)


def _choose_vpp(shape: ModelShape, pp: int, setup: TrainingSetup, dp: int) -> int | None:
    """vpp for pp stages: the schedule's (setup.pp_schedule), else interleaving when the micro batches allow.
    A schedule that needs virtual stages and gets none raises ConfigError (the candidate is invalid)."""
    schedule = setup.pp_schedule
    if pp == 1 or schedule in ("1f1b", "gpipe"):
        return None
    m = setup.num_microbatches(dp)
    per_stage = shape.num_layers // pp
    options = [v for v in _divisors(per_stage) if v >= 2]
    if schedule is None or schedule == "interleaved_1f1b":
        # Megatron-Core's interleaved schedule needs the micro batches in groups of pp
        ok = m is None or (m >= pp and m % pp == 0)
    else:
        ok = m is None or schedules.microbatch_rule(schedule, pp, m) is None
    if not ok or not options:
        if schedule is not None:
            raise ConfigError(
                f"pp_schedule = {schedule!r}: needs virtual stages, and pp={pp} with {per_stage} layers per "
                f"stage and {m} micro batches per step has none. Fix: another layout or schedule."
            )
        return None
    return min(options, key=lambda v: (abs(per_stage / v - 4), -v))


def _candidates(req: PlanRequest, active: int):
    """((tp, pp, cp, ep, etp), recompute) in order of preference; the caller checks validity."""
    shape, gpus, fixed = req.model, req.gpus, req.fixed
    tp_cap = min(req.gpus_per_node, 4 if req.link == "ethernet" else req.gpus_per_node)
    start = _tp_start(active)
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in _divisors(gpus) if t <= tp_cap]
    tps = sorted(tps, key=lambda t: (t < start, t))  # from the starting tp upwards, smaller only if forced
    pps = [fixed["pp"]] if "pp" in fixed else _divisors(gpus)
    # cp only for long sequences (from LONG_SEQUENCE tokens up, more when memory needs it)
    cps = [fixed["cp"]] if "cp" in fixed else _cp_choices(req.seq, gpus)
    etp = fixed.get("etp", 1)
    if shape.is_moe:
        eps = (
            [fixed["ep"]]
            if "ep" in fixed
            else sorted((e for e in _divisors(shape.num_moe_experts) if gpus % e == 0), reverse=True)
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


def planned_global_batch(req: PlanRequest, dp: int) -> int | None:
    """The global batch a layout with `dp` trains with: the request's, or (round_global_batch) the
    request's rounded down to a multiple of micro_batch_size*dp, at least one such multiple."""
    gbs = req.global_batch_size
    unit = req.micro_batch_size * dp
    if gbs is None or not req.round_global_batch or gbs % unit == 0:
        return gbs
    return max(unit, gbs // unit * unit)


def _layout(
    req: PlanRequest, tp, pp, cp, ep, etp, setup: TrainingSetup, strategy: str = "megatron"
) -> tuple[ParallelLayout, TrainingSetup]:
    """The validated layout for these sizes and strategy, and `setup` with the global batch it trains with."""
    world = req.gpus
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 1
    setup = replace(setup, global_batch_size=planned_global_batch(req, dp))
    vpp = req.fixed.get("vpp") if "vpp" in req.fixed else _choose_vpp(req.model, pp, setup, dp)
    layout = ParallelLayout(
        world_size=world,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep,
        etp=etp,
        sequence_parallel=tp > 1 and strategy != "megatron_fsdp",  # Megatron-FSDP refuses SP
        strategy=strategy,
        dp_replicate_size=req.dp_replicate_size if strategy == "fsdp2" else None,
        gpus_per_node=req.gpus_per_node,
        model=req.model,
    )
    gbs = setup.global_batch_size
    if gbs is not None and gbs % (setup.micro_batch_size * layout.dp):
        raise ConfigError(
            f"train.global_batch_size = {gbs}: must be divisible by micro_batch_size*dp = "
            f"{setup.micro_batch_size}*{layout.dp}. Fix: change the global batch or the layout."
        )
    return layout, setup


def _search(req: PlanRequest, active: int):
    """First fitting (layout, recompute, memory), and the lowest-memory valid candidate."""
    budget = req.gpu_memory_gb * USABLE_FRACTION
    closest = None
    setups = {r: req.setup(r) for r in ("none", "full")}
    strategies = strategies_to_try(req)
    for sizes, recompute in _candidates(req, active):
        built = _first_valid(req, sizes, setups[recompute], strategies)
        if built is None:
            continue
        layout, setup = built
        mem = estimate_memory(req.model, layout, setup, req.memory_model)
        if closest is None or mem.total < closest[2].total:
            closest = (layout, recompute, mem)
        if mem.total <= budget:
            return (layout, recompute, mem), closest
    return None, closest


def _first_valid(
    req: PlanRequest, sizes: tuple, setup: TrainingSetup, strategies: tuple[str, ...]
) -> tuple[ParallelLayout, TrainingSetup] | None:
    """The layout of these sizes under the first strategy that accepts them (None: none does)."""
    for strategy in strategies:
        try:
            return _layout(req, *sizes, setup, strategy)
        except ConfigError:
            continue
    return None


# ---- reasons and advice ------------------------------------------------------------------------------


def _b(n: float) -> str:
    return f"{n / 1e9:.1f}B"


def _reasons(req: PlanRequest, count: ParamCount, layout: ParallelLayout, recompute: str) -> list[str]:
    shape, fixed = req.model, req.fixed
    per_node = req.gpus_per_node

    def fixed_or(name: str, text: str) -> str:
        return f"{name}={getattr(layout, name)}: fixed by --{name}" if name in fixed else text

    out = [_strategy_reason(req, count, layout, recompute)]
    if layout.tp == 1:
        tp_text = f"tp=1: {_b(count.active)} active parameters fit without tensor parallelism"
    else:
        tp_text = (
            f"tp={layout.tp}: sized by the {_b(count.active)} active parameters and memory; kept inside "
            f"one node ({per_node} GPUs, {'nvlink' if layout.tp <= per_node else 'CROSSES NODES'})"
        )
        if req.link == "ethernet":
            tp_text += "; at most 4 over ethernet (too slow for more TP traffic)"
    out.append(fixed_or("tp", tp_text))
    if layout.pp == 1:
        pp_text = "pp=1: the model fits without pipeline parallelism"
    else:
        across = layout.world_size > per_node
        pp_text = (
            f"pp={layout.pp}: {shape.num_layers // layout.pp} layers per stage; pipeline stages handle "
            f"depth{' across nodes' if across else ''} where TP alone does not fit"
        )
    out.append(fixed_or("pp", pp_text))
    if layout.pp > 1:
        schedule = schedules.effective(req.pp_schedule, layout.vpp if layout.interleaved else None)
        if layout.interleaved and schedule != "interleaved_1f1b":
            vpp_text = (
                f"vpp={layout.vpp}: {layout.vpp} virtual stages per rank for {schedule}, "
                f"{shape.num_layers // (layout.pp * layout.vpp)} layers per virtual stage"
            )
        elif layout.interleaved:
            vpp_text = (
                f"vpp={layout.vpp}: interleaved 1F1B, {shape.num_layers // (layout.pp * layout.vpp)} "
                "layers per virtual stage, to shrink the pipeline bubble"
            )
        elif schedule in ("1f1b", "gpipe") and req.pp_schedule is not None:
            vpp_text = f"vpp unset: pp_schedule {schedule} runs one stage per pipeline rank"
        else:
            vpp_text = (
                "vpp unset: no interleaving (the layers per stage or the micro batches per step "
                "do not divide into virtual stages)"
            )
        out.append(fixed_or("vpp", vpp_text))
        out.append(_bubble_reason(req, layout))
    if layout.cp == 1 and req.seq < LONG_SEQUENCE:
        cp_text = f"cp=1: sequence {req.seq} < {LONG_SEQUENCE} needs no context parallelism"
    elif layout.cp == 1:
        cp_text = (
            f"cp=1: a sequence of {req.seq} >= {LONG_SEQUENCE} tokens would use context parallelism, but no "
            f"layout with it is valid and fits on {layout.world_size} GPU(s)"
        )
    else:
        cp_text = f"cp={layout.cp}: sequence {req.seq} >= {LONG_SEQUENCE} is split across {layout.cp} ranks"
    out.append(fixed_or("cp", cp_text))
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
    if layout.sequence_parallel:
        out.append(
            "sequence_parallel=True: with tp > 1 it shards norm activations by tp"
            + (" (and MoE with tp > 1 requires it)" if shape.is_moe else "")
        )
    elif layout.tp > 1:  # megatron_fsdp: the only strategy the planner turns SP off for
        out.append(f"sequence_parallel=False: strategy {layout.strategy} does not support it")
    else:
        out.append("sequence_parallel=False: needs tp > 1")
    if recompute == "none":
        out.append("activation recomputation: none (fits without)")
    elif shape.is_moe:
        out.append("activation recomputation: full (needed to fit at this small tp; cheaper than more TP)")
    else:
        out.append("activation recomputation: full (no layout fits without it)")
    out.append(f"dp={layout.dp}, edp={layout.edp}: implied by world/(tp*pp*cp) and world/(pp*ep*etp)")
    gbs = planned_global_batch(req, layout.dp)
    if gbs != req.global_batch_size:
        out.append(
            f"global_batch_size={gbs}: the default {req.global_batch_size} rounded down to a multiple of "
            f"micro_batch_size*dp = {req.micro_batch_size}*{layout.dp} (give --global-batch-size to choose)"
        )
    return out


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
        _layout(req, *sizes, req.setup(recompute), "fsdp2")
    except ConfigError as err:
        return " ".join(str(err).split())
    return "none"  # not reached: auto plans with megatron only when fsdp2 refuses the sizes


def _strategy_reason(req: PlanRequest, count: ParamCount, layout: ParallelLayout, recompute: str) -> str:
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
    if s == "megatron":
        return (
            f"strategy=megatron (auto): {branch}; but fsdp2 refuses this layout: "
            f"{_fsdp2_layout_refusal(req, layout, recompute)}"
        )
    if req.model.is_moe and layout.ep > 1:
        branch += (
            f"; fsdp2 accepts it (ep={layout.ep} divides dp*cp = {layout.dp * layout.cp}, "
            f"no PP with EP, etp={layout.etp})"
        )
    elif req.model.is_moe:
        branch += "; fsdp2 accepts it (ep=1: the experts shard with their layer)"
    return f"strategy=fsdp2 (auto): {branch}. {_strategy_text(layout)}"


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


def _advice(req: PlanRequest, active: int) -> list[str]:
    out = ["full activation recomputation was tried and is not enough on its own"]
    for factor in (2, 4, 8, 16, 32, 64):
        gpus = req.gpus * factor
        bigger = replace(req, gpus=gpus)
        found, _ = _search(bigger, active)
        if found is not None:
            layout, recompute, mem = found
            out.append(
                f"more GPUs: {gpus} GPUs fit ({layout.describe()}, strategy={layout.strategy}, recompute={recompute}, "
                f"{mem.total:.1f} GB per GPU)"
            )
            break
    else:
        out.append(f"more GPUs: not even {req.gpus * 64} GPUs fit with these settings")
    if req.micro_batch_size > 1:
        found, _ = _search(replace(req, micro_batch_size=1), active)
        if found is not None:
            out.append(f"a smaller micro batch: --micro-batch-size 1 fits ({found[0].describe()})")
    if req.precision == "fp32":
        found, _ = _search(replace(req, precision="bf16"), active)
        if found is not None:
            out.append(f"mixed precision: --precision bf16 fits ({found[0].describe()})")
    if req.fixed:
        found, _ = _search(replace(req, fixed={}), active)
        if found is not None:
            out.append(
                f"drop the fixed sizes ({', '.join('--' + k for k in req.fixed)}): {found[0].describe()} fits"
            )
    return out


def _no_valid_layout(req: PlanRequest) -> ConfigError:
    """The error when no candidate is valid, in terms of what the user set: the sizes the planner would
    choose (tp, pp, cp, ep, etp not given) are taken at 1, so no message blames a size the user never set.
    That layout is among the candidates, so its own rule violation is the reason nothing is valid."""
    sizes = {name: req.fixed.get(name, 1) for name in ("tp", "pp", "cp", "ep", "etp")}
    try:  # the last strategy tried is the most permissive one (auto: megatron)
        _layout(req, **sizes, setup=req.setup("none"), strategy=strategies_to_try(req)[-1])
    except ConfigError as err:
        return err
    given = ", ".join(f"--{k} {v}" for k, v in req.fixed.items()) or "no fixed sizes"
    return ConfigError(
        f"gpus = {req.gpus}: no valid layout for this model with {given}. "
        "Fix: change the GPU count or the fixed sizes."
    )


def plan(req: PlanRequest) -> Plan:
    """The recommended layout for `req`, or (fits=False) advice on what would make it fit."""
    count = count_parameters(req.model)
    found, closest = _search(req, count.active)
    if found is None:
        if closest is None:  # no candidate is even valid: the fixed sizes (or the GPU count) rule it out
            raise _no_valid_layout(req)
        return Plan(req, count, fits=False, advice=_advice(req, count.active), closest=closest)
    layout, recompute, mem = found
    return Plan(
        req,
        count,
        fits=True,
        layout=layout,
        recompute=recompute,
        memory=mem,
        reasons=_reasons(req, count, layout, recompute),
    )
