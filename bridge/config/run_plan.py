"""RunPlan: a ConfigContainer validated for one world size, holding every decision a run needs.

`build_plan(config, world_size, cuda=...)` is the one place a run is checked; it returns a frozen
`RunPlan`. `--dry-run` prints it, `pretrain(plan)` builds exactly it, and nothing downstream
re-validates or re-derives: the layout, the run's model (precision and recompute applied), the
precision that actually runs, the microbatch count, the samples each split must provide, the data and
tokenizer decisions, the learning-rate schedule in samples, the memory estimate per rank and the
warnings all come from here. Pure data: no torch or megatron import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.config import finetune_rules, performance, planning
from bridge.config.benchmarks import BenchmarkPlan, benchmark_plan
from bridge.config.checks.checkpoint import ResumePlan, resume_plan
from bridge.config.checks.data import blend_paths, parse_split
from bridge.config.checks.distributed import unused_ddp_settings_warning
from bridge.config.checks.optimizer import scheduler_iters
from bridge.config.checks.split_documents import check_indexed_splits
from bridge.config.distill_rules import DistillPlan, distill_plan
from bridge.config.environment import Environment
from bridge.config.performance import SettingState
from bridge.config.preference_rules import DPOPlan, check_preference, check_preference_files, dpo_plan
from bridge.config.profiling import ProfilingPlan, profiling_plan
from bridge.config.resilience import HangPlan, StragglerPlan, hang_plan, straggler_plan
from bridge.config.sections import FP8_PRECISIONS, PRECISION_DTYPES
from bridge.config.validation import validate_config
from bridge.models.dtypes import torch_dtype
from bridge.models.hybrid_provider import MambaModelProvider
from bridge.parallel import schedules
from bridge.parallel.memory import TrainingSetup, estimate_memory
from bridge.parallel.stages import describe

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.models.gpt_provider import GPTModelProvider
    from bridge.parallel.layout import ParallelLayout
    from bridge.parallel.memory import MemoryEstimate


@dataclass(frozen=True)
class Precision:
    requested: str  # mixed_precision.precision
    name: str  # "bf16" | "fp16" | "fp32": what actually runs
    fp8: str | None = None  # the fp8 recipe the GEMMs run in (delayed, tensorwise, mxfp8), or None

    @property
    def bf16(self) -> bool:
        return self.name == "bf16"

    @property
    def fp16(self) -> bool:
        return self.name == "fp16"

    @property
    def compute(self) -> str:
        """The tensor-core precision the matrix multiplies run in, for the MFU's peak: fp8 or the dtype."""
        return "fp8" if self.fp8 else self.name

    @property
    def torch_dtype(self):
        return torch_dtype(self.name)


@dataclass(frozen=True)
class DataPlan:
    kind: str  # mock | indexed | jsonl
    paths: tuple[str, ...]
    weights: tuple[float, ...] | None  # blend weights (None: one path, or proportional to size)
    split: tuple[float, float, float]  # train, valid, test ratios (sum 1)
    split_text: str  # dataset.split as given (Megatron's cache keys use it)
    seq_length: int
    seed: int
    reset_position_ids: bool
    reset_attention_mask: bool
    eod_mask_loss: bool
    num_workers: int  # what runs (0 on CPU: workers would compete with training threads)
    cache_dir: str | None
    sample_counts: tuple[int, int, int]  # samples the run reads from each split (0: the split is not built)
    # sft / chat data (bridge.training.data.sft)
    packed_sequence_size: int = 0  # 0 = one sample per row, padded to seq_length
    pad_seq_to_mult: int = 1  # packing: each sample's segment padded to a multiple of this (2*cp with CP)
    answer_only_loss: bool = True
    truncation: str = "right"  # right | drop
    skip_malformed_samples: bool = False  # vlm data: malformed conversations skipped and counted


@dataclass(frozen=True)
class SchedulePlan:
    warmup_samples: int
    decay_samples: int
    total_samples: int


@dataclass(frozen=True)
class PipelinePlan:
    """The pipeline schedule that runs (bridge.parallel.schedules; docs/parallelism.md)."""

    schedule: str | None  # 1f1b, interleaved_1f1b, gpipe, looped_bfs, dfs, zero_bubble; None with pp == 1
    engine: (
        str  # "megatron" (Megatron-Core's forward_backward function) | "torch" (bridge.training.pipelining)
    )
    torch_class: str | None  # the torch.distributed.pipelining.schedules class (engine "torch")
    stages_per_rank: int  # model chunks per pipeline rank (vpp, or 1)
    scale_grads_in_schedule: bool  # torch: the schedule divides the gradients by the micro batch count
    bubble_fraction: float  # of a step, with equal stage times (bridge.parallel.schedules.bubble_fraction)
    # decoder layers per pipeline rank ("/" between a rank's virtual stages), bridge.parallel.stages.describe
    stage_layers: str = ""

    def describe(self, pp: int, num_microbatches: int) -> str:
        if self.schedule is None:
            return "pipeline: none (pp=1)"
        engine = (
            f"torch.distributed.pipelining {self.torch_class}" if self.engine == "torch" else "Megatron-Core"
        )
        return (
            f"pipeline: {self.schedule} on {engine}, {pp * self.stages_per_rank} stages ({self.stages_per_rank} "
            f"per rank), {num_microbatches} micro batches, bubble {100 * self.bubble_fraction:.1f}% "
            f"(equal stage times); layers per rank {self.stage_layers}"
        )


def pipeline_plan(cfg: ConfigContainer, layout: ParallelLayout, num_microbatches: int) -> PipelinePlan:
    """The validated config's pipeline decision."""
    vpp = layout.vpp if layout.interleaved else None
    stages = vpp or 1
    if layout.pp == 1:
        return PipelinePlan(None, "megatron", None, 1, False, 0.0)
    name = schedules.effective(cfg.distributed.pp_schedule, vpp)
    s = schedules.SCHEDULES[name]
    return PipelinePlan(
        schedule=name,
        engine=s.engine,
        torch_class=s.torch_class,
        stages_per_rank=stages,
        scale_grads_in_schedule=bool(cfg.distributed.scale_grads_in_schedule) and s.engine == "torch",
        bubble_fraction=schedules.bubble_fraction(name, layout.pp, num_microbatches, vpp),
        stage_layers=describe(layout.chunk_layers()),
    )


@dataclass(frozen=True)
class RunPlan:
    config: ConfigContainer  # the resolved config (a private copy: read it, do not change it)
    world_size: int
    environment: Environment  # the machine planned for (CUDA, device, Transformer Engine, ...)
    # the GPU performance settings asked for, each active or inactive with its reason (the provider
    # holds the values that run: inactive ones are off)
    performance: tuple[SettingState, ...]
    layout: ParallelLayout
    provider: GPTModelProvider  # the run's model: precision and activation recompute applied
    precision: Precision
    num_microbatches: int
    pipeline: PipelinePlan
    data: DataPlan
    schedule: SchedulePlan
    memory: MemoryEstimate | None  # per rank, the fullest pipeline stage (None: not estimable)
    warnings: tuple[str, ...]
    profiling: ProfilingPlan | None = None  # None: nothing is profiled (bridge/config/profiling.py)
    # the warnings (also in `warnings`) about the recipe's own values, not the user's: how a GPU recipe
    # runs on CPU, DDP settings a strategy ignores. The run's log shows them with logger.verbose only
    # (nothing the user set to act on), the dry run always.
    detail_warnings: tuple[str, ...] = ()
    # where the run starts: checkpoint.load, a re-run resuming checkpoint.save, or scratch (None: as
    # checkpoint.load says; bridge/config/checks/checkpoint.py)
    resume: ResumePlan | None = None
    # dataset.kind=preference: the DPO / IPO loss and its reference model (bridge/config/preference_rules.py)
    dpo: DPOPlan | None = None
    # distill.teacher set: the teacher and the KD loss's settings (bridge/config/distill_rules.py)
    distill: DistillPlan | None = None
    # lm-eval benchmarks during training (bridge/config/benchmarks.py); None: none
    benchmarks: BenchmarkPlan | None = None
    # ft.rank_heartbeat_timeout / straggler.log_straggler (bridge/config/resilience.py); None: off
    hang: HangPlan | None = None
    stragglers: StragglerPlan | None = None

    @property
    def cuda(self) -> bool:
        return self.environment.cuda

    def summary_lines(self) -> list[str]:
        """The plan's decisions, one per line (the dry run prints them as YAML comments)."""
        cfg = self.config
        lines = [
            f"layout: {self.layout.describe()}",
            f"device: {self.environment.describe()}; precision: {self.precision.requested} -> "
            f"{self.precision.name}"
            + (f" with fp8 ({self.precision.fp8} scaling)" if self.precision.fp8 else ""),
            f"batch: global {cfg.train.global_batch_size} = micro {cfg.train.micro_batch_size} x "
            f"{self.num_microbatches} microbatches x DP {self.layout.dp}",
            *([self.pipeline.describe(self.layout.pp, self.num_microbatches)] if self.layout.pp > 1 else []),
            f"samples: train {self.data.sample_counts[0]}, valid {self.data.sample_counts[1]}, "
            f"test {self.data.sample_counts[2]}",
            f"lr schedule: warmup {self.schedule.warmup_samples} samples, decay {self.schedule.decay_samples}",
        ]
        if isinstance(self.provider, MambaModelProvider):
            # the hybrid's layer pattern as each pipeline stage builds it
            lines.append(f"hybrid layers per stage: {' | '.join(self.provider.stage_patterns())}")
        shape = self.layout.model
        if shape is not None and shape.vision_params:
            lines.append(
                f"image side: {shape.vision_params / 1e6:.1f}M parameters on the first stage "
                f"({shape.frozen_params / 1e6:.1f}M frozen), {shape.image_tokens} tokens per image "
                "(within seq_length)"
                + (
                    "; the language model is frozen"
                    if getattr(self.provider, "freeze_language_model", False)
                    else ""
                )
            )
        if self.memory is not None:
            m = self.memory
            lines.append(
                f"memory per rank (estimate): {m.total:.2f} GB (weights {m.params:.2f}, grads {m.grads:.2f}, "
                f"optimizer {m.optimizer:.2f}, activations {m.activations:.2f})"
            )
        lines += performance.summary(self.performance)
        if self.resume is not None and (cfg.checkpoint.save or cfg.checkpoint.load):
            lines.append(self.resume.describe())
        if self.profiling is not None:
            lines.append(self.profiling.describe())
        if self.dpo is not None:
            d = self.dpo
            lines.append(
                f"objective: {'DPO' if d.loss_type == 'sigmoid' else 'IPO'} (beta {d.beta}, label smoothing "
                f"{d.label_smoothing}), reference: {d.reference}; a micro batch is 2 x {cfg.train.micro_batch_size} rows"
            )
        if self.distill is not None:
            k = self.distill
            lines.append(
                f"objective: distillation from {k.teacher_path} ({k.teacher.num_layers} layers, hidden "
                f"{k.teacher.hidden_size}) on this layout, T={k.temperature}, top_k={k.top_k}, "
                + ("KD loss only" if k.skip_lm_loss else f"lm loss + {k.kd_loss_scale} x KD loss")
            )
        if self.benchmarks is not None:
            lines.append(self.benchmarks.describe())
        lines += [p.describe() for p in (self.hang, self.stragglers) if p is not None]
        lines += [f"warning: {w}" for w in self.warnings]
        return lines


def _run_provider(
    cfg: ConfigContainer, precision: Precision, settings: tuple[SettingState, ...]
) -> GPTModelProvider:
    """The model section with the run's precision (fp8 fields included), the performance settings that
    run (inactive ones off) and distributed.activation_checkpointing (full recompute of every layer)."""
    name = precision.name
    changes = dict(bf16=precision.bf16, fp16=precision.fp16, params_dtype=name,
                   pipeline_dtype=name if name != "fp32" else None)  # fmt: skip
    if precision.fp8:
        changes.update(FP8_PRECISIONS[precision.requested][1])
    changes.update(performance.model_changes(settings))
    if cfg.distributed.activation_checkpointing:
        changes.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    return dataclasses.replace(cfg.model, **changes)


def _memory(cfg: ConfigContainer, layout: ParallelLayout, precision: Precision) -> MemoryEstimate | None:
    try:
        setup = TrainingSetup(
            seq_length=cfg.model.seq_length,
            micro_batch_size=cfg.train.micro_batch_size,
            global_batch_size=cfg.train.global_batch_size,
            precision=precision.name,
            optimizer=cfg.optimizer.optimizer,
            recompute=planning.memory_recompute(cfg),  # the rule `bridge plan` reads a recipe with
            pp_schedule=cfg.distributed.pp_schedule,
            trainable_params=planning.trainable_parameters(cfg, layout.model),
            distributed_optimizer=bool(cfg.optimizer.use_distributed_optimizer),
        )
        return estimate_memory(layout.model, layout, setup)  # the model shape the layout was checked with
    except (ValueError, TypeError, ZeroDivisionError):
        return None  # a shape the memory model does not cover: the run does not depend on it


def build_plan(
    config: ConfigContainer, world_size: int, cuda: bool | None = None, env: Environment | None = None
) -> RunPlan:
    """Check every rule across sections for `world_size` ranks and return the run's frozen plan.

    `env`: the machine the run is for (bridge.config.environment.Environment); None: this machine,
    with CUDA as `cuda` says (None: whether it has an NVIDIA driver, found without importing torch).
    Raises ConfigError on the first violation; the plan's `warnings` (layout warnings first, then
    settings the run ignores) are for callers to print or log. `config` is not changed: the plan holds
    a resolved copy.
    """
    env = env if env is not None else Environment.detect(cuda)
    cfg = config.copy()
    cuda = env.cuda
    layout, warnings, settings = validate_config(cfg, world_size, env)
    mp = cfg.mixed_precision.precision
    runs = PRECISION_DTYPES[mp] if cuda else "fp32"
    fp8 = FP8_PRECISIONS[mp][1]["fp8_recipe"] if cuda and mp in FP8_PRECISIONS else None
    precision = Precision(requested=mp, name=runs, fp8=fp8)
    details = [w for w in warnings if w == unused_ddp_settings_warning(cfg.distributed)]
    if runs != PRECISION_DTYPES[mp]:
        details.append(f"mixed_precision.precision={mp} needs CUDA; training in fp32 on CPU.")
    t, d, v = cfg.train, cfg.dataset, cfg.validation
    workers = d.num_workers
    if workers and not cuda:
        details.append(
            f"dataset.num_workers={workers}: on CPU the data is read in the training process "
            "(worker processes would compete with the training threads for the same cores)."
        )
        workers = 0
    warnings += [w for w in details if w not in warnings]
    train_samples = t.train_iters * t.global_batch_size
    # Samples only for what the run reads: the loop evaluates at every multiple of eval_interval up to
    # train_iters (none when train_iters < eval_interval), and nothing reads the test split. A split asked
    # for samples is built, and Megatron-Core cannot build one with no documents (split_documents).
    evaluations = t.train_iters // v.eval_interval if v.eval_interval and v.eval_iters else 0
    valid = evaluations * v.eval_iters * t.global_batch_size
    test = 0
    paths, weights = blend_paths(d.data_paths) if d.data_paths else ([], None)
    data = DataPlan(
        kind=d.kind,
        paths=tuple(paths),
        weights=tuple(weights) if weights else None,
        split=parse_split(d.split),
        split_text=str(d.split),
        seq_length=cfg.model.seq_length,
        seed=d.seed,
        reset_position_ids=d.reset_position_ids,
        reset_attention_mask=d.reset_attention_mask,
        eod_mask_loss=d.eod_mask_loss,
        num_workers=workers,
        cache_dir=d.cache_dir,
        sample_counts=(train_samples, valid, test),
        packed_sequence_size=d.packed_sequence_size,
        pad_seq_to_mult=finetune_rules.packing_multiple(cfg),
        answer_only_loss=d.answer_only_loss,
        truncation=d.truncation,
        skip_malformed_samples=d.skip_malformed_samples,
    )
    if data.kind == "indexed":
        check_indexed_splits(data.paths, data.split, data.sample_counts, data.split_text)
    warmup, decay = scheduler_iters(cfg)
    schedule = SchedulePlan(
        warmup_samples=warmup * t.global_batch_size,
        decay_samples=decay * t.global_batch_size,
        total_samples=max(train_samples, 1),
    )
    num_microbatches = t.global_batch_size // (t.micro_batch_size * layout.dp)
    pipeline = pipeline_plan(cfg, layout, num_microbatches)
    check_preference(cfg, layout, pipeline.engine)
    provider = _run_provider(cfg, precision, settings)
    distill = distill_plan(cfg, provider, layout, world_size, pipeline.engine)
    check_preference_files(cfg)  # last: what the run would read
    return RunPlan(
        config=cfg,
        world_size=world_size,
        environment=env,
        performance=settings,
        layout=layout,
        provider=provider,
        precision=precision,
        num_microbatches=num_microbatches,
        pipeline=pipeline,
        data=data,
        schedule=schedule,
        memory=_memory(cfg, layout, precision),
        warnings=tuple(warnings),
        profiling=profiling_plan(cfg, cuda),
        detail_warnings=tuple(details),
        resume=resume_plan(cfg),
        dpo=dpo_plan(cfg),
        distill=distill,
        benchmarks=benchmark_plan(cfg, layout),
        hang=hang_plan(cfg),
        stragglers=straggler_plan(cfg),
    )
