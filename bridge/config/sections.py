"""The sections of a ConfigContainer: plain dataclasses of YAML-friendly values.

Field names follow Megatron-Bridge (and Megatron-LM's argument names) so users can carry their
overrides over. Defaults are the published pretraining-recipe values where one exists. Every type here
is one OmegaConf structured configs accept (int, float, bool, str, Optional/list/dict of those, Any),
because overrides and YAML go through OmegaConf. Rules that involve several fields or sections live in
bridge/config/validation.py; nothing here imports torch or megatron.core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.parallel.schedules import NAMES as _PIPELINE_SCHEDULES

# the peft section is peft's own settings
from bridge.peft.settings import MLA_PEFT_TARGETS, PEFT_SCHEMES, PEFT_TARGETS, PeftConfig  # noqa: F401

# Accepted names, shared by validation and the docs.
OPTIMIZERS = ("adam", "sgd", "muon")
# optimizer.optimizer=muon: Megatron-Core's option values (its OptimizerConfig, the emerging_optimizers
# package's Newton-Schulz coefficient sets; "custom" is left out: its coefficients have no option)
MUON_SCALE_MODES = ("spectral", "unit_rms_norm", "shape_scaling")
MUON_FP32_MATMUL_PRECS = ("medium", "high", "highest")
MUON_COEFFICIENT_TYPES = ("simple", "quintic", "polar_express", "cans", "aol", "deepseekv4")
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")
MUON_SCALAR_OPTIMIZERS = ("adam",)
LR_DECAY_STYLES = ("cosine", "linear", "constant")
DATASET_KINDS = ("mock", "indexed", "jsonl", "sft", "chat", "preference", "vlm", "mock_vlm")
# generated data: no files (mock: random token ids; mock_vlm: synthetic image-text conversations)
GENERATED_DATA_KINDS = ("mock", "mock_vlm")
# dpo.loss_type: the DPO paper's sigmoid loss, IPO's squared loss (bridge.training.preference)
DPO_LOSS_TYPES = ("sigmoid", "ipo")
# dpo.reference: auto = the base model with the adapters switched off under PEFT, else a frozen copy
DPO_REFERENCES = ("auto", "adapters_off", "frozen_copy")
# sft / chat: a sample longer than seq_length + 1 tokens is cut at its end (right) or left out (drop)
TRUNCATIONS = ("right", "drop")
TOKENIZER_TYPES = ("NullTokenizer", "HuggingFaceTokenizer")
CKPT_FORMATS = ("torch_dist",)
# distributed.pp_schedule: Megatron-Core's 1f1b / interleaved_1f1b and torch.distributed.pipelining's
# gpipe, looped_bfs, dfs, zero_bubble, v_schedule (bridge.parallel.schedules; interleaved1f1b is an alias)
PP_SCHEDULES = _PIPELINE_SCHEDULES
# mixed_precision.precision -> the dtype it trains in (with CUDA; CPU runs train in fp32).
PRECISION_DTYPES = {
    "bf16_mixed": "bf16",
    "fp16_mixed": "fp16",
    "fp32": "fp32",
    "bf16_with_fp8_delayed_scaling_mixed": "bf16",
    "bf16_with_fp8_current_scaling_mixed": "bf16",
    "bf16_with_mxfp8_mixed": "bf16",
}
PRECISIONS = tuple(PRECISION_DTYPES)
# The fp8 precisions (Megatron-Bridge's names and values): the TransformerConfig fields they set, and the
# compute capability Transformer Engine's recipe needs (8.9: Ada / Hopper; 10.0: Blackwell's MXFP8).
# Weights and the distributed optimizer's gathers stay bf16 (Megatron-Bridge also gathers fp8 parameters).
FP8_PRECISIONS = {
    "bf16_with_fp8_delayed_scaling_mixed": (
        (8, 9),
        dict(fp8="hybrid", fp8_recipe="delayed", fp8_margin=0, fp8_amax_history_len=1024,
             fp8_amax_compute_algo="max"),
    ),
    "bf16_with_fp8_current_scaling_mixed": (
        (8, 9),
        dict(fp8="hybrid", fp8_recipe="tensorwise", first_last_layers_bf16=True,
             num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1),
    ),
    "bf16_with_mxfp8_mixed": ((10, 0), dict(fp8="e4m3", fp8_recipe="mxfp8")),
}  # fmt: skip


@dataclass
class TrainingConfig:
    train_iters: int = 1_168_251
    global_batch_size: int = 512
    micro_batch_size: int = 1
    exit_interval: int | None = None  # stop (after saving) when iteration % exit_interval == 0
    manual_gc: bool = False  # disable Python's automatic GC and collect every manual_gc_interval steps
    manual_gc_interval: int = 0  # 0 = only at the start of training
    manual_gc_eval: bool = True  # also collect around evaluation when manual_gc is on
    check_memory: bool = True  # refuse to build a model whose memory estimate exceeds a rank's memory
    # SIGTERM and SIGINT always finish the step, save and exit 0; exit_signal adds one more (a name such
    # as "SIGUSR1", for Slurm's --signal=USR1@90, or a number)
    exit_signal: str = "SIGTERM"
    exit_duration_in_mins: float | None = None  # save and exit 0 after this many minutes of training


@dataclass
class ValidationConfig:
    eval_interval: int | None = 2000  # None or 0 = never evaluate
    eval_iters: int = 32
    # lm-eval benchmarks during training (docs/evaluation.md): task names, each `name` or `name:limit`
    # (documents of that task); run on the training ranks at the training layout, scores logged beside
    # the validation loss. Empty: none.
    lm_eval_tasks: list[str] = field(default_factory=list)
    lm_eval_interval: int | None = None  # None: validation.eval_interval
    lm_eval_limit: int | None = None  # documents per task without a `:limit` (None: all)
    lm_eval_include_path: str | None = None  # a folder of extra task YAML files
    lm_eval_batch_size: int = 8


@dataclass
class OptimizerConfig:
    # adam (AdamW-style decoupled weight decay, as Megatron-Core) | sgd | muon (Megatron-Core's Muon for
    # the 2-D hidden weights, Adam for embeddings, output layer, norms and biases; docs/optimizers.md)
    optimizer: str = "adam"
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-5
    sgd_momentum: float = 0.9
    clip_grad: float = 1.0  # 0 = no clipping
    # Megatron-Core's distributed optimizer (ZeRO-1 over DP). Used by strategies megatron and
    # megatron_fsdp (which requires it); fsdp2 and ddp shard/replicate optimizer state themselves.
    use_distributed_optimizer: bool = True
    # Muon (optimizer=muon): Megatron-Core 0.19's OptimizerConfig names and defaults. The update of a
    # 2-D weight W with momentum buffer B: B <- m B + (1 - m) G (EMA, muon_momentum); U = G + m (B - G)
    # with nesterov else B; W <- W (1 - lr wd) - lr * scale(shape) * muon_extra_scale_factor * NS(U),
    # NS the Newton-Schulz orthogonalization (muon_num_ns_steps iterations of muon_coefficient_type's
    # coefficients, in bf16 with muon_fp32_matmul_prec=medium, else fp32).
    muon_momentum: float = 0.95
    muon_split_qkv: bool = True  # orthogonalize the fused QKV weight's Q, K and V blocks separately
    muon_nesterov: bool = False
    muon_scale_mode: str = "spectral"  # spectral: sqrt(max(out, in)) | unit_rms_norm: sqrt(out/in) | shape_scaling: sqrt(max(1, out/in))
    muon_fp32_matmul_prec: str = "medium"  # medium: Newton-Schulz in bf16 | high | highest: fp32
    muon_coefficient_type: str = "quintic"  # MUON_COEFFICIENT_TYPES
    muon_num_ns_steps: int = 5
    # tensor-parallel weights: blockwise (each rank's shard alone) | duplicated (gather, whole matrix) |
    # distributed (Newton-Schulz over the shards with all-reduces)
    muon_tp_mode: str = "blockwise"
    muon_extra_scale_factor: float = 1.0  # e.g. 0.2 with spectral: the update RMS of AdamW (Moonlight)
    muon_scalar_optimizer: str = "adam"  # the optimizer of the parameters Muon does not take


@dataclass
class SchedulerConfig:
    lr_decay_style: str = "cosine"  # cosine | linear | constant
    lr_warmup_iters: int = 2000
    lr_warmup_init: float = 0.0  # lr at iteration 0 of the warmup
    lr_decay_iters: int | None = None  # None = train.train_iters
    # on resume, take the lr settings from this config rather than from the checkpoint
    override_opt_param_scheduler: bool = True
    # Megatron-Core's OptimizerParamScheduler sets the weight decay every step (get_wd): from
    # start_weight_decay to end_weight_decay over the run, constant | linear | cosine. None: both follow
    # optimizer.weight_decay (constant). Megatron-Bridge's recipes use 0.033 / 0.033 / constant.
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    weight_decay_incr_style: str = "constant"


@dataclass
class DatasetConfig:
    # mock | indexed (Megatron .bin/.idx) | jsonl (text) | sft ({"input", "output"} records) |
    # chat ({"messages": [...]} records rendered with the tokenizer's chat template) |
    # preference ({"prompt", "chosen", "rejected"} records: DPO, the `dpo` section) | vlm (image-text
    # conversations) | mock_vlm (synthetic image-text conversations through the model's processor:
    # bridge.training.data.vlm_mock)
    kind: str = "mock"
    # Megatron blend as a list: ["p1", "p2"] or with weights ["0.3", "p1", "0.7", "p2"].
    # indexed: path prefixes (without .bin/.idx); jsonl: files; sft / chat: .jsonl / .json / .parquet files.
    data_paths: list[str] = field(default_factory=list)
    split: str = "969,30,1"  # train,valid,test weights
    # One source of truth: None follows model.seq_length (filled in by bridge.config.resolve.resolve_config);
    # an explicit value that differs from model.seq_length is a ConfigError.
    seq_length: int | None = None
    seed: int = 1234
    # sft / chat: rows of this many tokens holding several samples each (0 = one sample per row,
    # padded to seq_length); needs train.micro_batch_size=1
    packed_sequence_size: int = 0
    # packing: every sample's segment padded to a multiple of this (None: 2*cp with context
    # parallelism, which splits each segment into 2*cp chunks, else 1); Megatron-Bridge's pad_seq_to_mult
    pad_seq_to_mult: int | None = None
    answer_only_loss: bool = True  # sft / chat: loss on the output / assistant tokens only
    truncation: str = "right"  # sft / chat: right | drop (TRUNCATIONS)
    # vlm: a malformed conversation (not JSON, a missing or unreadable image, image tokens past
    # model.seq_length, ...) is skipped and counted (the count logged when the data is built) instead of
    # being one ConfigError; at least one conversation must remain in each split read
    skip_malformed_samples: bool = False
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    num_workers: int = 8
    cache_dir: str | None = None  # where Megatron-Core caches dataset indices


@dataclass
class TokenizerConfig:
    tokenizer_type: str = "NullTokenizer"  # NullTokenizer | HuggingFaceTokenizer
    tokenizer_model: str | None = None  # HuggingFaceTokenizer: local path or hub name
    # NullTokenizer only, Megatron-Core's meaning: ids 0..vocab_size-1 plus an EOD id equal to vocab_size.
    # None follows the model (model.vocab_size - 1, so every id fits the embedding); resolved by
    # bridge.config.resolve.resolve_config.
    vocab_size: int | None = None


@dataclass
class CheckpointConfig:
    save: str | None = None  # directory to save to
    load: str | None = None  # directory to resume from (must exist)
    save_interval: int | None = None  # None or 0 = no periodic saves (a final save still happens if `save`)
    ckpt_format: str = "torch_dist"
    pretrained_checkpoint: str | None = None  # weights only (no optimizer / iteration), e.g. an HF import
    save_optim: bool = True
    save_rng: bool = True
    load_optim: bool = True
    load_rng: bool = True
    async_save: bool = False
    # each tensor the data-parallel (x context-parallel) replicas share is written by one of them, the
    # writes spread evenly over the replicas (Megatron-Core's FullyParallelSaveStrategyWrapper), instead
    # of all by the first replica; the files are the same torch_dist checkpoint
    fully_parallel_save: bool = True
    # the distributed optimizer's state saved in Megatron-Core's `fully_reshardable` format (gathered per
    # parameter on data-parallel rank 0, as Megatron-Bridge's option of this name): it resumes under
    # another TP / PP / DP size. False: `dp_reshardable` (each rank's buffers, fully parallel; resumes
    # under another DP size only)
    dist_ckpt_optim_fully_reshardable: bool = False
    most_recent_k: int = -1  # keep the k newest complete checkpoints; -1 = keep all
    ckpt_step: int | None = None  # load this iteration of checkpoint.load (a root) instead of the tracker's
    # a damaged latest checkpoint (it fails its manifest) is reported and the previous complete one loaded
    fallback_to_previous: bool = True
    # also write each checkpoint's weights as a Hugging Face folder (config.json + safetensors, the
    # family's HF names) in <iter_N>/consolidated, loadable by transformers (AutoModel's
    # `save_consolidated: true` with `model_save_format: safetensors`)
    save_consolidated: bool = False
    # the Hugging Face architecture (e.g. LlamaForCausalLM) of the consolidated copies and of the
    # exports (convert_checkpoint.py export) of a run's checkpoints: config.json generated from the
    # run's model; unset, a run started from an HF folder or an imported checkpoint uses its source's
    hf_architecture: str | None = None
    # a run whose checkpoint.save already holds checkpoints of another configuration (and no
    # checkpoint.load) replaces them as it saves the same iterations, each through a staging folder and
    # an atomic rename; False: such a run is refused before training (bridge/config/checks/checkpoint.py)
    overwrite: bool = False


@dataclass
class LoggerConfig:
    log_interval: int = 10
    tensorboard_dir: str | None = None
    wandb_project: str | None = None  # W&B is on when this is set
    wandb_entity: str | None = None
    wandb_exp_name: str | None = None
    log_throughput: bool = True
    log_memory: bool = False
    # the run's first lines are the layout, the memory check and what was loaded; true (run_recipe.py -v)
    # adds the detail: the CPU backend's patches, GPU settings inactive here, CPU adaptations, build steps
    verbose: bool = False


@dataclass
class DistributedConfig:
    strategy: str = "megatron"  # megatron | fsdp2 | megatron_fsdp | ddp (docs/parallelism.md)
    dp_replicate_size: int | None = None  # fsdp2 only (HSDP): replicas across, sharded within
    # Never set from here: dp = world / (tp * pp * cp). A number (e.g. from the AutoModel `dp_size`) is
    # checked against the derived value by validate().
    dp_size: int | None = None
    # Megatron-Core DDP knobs (strategies megatron and megatron_fsdp).
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_in_fp32: bool = True
    average_in_collective: bool = True
    check_for_nan_in_grad: bool = True
    # None = 1f1b, or interleaved_1f1b when model.virtual_pipeline_model_parallel_size is set; gpipe,
    # looped_bfs, dfs, zero_bubble run on torch.distributed.pipelining (docs/parallelism.md)
    pp_schedule: str | None = None
    # torch schedules: the schedule divides the gradients by the number of micro batches (true), or each
    # micro batch's loss is divided by it before its backward (false, AutoModel's default); same gradients
    scale_grads_in_schedule: bool = False
    timeout_minutes: int = 10
    gpus_per_node: int = 8
    # Full recompute of every transformer layer (Megatron-Core recompute_granularity="full",
    # recompute_method="uniform", recompute_num_layers=1). For finer control set model.recompute_* instead.
    activation_checkpointing: bool = False
    # fsdp2 only. true (AutoModel's default): gradients are reduce-scattered once, after the last micro
    # batch's backward (unsharded gradients accumulate in between); false: after every micro batch
    defer_fsdp_grad_sync: bool = True
    # fsdp2 with ep > 1 only (AutoModel's `moe.reshard_after_forward`): keep the MoE model's gathered
    # parameters from the forward to the backward (false, fewer all-gathers) or free them (true)
    moe_reshard_after_forward: bool = False
    # model.tp_comm_overlap only: Transformer Engine's userbuffers settings per GEMM (its `ub_cfgs`, e.g.
    # {"qkv_fprop": {"method": "ring_exchange", "aggregate": false}, "proj_fprop": {"method": "pipeline",
    # "num_sm": 24, "cga_size": 2, "num_splits": 4, "set_sm_margin": true}}); None = TE's defaults
    tp_comm_overlap_cfg: dict[str, Any] | None = None


@dataclass
class MixedPrecisionConfig:
    # bf16_mixed | fp16_mixed | fp32 | bf16_with_fp8_delayed_scaling_mixed |
    # bf16_with_fp8_current_scaling_mixed | bf16_with_mxfp8_mixed (fp8: CUDA + Transformer Engine)
    precision: str = "bf16_mixed"
    # fp16_mixed only: None = dynamic loss scaling, a number = that static scale
    loss_scale: float | None = None
    initial_loss_scale: float = 4294967296.0  # 2**32
    min_loss_scale: float = 1.0
    loss_scale_window: int = 1000
    hysteresis: int = 2


@dataclass
class RNGConfig:
    seed: int = 1234
    data_parallel_random_init: bool = False


@dataclass
class ProfilingConfig:
    """Profiling a window of training steps (Megatron-Bridge's ProfilingConfig field names).

    The profiled steps are the log line's iterations profile_step_start .. profile_step_end - 1, on the
    ranks in profile_ranks only (bridge/training/profiling.py; docs/internals.md, "Profiling").
    """

    use_pytorch_profiler: bool = False  # torch.profiler: a Chrome trace per profiled rank in output_dir
    profile_step_start: int = 10
    profile_step_end: int = 12  # exclusive
    profile_ranks: list[int] = field(default_factory=lambda: [0])
    record_shapes: bool = False  # operator input shapes (PyTorch profiler; nsys: in the NVTX ranges)
    record_memory_history: bool = False  # CUDA only: allocator history over the window, dumped at its end
    memory_snapshot_path: str = "snapshot.pickle"  # several profiled ranks: "_rank<r>" before the suffix
    use_nsys_profiler: bool = False  # CUDA only: cudaProfilerStart/Stop around the window, NVTX per step
    # where the PyTorch profiler writes its trace: None = logger.tensorboard_dir, or <cwd>/profiles
    output_dir: str | None = None


@dataclass
class FaultToleranceConfig:
    """Hung-rank detection (Megatron-Bridge's `ft` section; the timeouts carry NVIDIA Resiliency Extension's
    names). A rank whose heartbeat (beaten at each phase of a step: data, forward/backward, the loss
    all-reduce, optimizer, evaluation, checkpoint save) is older than the timeout stops the job with one
    message naming the hung rank, its iteration and its last operation (bridge/training/watchdog.py)."""

    rank_heartbeat_timeout: float | None = None  # seconds without progress; None: no detection
    # the same for the first iteration (warm-up, first compilations); None: rank_heartbeat_timeout
    initial_rank_heartbeat_timeout: float | None = None


@dataclass
class StragglerDetectionConfig:
    """Straggler detection (Megatron-Bridge's `straggler` section; log_straggler is Megatron-LM's switch):
    every report_interval iterations the ranks' step and data-loading times over the interval are
    gathered, and a rank whose relative performance (the median's time / its time, as NVIDIA Resiliency
    Extension scores it) is below relative_perf_threshold is named in the log and in TensorBoard
    (bridge/training/stragglers.py)."""

    log_straggler: bool = False
    report_interval: int = 100  # iterations
    relative_perf_threshold: float = 0.7  # 0.7: slower than median / 0.7 = 1.43 x the median


@dataclass
class DPOConfig:
    """Preference optimisation (dataset.kind=preference): DPO (Rafailov et al. 2023) or IPO (Azar et al.
    2023) against a frozen reference model. Names as TRL's DPOConfig (beta, loss_type, label_smoothing)."""

    beta: float = 0.1  # the KL penalty's strength (sigmoid) / the target margin's inverse (ipo: 1 / (2 beta))
    loss_type: str = "sigmoid"  # DPO_LOSS_TYPES
    label_smoothing: float = 0.0  # sigmoid only: conservative DPO's probability that a label is flipped
    reference: str = "auto"  # DPO_REFERENCES


@dataclass
class DistillConfig:
    """Knowledge distillation (on with `enabled` or a `teacher`): the student trains on the KL divergence of the
    teacher's and its own next-token distributions. Names as Megatron-Bridge's ModelOptDistillConfig
    (logit_kl_temperature, skip_lm_loss, kd_loss_scale); bridge.training.distill has the loss."""

    # the distill recipes set it (their runs need a teacher); setting distill.teacher turns it on too
    enabled: bool = False
    teacher: str | None = None  # a Hugging Face folder (same tokenizer / vocabulary as the student)
    logit_kl_temperature: float = 1.0  # both distributions are softmax(logits / T); the KL is scaled by T^2
    skip_lm_loss: bool = True  # True: the KD loss alone; False: lm loss + kd_loss_scale * KD loss
    # the KD loss's weight beside the lm loss (a fixed weight: ModelOpt instead rescales it every step to
    # kd_loss_scale x the lm loss's magnitude)
    kd_loss_scale: float = 1.0
    top_k: int | None = None  # the KL over the teacher's k most likely tokens only (renormalised); None: all
