"""Recommend a parallel layout for a model on a cluster, with a per-GPU memory estimate. Pure Python.

The search follows the seeds' sizing rules (shared/seeds/001, 000) and returns the first candidate, in
their order of preference, that passes ParallelLayout validation and fits the memory budget:

- cp: sequences of 8K tokens and more get context parallelism (about one CP rank per 16K tokens, at
  least 2; up to 8x that when memory needs it); shorter sequences never.
- dense models: tp is sized by the active parameters and kept inside a node (<= gpus_per_node; <= 4 over
  ethernet, as the seeds advise); pp is added for depth, across nodes, when TP alone does not fit; the
  smallest model-parallel group that fits wins (the rest is data parallelism), larger tp first.
- MoE models: tp stays small (sized by the *active* parameters), ep is the main dimension (as many
  experts spread as the GPUs allow), pp handles depth across nodes; etp stays 1 (rarely useful).
- pp > 1 is interleaved (vpp: about four layers per virtual stage) when the micro batches allow it.
- sequence_parallel whenever tp > 1 (it shards the norm activations; MoE with tp > 1 requires it).
- activation recomputation (full): for dense models only when no layout fits without it; for MoE
  models before raising tp (small TP is worth the recompute, as in the MoE recipes).
dp and edp are implied: world / (tp*pp*cp) and world / (pp*ep*etp).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape, ParallelLayout
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
    precision: str = "bf16"
    optimizer: str = "adam"
    memory_model: str = "megatron"
    fixed: dict[str, int] = field(default_factory=dict)  # sizes to keep: tp, pp, vpp, cp, ep, etp

    def __post_init__(self):
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
        )


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
    def warnings(self) -> list[str]:
        return list(self.layout.warnings) if self.layout is not None else []

    @property
    def budget_gb(self) -> float:
        return self.request.gpu_memory_gb * USABLE_FRACTION


# ---- candidate sizes ---------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_start(active: int) -> int:
    """Tensor parallelism by active parameters (the seeds' table; a starting point, memory decides)."""
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


def _choose_vpp(shape: ModelShape, pp: int, setup: TrainingSetup, dp: int) -> int | None:
    if pp == 1:
        return None
    m = setup.num_microbatches(dp)
    if m is not None and (m < pp or m % pp):
        return None  # Megatron-Core's interleaved schedule needs the micro batches in groups of pp
    per_stage = shape.num_layers // pp
    options = [v for v in _divisors(per_stage) if v >= 2]
    if not options:
        return None
    return min(options, key=lambda v: (abs(per_stage / v - 4), -v))


def _candidates(req: PlanRequest, active: int):
    """((tp, pp, cp, ep, etp), recompute) in the seeds' order of preference; the caller checks validity."""
    shape, gpus, fixed = req.model, req.gpus, req.fixed
    tp_cap = min(req.gpus_per_node, 4 if req.link == "ethernet" else req.gpus_per_node)
    start = _tp_start(active)
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in _divisors(gpus) if t <= tp_cap]
    tps = sorted(tps, key=lambda t: (t < start, t))  # from the starting tp upwards, smaller only if forced
    pps = [fixed["pp"]] if "pp" in fixed else _divisors(gpus)
    # cp only for long sequences (from the seeds' size up, more when memory needs it)
    cp0 = _cp_start(req.seq)
    cps = (
        [fixed["cp"]]
        if "cp" in fixed
        else [c for c in _divisors(gpus) if c >= cp0 and (c & (c - 1)) == 0][:4]
    )
    if cp0 == 1:
        cps = cps[:1]
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


def _layout(req: PlanRequest, tp, pp, cp, ep, etp, setup: TrainingSetup) -> ParallelLayout:
    world = req.gpus
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 1
    vpp = req.fixed.get("vpp") if "vpp" in req.fixed else _choose_vpp(req.model, pp, setup, dp)
    layout = ParallelLayout(
        world_size=world,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        ep=ep,
        etp=etp,
        sequence_parallel=tp > 1,
        gpus_per_node=req.gpus_per_node,
        model=req.model,
    )
    gbs = setup.global_batch_size
    if gbs is not None and gbs % (setup.micro_batch_size * layout.dp):
        raise ConfigError(
            f"train.global_batch_size = {gbs}: must be divisible by micro_batch_size*dp = "
            f"{setup.micro_batch_size}*{layout.dp}. Fix: change the global batch or the layout."
        )
    return layout


def _search(req: PlanRequest, active: int):
    """First fitting (layout, recompute, memory); also the lowest-memory valid candidate and first error."""
    budget = req.gpu_memory_gb * USABLE_FRACTION
    closest, first_error = None, None
    setups = {r: req.setup(r) for r in ("none", "full")}
    for sizes, recompute in _candidates(req, active):
        setup = setups[recompute]
        try:
            layout = _layout(req, *sizes, setup)
        except ConfigError as err:
            first_error = first_error or err
            continue
        mem = estimate_memory(req.model, layout, setup, req.memory_model)
        if closest is None or mem.total < closest[2].total:
            closest = (layout, recompute, mem)
        if mem.total <= budget:
            return (layout, recompute, mem), closest, first_error
    return None, closest, first_error


# ---- reasons and advice ------------------------------------------------------------------------------


def _b(n: float) -> str:
    return f"{n / 1e9:.1f}B"


def _reasons(req: PlanRequest, count: ParamCount, layout: ParallelLayout, recompute: str) -> list[str]:
    shape, fixed = req.model, req.fixed
    per_node = req.gpus_per_node

    def fixed_or(name: str, text: str) -> str:
        return f"{name}={getattr(layout, name)}: fixed by --{name}" if name in fixed else text

    out = [
        "strategy=megatron: Megatron-Core DDP with the distributed optimizer supports every dimension "
        "(TP, PP, VPP, CP, EP, SP)"
    ]
    if layout.tp == 1:
        tp_text = f"tp=1: {_b(count.active)} active parameters fit without tensor parallelism"
    else:
        tp_text = (
            f"tp={layout.tp}: sized by the {_b(count.active)} active parameters and memory; kept inside "
            f"one node ({per_node} GPUs, {'nvlink' if layout.tp <= per_node else 'CROSSES NODES'})"
        )
        if req.link == "ethernet":
            tp_text += "; at most 4 over ethernet, as the seeds advise"
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
        if layout.interleaved:
            vpp_text = (
                f"vpp={layout.vpp}: interleaved 1F1B, {shape.num_layers // (layout.pp * layout.vpp)} "
                "layers per virtual stage, to shrink the pipeline bubble"
            )
        else:
            vpp_text = (
                "vpp unset: no interleaving (the layers per stage or the micro batches per step "
                "do not divide into virtual stages)"
            )
        out.append(fixed_or("vpp", vpp_text))
    if layout.cp == 1:
        cp_text = f"cp=1: sequence {req.seq} < {LONG_SEQUENCE} needs no context parallelism"
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
    else:
        out.append("sequence_parallel=False: needs tp > 1")
    if recompute == "none":
        out.append("activation recomputation: none (fits without)")
    elif shape.is_moe:
        out.append("activation recomputation: full (needed to fit at this small tp; cheaper than more TP)")
    else:
        out.append("activation recomputation: full (no layout fits without it)")
    out.append(f"dp={layout.dp}, edp={layout.edp}: implied by world/(tp*pp*cp) and world/(pp*ep*etp)")
    return out


def _advice(req: PlanRequest, active: int) -> list[str]:
    out = ["full activation recomputation was tried and is not enough on its own"]
    for factor in (2, 4, 8, 16, 32, 64):
        gpus = req.gpus * factor
        bigger = replace(req, gpus=gpus)
        found, _, _ = _search(bigger, active)
        if found is not None:
            layout, recompute, mem = found
            out.append(
                f"more GPUs: {gpus} GPUs fit ({layout.describe()}, recompute={recompute}, "
                f"{mem.total:.1f} GB per GPU)"
            )
            break
    else:
        out.append(f"more GPUs: not even {req.gpus * 64} GPUs fit with these settings")
    if req.micro_batch_size > 1:
        found, _, _ = _search(replace(req, micro_batch_size=1), active)
        if found is not None:
            out.append(f"a smaller micro batch: --micro-batch-size 1 fits ({found[0].describe()})")
    if req.precision == "fp32":
        found, _, _ = _search(replace(req, precision="bf16"), active)
        if found is not None:
            out.append(f"mixed precision: --precision bf16 fits ({found[0].describe()})")
    if req.fixed:
        found, _, _ = _search(replace(req, fixed={}), active)
        if found is not None:
            out.append(
                f"drop the fixed sizes ({', '.join('--' + k for k in req.fixed)}): {found[0].describe()} fits"
            )
    return out


def plan(req: PlanRequest) -> Plan:
    """The recommended layout for `req`, or (fits=False) advice on what would make it fit."""
    count = count_parameters(req.model)
    found, closest, first_error = _search(req, count.active)
    if found is None:
        if closest is None:  # no candidate is even valid: the fixed sizes (or the GPU count) rule it out
            raise first_error or ConfigError(
                f"gpus = {req.gpus}: no valid layout for this model. Fix: change the GPU count or fixed sizes."
            )
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
