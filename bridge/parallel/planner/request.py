"""What the planner is asked (PlanRequest) and what it answers (Plan), with the request's own rules. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bridge.errors import ConfigError, config_error
from bridge.parallel import schedules
from bridge.parallel.layout import STRATEGIES, ModelShape, ParallelLayout
from bridge.parallel.memory import MEMORY_MODELS, MemoryEstimate, TrainingSetup
from bridge.parallel.param_count import ParamCount
from bridge.parallel.planner.speed import StepEstimate
from bridge.parallel.planner.stages import SplitFields, StageSplit
from bridge.parallel.planner.systems import DEFAULT_SYSTEM, GpuSystem, system

INTERCONNECTS = ("nvlink", "infiniband", "ethernet")
USABLE_FRACTION = 0.9  # of GPU memory: the rest for the CUDA context, NCCL buffers and fragmentation
SIZE_FLAGS = ("tp", "pp", "vpp", "cp", "ep", "etp")
LONG_SEQUENCE = 8192
STRATEGY_CHOICES = ("auto", *STRATEGIES)
LARGE_DENSE = 70e9  # parameters: auto's "large model" branch (fsdp2 with PP + TP)
# the seeds put pipeline stages across nodes for models from this many parameters (dense 70B+, large MoE)
LARGE_MODEL_PP = 70e9
MAX_GPUS = 1 << 20  # a request above this is a typo, not a cluster: refused in one line


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
    gpu: str = DEFAULT_SYSTEM  # the GPU system the speed estimate uses (bridge.parallel.planner.systems)
    # A recipe's settings (bridge.config.planning.recipe_request_fields), None: the planner chooses.
    # split: Megatron-Core's pipeline split fields, the only split tried (SplitFields(): the even split only;
    # None: bridge.parallel.planner.stages.split_options); sequence_parallel: with tp > 1;
    # recompute: "none" | "full" (the only one tried); trainable_params: PEFT's adapters (only they
    # get gradients and optimizer state)
    split: SplitFields | None = None
    sequence_parallel: bool | None = None
    recompute: str | None = None
    trainable_params: int | None = None
    distributed_optimizer: bool = (
        True  # strategy megatron: Megatron-Core's distributed optimizer (a recipe's)
    )

    def __post_init__(self):
        if self.pp_schedule is not None:
            name = schedules.normalize(self.pp_schedule)
            if name not in schedules.NAMES:
                raise config_error(
                    "pp_schedule",
                    self.pp_schedule,
                    f"must be one of {', '.join(schedules.NAMES)}",
                    "pick one of those",
                )
            if name == "v_schedule":
                raise config_error(
                    "pp_schedule", name, schedules.V_SCHEDULE_REFUSAL, schedules.V_SCHEDULE_FIX
                )
            object.__setattr__(self, "pp_schedule", name)
        for name in ("gpus", "gpus_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise config_error(name, value, "must be a positive integer", "give an integer >= 1")
        if self.gpus > MAX_GPUS:
            raise config_error(
                "gpus",
                self.gpus,
                f"must be at most {MAX_GPUS} (no cluster is larger)",
                "give the real GPU count",
            )
        for name in ("seq_length", "global_batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise config_error(
                    name, value, "must be a positive integer", "give an integer >= 1, or leave it out"
                )
        system(self.gpu)  # one ConfigError for an unknown system
        if self.interconnect is not None and self.interconnect not in INTERCONNECTS:
            raise config_error(
                "interconnect",
                self.interconnect,
                f"must be one of {', '.join(INTERCONNECTS)}",
                "nvlink for one node, infiniband or ethernet between nodes",
            )
        if not self.gpu_memory_gb > 0:
            raise config_error("gpu_memory_gb", self.gpu_memory_gb, "must be positive", "e.g. 80")
        if self.memory_model not in MEMORY_MODELS:
            raise config_error(
                "memory_model",
                self.memory_model,
                f"must be one of {', '.join(MEMORY_MODELS)}",
                "pick one of those",
            )
        for name, value in self.fixed.items():
            if name not in SIZE_FLAGS:
                raise ConfigError(f"fixed size {name!r}: unknown. Fix: use one of {', '.join(SIZE_FLAGS)}.")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise config_error(f"--{name}", value, "must be a positive integer", "give an integer >= 1")
        if self.recompute is not None and self.recompute not in ("none", "full"):
            raise config_error("recompute", self.recompute, "must be none or full", "pick one of those")
        self.setup(recompute="none")  # validates seq/batch/precision/optimizer
        self._check_strategy()

    def _check_strategy(self) -> None:
        if self.strategy not in STRATEGY_CHOICES:
            raise config_error(
                "--strategy",
                self.strategy,
                f"must be one of {', '.join(STRATEGY_CHOICES)}",
                "pick one of those (auto chooses fsdp2 or megatron per layout)",
            )
        r = self.dp_replicate_size
        if r is not None:
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise config_error(
                    "--dp-replicate-size", r, "must be a positive integer", "give an integer >= 1"
                )
            if self.strategy != "fsdp2":
                raise config_error(
                    "--dp-replicate-size",
                    r,
                    f"HSDP replication is an fsdp2 option; --strategy is {self.strategy!r}",
                    "add --strategy fsdp2, or drop --dp-replicate-size",
                )
        if self.strategy == "fsdp2":
            refusal = fsdp2_request_refusal(self)
            if refusal is not None:
                raise ConfigError(f"--strategy = 'fsdp2': {refusal}.")

    @property
    def system(self) -> GpuSystem:
        return system(self.gpu)

    @property
    def link(self) -> str:
        if self.interconnect is not None:
            return self.interconnect
        return "nvlink" if self.gpus <= self.gpus_per_node else "infiniband"

    @property
    def recompute_options(self) -> tuple[str, ...]:
        """Recomputation to try, in order: the recipe's, else none and (when that does not fit) full."""
        return (self.recompute,) if self.recompute is not None else ("none", "full")

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
            trainable_params=self.trainable_params,
            distributed_optimizer=self.distributed_optimizer,
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


def wants_pipeline(req: PlanRequest, total: int) -> bool:
    """The seeds' rule: 70B+ dense and large MoE models put pipeline stages across nodes."""
    return "pp" not in req.fixed and req.gpus > req.gpus_per_node and total >= LARGE_MODEL_PP


def strategies_to_try(req: PlanRequest) -> tuple[str, ...]:
    """The strategies a candidate's sizes are tried with, in order; the first that accepts them wins."""
    if req.strategy != "auto":
        return (req.strategy,)
    if req.gpus == 1 or fsdp2_request_refusal(req) is not None:
        return ("megatron",)
    return ("fsdp2", "megatron")


@dataclass(frozen=True)
class Choice:
    """One fitting candidate: its layout, recomputation, memory, stage split and estimated speed."""

    layout: ParallelLayout
    recompute: str
    memory: MemoryEstimate
    split: StageSplit
    estimate: StepEstimate
    broken: tuple[str, ...] = ()  # the seeds' rules it breaks (bridge.parallel.planner.seeds)


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
    estimate: StepEstimate | None = None  # the recommendation's speed
    split: StageSplit | None = None  # the recommendation's layers per pipeline stage
    ranked: list[Choice] = field(default_factory=list)  # fitting candidates, fastest first (--compare)

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


def planned_global_batch(req: PlanRequest, dp: int) -> int | None:
    """The global batch a layout with `dp` trains with: the request's, or (round_global_batch) the
    request's rounded down to a multiple of micro_batch_size*dp, at least one such multiple."""
    gbs = req.global_batch_size
    unit = req.micro_batch_size * dp
    if gbs is None or not req.round_global_batch or gbs % unit == 0:
        return gbs
    return max(unit, gbs // unit * unit)
