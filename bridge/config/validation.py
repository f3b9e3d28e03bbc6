"""Rules across the sections of a ConfigContainer, checked before any process starts.

Each violation raises one ConfigError in the layout rules' format: "<field> = <value>: <rule>. Fix: <fix>."
Settings that are legal but have no effect with the chosen strategy or precision come back as warnings
(nothing is silently changed or silently ignored).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.config import finetune_rules, performance
from bridge.config import sections as S
from bridge.config.sections import FP8_PRECISIONS, PRECISION_DTYPES
from bridge.errors import ConfigError
from bridge.parallel import schedules

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.environment import Environment
    from bridge.parallel.layout import ParallelLayout


def fail(field: str, value, rule: str, fix: str) -> ConfigError:
    return ConfigError(f"{field} = {value!r}: {rule}. Fix: {fix}.")


def _one_of(field: str, value, choices) -> None:
    if value not in choices:
        raise fail(field, value, f"must be one of {', '.join(map(str, choices))}", "pick one of those")


def _positive(field: str, value, *, zero_ok: bool = False, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    low = 0 if zero_ok else 1
    if value is None or value < low:
        raise fail(
            field, value, f"must be >= {low}" + (" or null" if none_ok else ""), f"give a number >= {low}"
        )


def validate_config(
    cfg: ConfigContainer, world_size: int, env: Environment
) -> tuple[ParallelLayout, list[str], tuple[performance.SettingState, ...]]:
    """Raise ConfigError on the first broken rule; return the layout, the warnings and the GPU
    performance settings asked for, each active or inactive on `env` (bridge.config.performance).

    `env`: the machine the run is for (strategies and precisions that need CUDA or Transformer Engine
    are refused without them)."""
    cuda = env.cuda
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise fail(
            "world_size", world_size, "must be a positive integer", "pass --world-size N (or WORLD_SIZE)"
        )
    cfg.resolve()
    cfg.model.finalize()
    layout = cfg.layout(world_size)
    warnings = list(layout.warnings)
    _train(cfg, layout)
    _validation(cfg)
    warnings += _optimizer(cfg)
    _scheduler(cfg)
    _dataset(cfg)
    _tokenizer(cfg)
    _checkpoint(cfg)
    warnings += _logger(cfg)
    # the GPU performance settings this machine runs (the plan reports them); rules read the effective value
    settings = performance.resolve(cfg, layout, env)
    running = frozenset(s.field for s in settings if s.active)
    warnings += _distributed(cfg, layout, running)
    if cfg.distributed.pp_schedule == "gpipe":  # its bubble note replaces the layout's "set vpp" advice
        warnings = [w for w in warnings if "without interleaving has large pipeline bubbles" not in w]
    _strategy_available(cfg.distributed.strategy, cuda)
    _fsdp2(cfg)
    finetune_rules.check_sft_data(cfg, cuda)
    finetune_rules.check_peft(cfg)
    finetune_rules.check_hf_start(cfg)
    warnings += _precision(cfg)
    _fp8(cfg, env)
    _positive("rng.seed", cfg.rng.seed, zero_ok=True)
    warnings += _profiling(cfg, world_size, cuda)
    return layout, warnings, settings


# Strategies whose engine needs CUDA, and why (measured: each fails on a CPU-only machine).
# (fsdp2 runs on PyTorch's own fully_shard over a DeviceMesh of this machine's device: CPU too.)
CUDA_ONLY_STRATEGIES = {
    "megatron_fsdp": (
        "Megatron-FSDP allocates its parameter and gradient buffers on torch.device('cuda', "
        "current_device()) and uses CUDA streams for its all-gathers, so it needs CUDA"
    ),
}


def _strategy_available(strategy: str, cuda: bool) -> None:
    if not cuda and strategy in CUDA_ONLY_STRATEGIES:
        raise fail(
            "distributed.strategy",
            strategy,
            f"cannot run on this machine (no CUDA): {CUDA_ONLY_STRATEGIES[strategy]}",
            "use distributed.strategy=megatron (sharded optimizer state through the distributed "
            "optimizer) or ddp on CPU",
        )


def _fsdp2(cfg: ConfigContainer) -> None:
    """The fsdp2 knobs (only with fsdp2), and what strategy fsdp2 (PyTorch fully_shard,
    bridge/training/strategies.py) does not do yet."""
    d = cfg.distributed
    if d.strategy != "fsdp2":
        for field, default in (("defer_fsdp_grad_sync", True), ("moe_reshard_after_forward", False)):
            if getattr(d, field) != default:
                raise fail(
                    f"distributed.{field}",
                    getattr(d, field),
                    f"an FSDP2 setting, and strategy is {d.strategy!r} (Megatron-Core's DDP reduces "
                    "gradients after the last micro batch, overlapped with the backward)",
                    f"remove distributed.{field}, or set distributed.strategy=fsdp2",
                )
        return
    if d.moe_reshard_after_forward and (cfg.model.expert_model_parallel_size or 1) == 1:
        raise fail(
            "distributed.moe_reshard_after_forward",
            True,
            "applies to the MoE mesh, which exists only with expert parallelism "
            f"(model.expert_model_parallel_size is {cfg.model.expert_model_parallel_size or 1})",
            "remove it, or set model.expert_model_parallel_size > 1",
        )
    if cfg.mixed_precision.precision == "fp16_mixed":
        raise fail(
            "mixed_precision.precision",
            "fp16_mixed",
            "strategy fsdp2 has no fp16 loss scaler (as in Megatron-LM's and AutoModel's FSDP2)",
            "use bf16_mixed, or distributed.strategy=megatron for fp16",
        )


def _train(cfg: ConfigContainer, layout: ParallelLayout) -> None:
    t = cfg.train
    _positive("train.train_iters", t.train_iters)
    _positive("train.global_batch_size", t.global_batch_size)
    _positive("train.micro_batch_size", t.micro_batch_size)
    _positive("train.exit_interval", t.exit_interval, none_ok=True)
    _positive("train.manual_gc_interval", t.manual_gc_interval, zero_ok=True)
    if t.exit_duration_in_mins is not None and not t.exit_duration_in_mins > 0:
        raise fail(
            "train.exit_duration_in_mins", t.exit_duration_in_mins, "must be > 0 or null", "give minutes"
        )
    if t.exit_signal is not None:
        import signal

        text = str(t.exit_signal).strip().upper()
        name = text if text.isdigit() or text.startswith("SIG") else "SIG" + text
        valid = (
            int(text) in {s.value for s in signal.Signals}
            if text.isdigit()
            else name in signal.Signals.__members__
        )
        if (
            not valid
            or name in ("SIGKILL", "SIGSTOP")
            or text in (str(signal.SIGKILL.value), str(signal.SIGSTOP.value))
        ):
            raise fail(
                "train.exit_signal",
                t.exit_signal,
                "must name a signal that can be caught (SIGTERM and SIGINT are always handled)",
                "use a name such as SIGUSR1 or SIGTERM",
            )
    per_step = t.micro_batch_size * layout.dp
    if t.global_batch_size % per_step:
        raise fail(
            "train.global_batch_size",
            t.global_batch_size,
            f"must be a multiple of train.micro_batch_size ({t.micro_batch_size}) x data-parallel size "
            f"({layout.dp}) = {per_step}",
            f"use a multiple of {per_step} (e.g. {max(per_step, t.global_batch_size // per_step * per_step)}), "
            "or change micro_batch_size / the layout",
        )


def _validation(cfg: ConfigContainer) -> None:
    v = cfg.validation
    _positive("validation.eval_interval", v.eval_interval, zero_ok=True, none_ok=True)
    _positive("validation.eval_iters", v.eval_iters, zero_ok=True)
    if v.eval_interval and v.eval_iters == 0:
        raise fail(
            "validation.eval_iters",
            0,
            f"evaluation runs every {v.eval_interval} iterations but on no batches",
            "set validation.eval_iters > 0, or validation.eval_interval=0 to never evaluate",
        )
    if v.eval_interval and v.eval_iters and cfg.dataset.kind != "mock":
        weights = _split_weights(cfg.dataset.split)
        if len(weights) < 2 or weights[1] == 0:
            raise fail(
                "dataset.split",
                cfg.dataset.split,
                "evaluation is on but the split gives no validation data",
                "give the validation part a weight (e.g. 969,30,1), or set validation.eval_interval=0",
            )


def _optimizer(cfg: ConfigContainer) -> list[str]:
    o = cfg.optimizer
    _one_of("optimizer.optimizer", o.optimizer, S.OPTIMIZERS)
    if not o.lr > 0:
        raise fail("optimizer.lr", o.lr, "must be > 0", "give a learning rate such as 3e-4")
    if not 0 <= o.min_lr <= o.lr:
        raise fail("optimizer.min_lr", o.min_lr, f"must be between 0 and optimizer.lr ({o.lr})", "lower it")
    if o.weight_decay < 0:
        raise fail("optimizer.weight_decay", o.weight_decay, "must be >= 0", "use e.g. 0.1")
    for name in ("adam_beta1", "adam_beta2", "sgd_momentum"):
        value = getattr(o, name)
        if not 0 <= value < 1:
            raise fail(f"optimizer.{name}", value, "must be in [0, 1)", "use e.g. 0.9")
    if not o.adam_eps > 0:
        raise fail("optimizer.adam_eps", o.adam_eps, "must be > 0", "use e.g. 1e-5")
    if o.clip_grad < 0:
        raise fail("optimizer.clip_grad", o.clip_grad, "must be >= 0 (0 = no clipping)", "use e.g. 1.0")
    strategy = cfg.distributed.strategy
    if strategy == "megatron_fsdp" and not o.use_distributed_optimizer:
        raise fail(
            "optimizer.use_distributed_optimizer",
            False,
            "strategy megatron_fsdp shards optimizer state through "
            "Megatron-Core's distributed optimizer and needs it",
            "set optimizer.use_distributed_optimizer=true",
        )
    if strategy in ("fsdp2", "ddp") and o.use_distributed_optimizer:
        return [
            f"optimizer.use_distributed_optimizer=true has no effect with strategy {strategy} "
            "(it is Megatron-Core's ZeRO-1 for strategy megatron); set it to false to silence this."
        ]
    return []


def scheduler_iters(cfg: ConfigContainer) -> tuple[int, int]:
    """(warmup, decay) lengths in iterations, as Megatron-Core's OptimizerParamScheduler gets them."""
    s = cfg.scheduler
    decay = s.lr_decay_iters if s.lr_decay_iters is not None else cfg.train.train_iters
    warmup = s.lr_warmup_iters
    if s.lr_decay_style == "constant" and warmup >= decay:
        decay = warmup + 1  # nothing decays; Megatron-Core still asserts warmup < decay
    return warmup, decay


def _scheduler(cfg: ConfigContainer) -> None:
    s = cfg.scheduler
    _one_of("scheduler.lr_decay_style", s.lr_decay_style, S.LR_DECAY_STYLES)
    _positive("scheduler.lr_warmup_iters", s.lr_warmup_iters, zero_ok=True)
    _positive("scheduler.lr_decay_iters", s.lr_decay_iters, none_ok=True)
    decay = s.lr_decay_iters if s.lr_decay_iters is not None else cfg.train.train_iters
    source = (
        "scheduler.lr_decay_iters"
        if s.lr_decay_iters is not None
        else "train.train_iters (lr_decay_iters=null)"
    )
    if s.lr_decay_style != "constant" and s.lr_warmup_iters >= decay:
        raise fail(
            "scheduler.lr_warmup_iters",
            s.lr_warmup_iters,
            f"warmup must be shorter than the decay: {source} = {decay} "
            "(Megatron-Core's scheduler needs warmup < decay)",
            f"set scheduler.lr_warmup_iters < {decay} (e.g. scheduler.lr_warmup_iters=0 for short runs)",
        )
    if not 0 <= s.lr_warmup_init <= cfg.optimizer.lr:
        raise fail(
            "scheduler.lr_warmup_init",
            s.lr_warmup_init,
            f"must be between 0 and optimizer.lr ({cfg.optimizer.lr})",
            "use 0.0",
        )


def _split_weights(split: str) -> list[float]:
    try:
        weights = [float(part) for part in str(split).replace("/", ",").split(",") if part.strip()]
    except ValueError:
        weights = []
    if not 1 <= len(weights) <= 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise fail(
            "dataset.split",
            split,
            "must be 1 to 3 comma-separated non-negative weights (train,valid,test) with a positive sum",
            "use e.g. '969,30,1' (quote it on the command line: 'dataset.split=\"969,30,1\"')",
        )
    return weights


def parse_split(split: str) -> tuple[float, float, float]:
    """dataset.split ("969,30,1") -> train, valid, test ratios summing to 1 (raises ConfigError)."""
    weights = _split_weights(split)
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    return (weights[0] / total, weights[1] / total, weights[2] / total)


def blend_paths(data_paths: list[str]) -> tuple[list[str], list[float] | None]:
    """Megatron's blend list -> (paths, weights or None): ["p1", "p2"] or ["w1", "p1", "w2", "p2"]."""

    def number(text: str) -> float | None:
        try:
            return float(text)
        except (TypeError, ValueError):
            return None

    values = [str(p) for p in data_paths]
    if len(values) % 2 == 0 and values and all(number(v) is not None for v in values[0::2]):
        weights = [number(v) for v in values[0::2]]
        if any(w <= 0 for w in weights):
            raise fail("dataset.data_paths", data_paths, "blend weights must be > 0", "give positive weights")
        return values[1::2], weights
    if any(number(v) is not None for v in values):
        raise fail(
            "dataset.data_paths",
            data_paths,
            "mixes weights and paths: give either paths only, or a weight before every path",
            "write [p1, p2] or ['0.3', p1, '0.7', p2]",
        )
    return values, None


def _dataset(cfg: ConfigContainer) -> None:
    d = cfg.dataset
    _one_of("dataset.kind", d.kind, S.DATASET_KINDS)
    _positive("dataset.seq_length", d.seq_length)
    _split_weights(d.split)
    _positive("dataset.num_workers", d.num_workers, zero_ok=True)
    _positive("dataset.packed_sequence_size", d.packed_sequence_size, zero_ok=True)
    if d.kind == "mock" and d.data_paths:
        raise fail(
            "dataset.data_paths",
            d.data_paths,
            "dataset.kind is mock, which generates random tokens and reads no files",
            "set dataset.kind=indexed (Megatron .bin/.idx) or jsonl, or drop the paths (~dataset.data_paths)",
        )
    if d.kind != "mock":
        if not d.data_paths:
            raise fail(
                "dataset.data_paths",
                d.data_paths,
                f"dataset.kind={d.kind} needs data files",
                "give dataset.data_paths=[prefix_or_file, ...], or use dataset.kind=mock",
            )
        paths, _ = blend_paths(d.data_paths)
        for path in paths:
            needed = [path + ".bin", path + ".idx"] if d.kind == "indexed" else [path]
            missing = [p for p in needed if not os.path.isfile(p)]
            if missing:
                what = (
                    "an indexed dataset prefix (path without .bin/.idx)"
                    if d.kind == "indexed"
                    else "a JSONL file"
                    if d.kind == "jsonl"
                    else "a .jsonl / .json / .parquet file"
                )
                raise fail(
                    "dataset.data_paths",
                    path,
                    f"{', '.join(missing)} not found; each entry must be {what}",
                    "fix the path (scripts/data/preprocess_data.py writes .bin/.idx from JSONL)",
                )


def _tokenizer(cfg: ConfigContainer) -> None:
    t = cfg.tokenizer
    _one_of("tokenizer.tokenizer_type", t.tokenizer_type, S.TOKENIZER_TYPES)
    if t.tokenizer_type == "HuggingFaceTokenizer":
        if not t.tokenizer_model:
            raise fail(
                "tokenizer.tokenizer_model",
                t.tokenizer_model,
                "HuggingFaceTokenizer needs a tokenizer",
                "give a local tokenizer directory (or hub name if the cache has it)",
            )
        if t.vocab_size is not None:
            raise fail(
                "tokenizer.vocab_size",
                t.vocab_size,
                "is only for NullTokenizer (a HF tokenizer knows its size)",
                "remove it (tokenizer.vocab_size=null)",
            )
        return
    if cfg.model.vocab_size is None:
        raise fail(
            "model.vocab_size",
            None,
            "the NullTokenizer needs a vocabulary size",
            "set model.vocab_size (or tokenizer.vocab_size; each follows the other)",
        )
    _positive("tokenizer.vocab_size", t.vocab_size)
    if t.vocab_size + 1 > cfg.model.vocab_size:
        raise fail(
            "tokenizer.vocab_size",
            t.vocab_size,
            f"the NullTokenizer emits ids up to vocab_size (its EOD id), which must fit model.vocab_size = "
            f"{cfg.model.vocab_size}",
            f"use at most {cfg.model.vocab_size - 1}, or null to follow the model",
        )


def _checkpoint(cfg: ConfigContainer) -> None:
    c = cfg.checkpoint
    _one_of("checkpoint.ckpt_format", c.ckpt_format, S.CKPT_FORMATS)
    if c.async_save:
        raise fail(
            "checkpoint.async_save",
            True,
            "asynchronous saves are not implemented (every save is synchronous)",
            "set checkpoint.async_save=false",
        )
    _positive("checkpoint.save_interval", c.save_interval, zero_ok=True, none_ok=True)
    if c.save_interval and not c.save:
        raise fail(
            "checkpoint.save_interval",
            c.save_interval,
            "periodic saves need a directory, but checkpoint.save is not set",
            "set checkpoint.save=/path/to/dir, or checkpoint.save_interval=0 to not save",
        )
    if c.save_consolidated:
        if not c.save:
            raise fail(
                "checkpoint.save_consolidated",
                True,
                "writes a Hugging Face copy inside each saved checkpoint, but checkpoint.save is not set",
                "set checkpoint.save=/path/to/dir, or checkpoint.save_consolidated=false",
            )
        from bridge.config.consolidated import consolidated_source

        consolidated_source(cfg)  # a ConfigError when the copy's architecture is unknown
    elif c.hf_architecture:  # the architecture the run's checkpoints export as (convert_checkpoint.py)
        from bridge.config.consolidated import consolidated_source

        consolidated_source(cfg)
    if c.save and os.path.exists(c.save) and not os.path.isdir(c.save):
        raise fail("checkpoint.save", c.save, "exists and is not a directory", "give a directory path")
    if c.load and not os.path.isdir(c.load):
        raise fail(
            "checkpoint.load",
            c.load,
            "directory does not exist",
            "give an existing checkpoint directory, or checkpoint.load=null to start from scratch",
        )
    if c.pretrained_checkpoint and not os.path.exists(c.pretrained_checkpoint):
        raise fail(
            "checkpoint.pretrained_checkpoint",
            c.pretrained_checkpoint,
            "does not exist",
            "give an existing checkpoint (e.g. one written by scripts/conversion/convert_checkpoint.py)",
        )
    if c.ckpt_step is not None:
        _positive("checkpoint.ckpt_step", c.ckpt_step, zero_ok=True)
        if not c.load:
            raise fail(
                "checkpoint.ckpt_step",
                c.ckpt_step,
                "picks an iteration of checkpoint.load, which is not set",
                "set checkpoint.load to the checkpoint root",
            )
        name = os.path.basename(os.path.normpath(c.load))
        if name.startswith("iter_") and name[5:].isdigit():
            raise fail(
                "checkpoint.ckpt_step",
                c.ckpt_step,
                f"checkpoint.load already names one checkpoint ({name})",
                "set checkpoint.load to the root that holds the iter_* folders, or drop checkpoint.ckpt_step",
            )
        folder = os.path.join(c.load, f"iter_{c.ckpt_step:07d}")
        if not os.path.isdir(folder):
            have = sorted(int(n[5:]) for n in os.listdir(c.load) if n.startswith("iter_") and n[5:].isdigit())
            raise fail(
                "checkpoint.ckpt_step",
                c.ckpt_step,
                f"{folder} does not exist (checkpoints in {c.load}: {', '.join(map(str, have)) or 'none'})",
                "pick one of those iterations",
            )
    if c.most_recent_k != -1 and c.most_recent_k < 1:
        raise fail(
            "checkpoint.most_recent_k", c.most_recent_k, "must be -1 (keep all) or >= 1", "use -1 or a count"
        )


def _logger(cfg: ConfigContainer) -> list[str]:
    import importlib.util

    lg = cfg.logger
    _positive("logger.log_interval", lg.log_interval)
    if not lg.wandb_project:
        for name in ("wandb_entity", "wandb_exp_name"):
            if getattr(lg, name):
                raise fail(
                    f"logger.{name}",
                    getattr(lg, name),
                    "W&B logging is on only when logger.wandb_project is set",
                    "set logger.wandb_project too, or remove it",
                )
    elif importlib.util.find_spec("wandb") is None:
        raise fail(
            "logger.wandb_project",
            lg.wandb_project,
            "W&B logging needs the wandb package, which is not installed",
            "pip install wandb, or unset logger.wandb_project",
        )
    if lg.tensorboard_dir and importlib.util.find_spec("tensorboard") is None:
        # Recipes set a tensorboard_dir by default; a missing optional package must not stop a run.
        return [
            f"logger.tensorboard_dir={lg.tensorboard_dir} is set but the tensorboard package is not "
            "installed: TensorBoard logging is off (pip install tensorboard to enable it)."
        ]
    return []


def _distributed(cfg: ConfigContainer, layout: ParallelLayout, running: frozenset[str]) -> list[str]:
    d, m = cfg.distributed, cfg.model
    warnings: list[str] = []
    _positive("distributed.timeout_minutes", d.timeout_minutes)
    if d.dp_size is not None and d.dp_size != layout.dp:
        raise fail(
            "distributed.dp_size",
            d.dp_size,
            f"the data-parallel size is derived as world / (tp * pp * cp) = {layout.world_size} / "
            f"({layout.tp} * {layout.pp} * {layout.cp}) = {layout.dp}",
            "leave distributed.dp_size unset (null), or change the world size or the model-parallel sizes",
        )
    warnings += _pipeline(cfg, layout, running)
    if d.activation_checkpointing and m.recompute_granularity is not None:
        raise fail(
            "distributed.activation_checkpointing",
            True,
            f"model.recompute_granularity = {m.recompute_granularity!r} already chooses what to recompute",
            "set one of them: distributed.activation_checkpointing (full recompute) or model.recompute_*",
        )
    megatron_ddp = d.strategy in ("megatron", "megatron_fsdp")
    if d.strategy == "megatron" and d.overlap_param_gather and not cfg.optimizer.use_distributed_optimizer:
        raise fail(
            "distributed.overlap_param_gather",
            True,
            "overlapping the parameter all-gather needs the "
            "distributed optimizer (there is no gather without it)",
            "set distributed.overlap_param_gather=false, or optimizer.use_distributed_optimizer=true",
        )
    if not megatron_ddp:
        knobs = [
            k
            for k in (
                "overlap_grad_reduce",
                "overlap_param_gather",
                "grad_reduce_in_fp32",
                "average_in_collective",
                "check_for_nan_in_grad",
            )
            if getattr(d, k)
        ]
        if knobs:
            warnings.append(
                f"distributed.{', distributed.'.join(knobs)} are Megatron-Core DDP settings that strategy "
                f"{d.strategy} does not use."
            )
    return warnings


def _pipeline(cfg: ConfigContainer, layout: ParallelLayout, running: frozenset[str]) -> list[str]:
    """distributed.pp_schedule and distributed.scale_grads_in_schedule against the layout and the batch
    (docs/parallelism.md, "Pipeline schedules"). Normalises the schedule's spelling (interleaved1f1b)."""
    d, m = cfg.distributed, cfg.model
    given = d.pp_schedule
    if given is not None:
        name = schedules.normalize(given)
        if name not in schedules.NAMES:
            raise fail(
                "distributed.pp_schedule",
                given,
                f"must be one of {', '.join(schedules.NAMES)}",
                "pick one of those",
            )
        d.pp_schedule = name
    if not isinstance(d.scale_grads_in_schedule, bool):
        raise fail(
            "distributed.scale_grads_in_schedule",
            d.scale_grads_in_schedule,
            "must be true or false",
            "use false",
        )
    if layout.pp == 1:
        out = []
        if given is not None:
            out.append(f"distributed.pp_schedule={d.pp_schedule} has no effect with pipeline size 1.")
        if d.scale_grads_in_schedule:
            out.append("distributed.scale_grads_in_schedule=true has no effect with pipeline size 1.")
        return out
    vpp = m.virtual_pipeline_model_parallel_size
    name = schedules.effective(d.pp_schedule, vpp)
    schedule = schedules.SCHEDULES[name]
    if name == "interleaved_1f1b" and vpp is None:
        raise fail(
            "distributed.pp_schedule",
            name,
            "interleaving needs virtual pipeline stages",
            "set model.virtual_pipeline_model_parallel_size (>= 2), or use pp_schedule 1f1b",
        )
    if name == "1f1b" and vpp is not None:
        raise fail(
            "distributed.pp_schedule",
            name,
            f"model.virtual_pipeline_model_parallel_size = {vpp} makes Megatron-Core run the interleaved schedule",
            "use pp_schedule interleaved_1f1b (or null), or unset model.virtual_pipeline_model_parallel_size",
        )
    if schedule.engine == "megatron":
        if d.scale_grads_in_schedule:
            return [
                f"distributed.scale_grads_in_schedule=true has no effect with pp_schedule {name}: Megatron-Core's "
                "schedules divide each micro batch's loss by the number of micro batches themselves."
            ]
        return []
    if name == "v_schedule":
        raise fail("distributed.pp_schedule", name, schedules.V_SCHEDULE_REFUSAL, schedules.V_SCHEDULE_FIX)
    several = vpp is not None and vpp > 1
    if schedule.multi_stage and not several:
        raise fail(
            "distributed.pp_schedule",
            name,
            f"{schedule.torch_class} is a multi-stage schedule: it needs several virtual stages per pipeline "
            f"rank, and model.virtual_pipeline_model_parallel_size = {vpp}",
            "set model.virtual_pipeline_model_parallel_size >= 2 (num_layers % (pp*vpp) == 0), or use gpipe",
        )
    if not schedule.multi_stage and several:
        raise fail(
            "distributed.pp_schedule",
            name,
            f"{schedule.torch_class} runs one stage per pipeline rank, and "
            f"model.virtual_pipeline_model_parallel_size = {vpp} builds {vpp}",
            "unset model.virtual_pipeline_model_parallel_size, or use looped_bfs, dfs or zero_bubble",
        )
    t = cfg.train
    micro = t.global_batch_size // (t.micro_batch_size * layout.dp)
    rule = schedules.microbatch_rule(name, layout.pp, micro)
    if rule:
        raise fail(
            "train.global_batch_size",
            t.global_batch_size,
            f"pp_schedule {name} with {micro} micro batches per step (global_batch_size / (micro_batch_size "
            f"{t.micro_batch_size} x dp {layout.dp})): {rule}",
            f"use a multiple of pp={layout.pp} micro batches per step, or another schedule",
        )
    if name == "zero_bubble" and d.strategy == "fsdp2":
        raise fail(
            "distributed.strategy",
            "fsdp2",
            "pp_schedule zero_bubble computes the weight gradients in a separate pass (torch.autograd.grad), "
            "outside FSDP2's post-backward reduce-scatter; measured on 2 CPU ranks, the step never finishes "
            "(gloo timed out after 60 s)",
            "use distributed.strategy=megatron with zero_bubble, or gpipe, looped_bfs or dfs with fsdp2",
        )
    if name == "zero_bubble":
        if d.activation_checkpointing or m.recompute_granularity is not None:
            field = (
                "distributed.activation_checkpointing"
                if d.activation_checkpointing
                else "model.recompute_granularity"
            )
            raise fail(
                field,
                True if d.activation_checkpointing else m.recompute_granularity,
                "pp_schedule zero_bubble computes input gradients with torch.autograd.grad, and Megatron-Core's "
                'activation recompute (CheckpointFunction) refuses it: "Checkpointing is not compatible '
                'with .grad(), please use .backward() if possible"',
                "turn activation recompute off, or use gpipe, looped_bfs or dfs (full backward)",
            )
        if "gradient_accumulation_fusion" in running:  # asked for, and this machine runs it
            raise fail(
                "model.gradient_accumulation_fusion",
                True,
                "pp_schedule zero_bubble's weight pass runs the backward of Megatron-Core's linear autograd "
                "function again (the input pass already ran it once), and with fusion that backward adds the "
                "weight gradient into main_grad itself: every weight gradient would be added twice",
                "set model.gradient_accumulation_fusion=false, or use gpipe, looped_bfs or dfs",
            )
    if getattr(m, "calculate_per_token_loss", False) and d.scale_grads_in_schedule:
        raise fail(
            "distributed.scale_grads_in_schedule",
            True,
            "with model.calculate_per_token_loss the gradients are divided by the step's token count, and the "
            "schedule would divide them by the number of micro batches again",
            "set distributed.scale_grads_in_schedule=false",
        )
    if name == "gpipe" and layout.pp > 2:
        bubble = schedules.bubble_fraction("gpipe", layout.pp, micro)
        return [
            f"pp_schedule gpipe on pp={layout.pp}: {100 * bubble:.1f}% of each step is pipeline bubble "
            f"((p-1)/(m+p-1) with m={micro}) and every micro batch's activations are held until the backward; "
            "more micro batches per step shrink the bubble, looped_bfs / dfs / zero_bubble with "
            "model.virtual_pipeline_model_parallel_size shrink it further."
        ]
    return []


def _precision(cfg: ConfigContainer) -> list[str]:
    p, m = cfg.mixed_precision, cfg.model
    _one_of("mixed_precision.precision", p.precision, tuple(PRECISION_DTYPES))
    for flag, wanted in (("bf16", "bf16_mixed"), ("fp16", "fp16_mixed")):
        if getattr(m, flag) and p.precision != wanted:
            raise fail(
                f"model.{flag}",
                True,
                f"mixed_precision.precision = {p.precision!r} is the one source of the training dtype",
                f"set mixed_precision.precision={wanted}, or model.{flag}=false",
            )
    if p.loss_scale is not None and p.loss_scale <= 0:
        raise fail("mixed_precision.loss_scale", p.loss_scale, "must be > 0 or null (dynamic)", "use null")
    if p.initial_loss_scale <= 0 or p.min_loss_scale <= 0:
        raise fail(
            "mixed_precision.initial_loss_scale",
            p.initial_loss_scale,
            "loss scales must be > 0",
            "use 2**32 and 1.0",
        )
    _positive("mixed_precision.loss_scale_window", p.loss_scale_window)
    _positive("mixed_precision.hysteresis", p.hysteresis)
    if p.loss_scale is not None and p.precision != "fp16_mixed":
        return [
            f"mixed_precision.loss_scale={p.loss_scale} has no effect with precision {p.precision} (fp16 only)."
        ]
    return []


def _fp8(cfg: ConfigContainer, env: Environment) -> None:
    """The fp8 precisions run on Transformer Engine on a GPU that has the recipe's tensor cores. (On CPU
    every precision trains in fp32: the plan warns.)"""
    precision = cfg.mixed_precision.precision
    if precision not in FP8_PRECISIONS or not env.cuda:
        if cfg.model.fp8 is not None and precision not in FP8_PRECISIONS:
            raise fail(
                "model.fp8",
                cfg.model.fp8,
                f"mixed_precision.precision = {precision!r} is the one source of the training dtype",
                "choose an fp8 precision (bf16_with_fp8_delayed_scaling_mixed, "
                "bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed) and leave model.fp8 null",
            )
        return
    if not env.has("transformer_engine"):
        raise fail(
            "mixed_precision.precision",
            precision,
            "fp8 training runs on Transformer Engine, which is not installed",
            "pip install --no-build-isolation 'transformer-engine[pytorch]', or use precision bf16_mixed",
        )
    needed, _ = FP8_PRECISIONS[precision]
    have = env.compute_capability
    if have is not None and have < needed:
        raise fail(
            "mixed_precision.precision",
            precision,
            f"needs a GPU of compute capability >= {needed[0]}.{needed[1]}; {env.device_name} has "
            f"{have[0]}.{have[1]}",
            "use bf16_mixed on this GPU"
            + (", or bf16_with_fp8_current_scaling_mixed on Ada / Hopper" if needed >= (10, 0) else ""),
        )


def _profiling(cfg: ConfigContainer, world_size: int, cuda: bool) -> list[str]:
    """The profiling section (bridge/config/profiling.py, bridge/training/profiling.py). Without CUDA the
    CUDA-only tools are warnings, not errors, so a GPU recipe still dry-runs on a laptop."""
    p = cfg.profiling
    if p.use_pytorch_profiler and p.use_nsys_profiler:
        raise fail(
            "profiling.use_nsys_profiler",
            True,
            "profiling.use_pytorch_profiler is on too: one profiler at a time (as Megatron-Bridge; the "
            "PyTorch profiler's own CUDA tracing would sit inside the nsys capture)",
            "set profiling.use_pytorch_profiler=false or profiling.use_nsys_profiler=false",
        )
    windowed = p.use_pytorch_profiler or p.use_nsys_profiler or p.record_memory_history
    warnings: list[str] = []
    if not windowed:
        for name in ("record_shapes", "output_dir"):
            if getattr(p, name):
                warnings.append(
                    f"profiling.{name}={getattr(p, name)} has no effect: no profiler is on "
                    "(profiling.use_pytorch_profiler / use_nsys_profiler / record_memory_history)."
                )
        return warnings
    if p.profile_step_start < 1:
        raise fail(
            "profiling.profile_step_start",
            p.profile_step_start,
            "must be >= 1 (iterations are numbered from 1, as in the log line)",
            "give the first iteration to profile, e.g. 10",
        )
    if p.profile_step_end <= p.profile_step_start:
        raise fail(
            "profiling.profile_step_end",
            p.profile_step_end,
            f"must be > profiling.profile_step_start ({p.profile_step_start}): the window "
            "[profile_step_start, profile_step_end) would hold no iteration",
            f"set profiling.profile_step_end to at least {p.profile_step_start + 1}",
        )
    if not p.profile_ranks:
        raise fail(
            "profiling.profile_ranks", p.profile_ranks, "lists no rank, so nothing is profiled", "use [0]"
        )
    outside = [r for r in p.profile_ranks if not 0 <= r < world_size]
    if outside:
        raise fail(
            "profiling.profile_ranks",
            p.profile_ranks,
            f"rank {outside[0]} is outside [0, {world_size}) (world size {world_size})",
            f"list ranks between 0 and {world_size - 1}",
        )
    if (
        p.use_pytorch_profiler
        and p.output_dir
        and os.path.exists(p.output_dir)
        and not os.path.isdir(p.output_dir)
    ):
        raise fail(
            "profiling.output_dir", p.output_dir, "exists and is not a directory", "give a directory path"
        )
    if not cuda:
        if p.record_memory_history:
            warnings.append(
                "profiling.record_memory_history=true is inactive on this machine: it records the CUDA "
                "caching allocator's history (torch.cuda.memory._record_memory_history), which needs CUDA; "
                "no snapshot is written."
            )
        if p.use_nsys_profiler:
            warnings.append(
                "profiling.use_nsys_profiler=true is inactive on this machine: the nsys capture range "
                "(cudaProfilerStart/Stop) and the NVTX ranges need CUDA; nothing is profiled by it."
            )
    if p.profile_step_start > cfg.train.train_iters:
        warnings.append(
            f"profiling.profile_step_start={p.profile_step_start} is after the last iteration "
            f"(train.train_iters={cfg.train.train_iters}): nothing is profiled."
        )
    return warnings
