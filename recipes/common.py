"""The base of each recipe kind (Megatron-Bridge's _pretrain_common / _sft_common / _peft_common),
applied to a model provider; recipes.composition adds a preset and a table row.

Pretraining base: 4096-token sequences, global batch 32 of micro batches of 2, 300,000 iterations,
Adam lr 3e-4 -> min 3e-5 cosine after 500 warmup iterations, betas 0.9 / 0.95, eps 1e-8, clip 1.0,
weight decay 0.1 on the optimizer and 0.033 constant from the scheduler (Megatron-Core's scheduler
sets the decay every step, so 0.033 is what trains), bf16 mixed precision, the distributed optimizer,
torch_dist checkpoints and evaluation (32 batches) every 500 iterations, manual GC every 100 iterations,
seed 1234, mock data with a NullTokenizer unless data paths are given.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.config.container import ConfigContainer
from bridge.config.sections import (
    CheckpointConfig,
    DatasetConfig,
    DistributedConfig,
    LoggerConfig,
    MixedPrecisionConfig,
    OptimizerConfig,
    PeftConfig,
    RNGConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainingConfig,
    ValidationConfig,
)
from bridge.models.gpt_provider import GPTModelProvider

SEQ_LENGTH = 4096
TRAIN_ITERS = 300_000
GLOBAL_BATCH_SIZE = 32
MICRO_BATCH_SIZE = 2
LR = 3e-4
MIN_LR = 3e-5
LR_WARMUP_ITERS = 500
EVAL_INTERVAL = 500
SAVE_INTERVAL = 500
ADAM_EPS = 1e-8  # Megatron-Bridge #2184 (was 1e-5)
WEIGHT_DECAY = 0.1  # optimizer.weight_decay; the scheduler's value below is the one that trains
SCHEDULER_WEIGHT_DECAY = 0.033  # start = end, constant (Megatron-Bridge's distributed_fused_adam_*)


@dataclass(frozen=True)
class RecipeInfo:
    """A recipe as the registry (recipes/__init__.py) lists it; each recipe module declares RECIPES."""

    name: str
    module: str  # recipes.<module> holds a function called `name`
    description: str
    default_world_size: int  # the published layout's GPU count (at least its minimum)
    entry: str = "pretrain"  # the training entry run_recipe.py calls: pretrain | finetune
    family: str = ""  # the model family folder (bridge/models/<family>)
    kind: str = "pretrain"  # pretrain | sft | peft | dpo | distill
    aliases: tuple[str, ...] = ()  # other names that resolve to this recipe
    factory: Callable[..., ConfigContainer] | None = None  # None: recipes.<module>.<name>
    row: Any = None  # the table row it was composed from (recipes.composition.Row)

    def __post_init__(self) -> None:
        # a hand-written entry (no table row) is grouped under its module, its kind read from its name
        if not self.family:
            object.__setattr__(self, "family", self.module)
        if self.entry == "finetune" and self.kind == "pretrain":
            object.__setattr__(self, "kind", "peft" if "_peft_" in self.name else "sft")


def pretrain_config(
    model: GPTModelProvider,
    *,
    tensor_model_parallel_size: int,
    pipeline_model_parallel_size: int,
    virtual_pipeline_model_parallel_size: int | None,
    context_parallel_size: int,
    sequence_parallel: bool,
    expert_model_parallel_size: int = 1,
    dir: str | None = None,
    name: str = "default",
    data_paths: list[str] | None = None,
    data_kind: str = "indexed",
    seq_length: int = SEQ_LENGTH,
    train_iters: int = TRAIN_ITERS,
    global_batch_size: int = GLOBAL_BATCH_SIZE,
    micro_batch_size: int = MICRO_BATCH_SIZE,
    lr: float = LR,
    min_lr: float = MIN_LR,
    lr_warmup_iters: int = LR_WARMUP_ITERS,
    lr_decay_iters: int | None = None,
    eval_interval: int = EVAL_INTERVAL,
    save_interval: int = SAVE_INTERVAL,
    precision: str = "bf16_mixed",
) -> ConfigContainer:
    """A pretraining ConfigContainer for `model` with the published values and the given layout.

    `dir` holds the run's outputs (<dir>/<name>/checkpoints and /tb_logs; default ./experiments).
    `data_paths` (Megatron blend list, optional weights) switches from mock data to `data_kind` files.
    The sequence length is set on the model only: dataset.seq_length stays null and follows it.
    """
    model.tensor_model_parallel_size = tensor_model_parallel_size
    model.pipeline_model_parallel_size = pipeline_model_parallel_size
    model.virtual_pipeline_model_parallel_size = virtual_pipeline_model_parallel_size
    model.context_parallel_size = context_parallel_size
    model.expert_model_parallel_size = expert_model_parallel_size
    model.sequence_parallel = sequence_parallel
    model.seq_length = seq_length

    run_dir = os.path.join(dir if dir is not None else os.path.join(os.getcwd(), "experiments"), name)
    return ConfigContainer(
        model=model,
        train=TrainingConfig(
            train_iters=train_iters,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            manual_gc=True,
            manual_gc_interval=100,
        ),
        validation=ValidationConfig(eval_interval=eval_interval, eval_iters=32),
        optimizer=OptimizerConfig(
            optimizer="adam",
            lr=lr,
            min_lr=min_lr,
            weight_decay=WEIGHT_DECAY,
            adam_beta1=0.9,
            adam_beta2=0.95,
            adam_eps=ADAM_EPS,
            clip_grad=1.0,
            use_distributed_optimizer=True,
        ),
        scheduler=scheduler(lr_warmup_iters, lr_decay_iters),
        dataset=DatasetConfig(
            kind=data_kind if data_paths else "mock",
            data_paths=list(data_paths or []),
            seq_length=None,
            num_workers=8,
        ),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=None),
        checkpoint=CheckpointConfig(
            save=os.path.join(run_dir, "checkpoints"), save_interval=save_interval, ckpt_format="torch_dist"
        ),
        logger=LoggerConfig(log_interval=10, tensorboard_dir=os.path.join(run_dir, "tb_logs")),
        mixed_precision=MixedPrecisionConfig(precision=precision),
        rng=RNGConfig(seed=1234),
    )


def scheduler(lr_warmup_iters: int, lr_decay_iters: int | None) -> SchedulerConfig:
    """Cosine decay; the weight decay the scheduler applies every step is Megatron-Bridge's 0.033."""
    return SchedulerConfig(
        lr_decay_style="cosine",
        lr_warmup_iters=lr_warmup_iters,
        lr_decay_iters=lr_decay_iters,
        start_weight_decay=SCHEDULER_WEIGHT_DECAY,
        end_weight_decay=SCHEDULER_WEIGHT_DECAY,
        weight_decay_incr_style="constant",
    )


# ---- finetuning (Megatron-Bridge's _sft_common / _peft_common and its H100 finetuning recipes) ----------

SFT_LR = 5e-6  # full-parameter finetuning
PEFT_LR = 1e-4  # adapters
FINETUNE_TRAIN_ITERS = 1000


def finetune_config(
    model: GPTModelProvider,
    *,
    tensor_model_parallel_size: int,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    expert_model_parallel_size: int = 1,
    peft: PeftConfig | None = None,
    pretrained_checkpoint: str | None = None,
    data_paths: list[str] | None = None,
    data_kind: str = "sft",
    dir: str | None = None,
    name: str = "default",
    seq_length: int = 2048,
    packed: bool = True,
    train_iters: int = FINETUNE_TRAIN_ITERS,
    global_batch_size: int = 8,
    lr: float | None = None,
    lr_warmup_iters: int = 50,
    lr_decay_iters: int | None = None,
    eval_interval: int = 30,
    save_interval: int = 50,
    use_distributed_optimizer: bool = False,
    adam_beta2: float = 0.98,
    min_lr: float = 0.0,
    micro_batch_size: int = 1,
    precision: str = "bf16_mixed",
) -> ConfigContainer:
    """A finetuning ConfigContainer: SFT when `peft` is None, else adapters with `peft`'s settings.

    Published values: Adam (beta2 0.98, eps 1e-8; scheduler weight decay 0.033) lr 5e-6 full / 1e-4 PEFT
    -> 0 cosine, 50 warmup iterations,
    micro batch 1 with rows packed to seq_length (`packed`), global batch 8, 1000 iterations, evaluation
    every 30 on 32 batches, saves every 50, bf16 mixed precision, seed 5678, a Hugging Face tokenizer.
    `pretrained_checkpoint`: a Hugging Face folder (the model section follows its config.json and the
    tokenizer defaults to it) or a torch_dist checkpoint. `data_paths`: .jsonl / .json / .parquet files of
    `data_kind` (sft: {"input", "output"}; chat: {"messages"}).
    """
    model.tensor_model_parallel_size = tensor_model_parallel_size
    model.pipeline_model_parallel_size = pipeline_model_parallel_size
    model.virtual_pipeline_model_parallel_size = virtual_pipeline_model_parallel_size
    model.context_parallel_size = context_parallel_size
    model.expert_model_parallel_size = expert_model_parallel_size
    model.sequence_parallel = sequence_parallel
    model.seq_length = seq_length
    run_dir = os.path.join(dir if dir is not None else os.path.join(os.getcwd(), "experiments"), name)
    return ConfigContainer(
        model=model,
        train=TrainingConfig(
            train_iters=train_iters,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            manual_gc=True,
            manual_gc_interval=100,
        ),
        validation=ValidationConfig(eval_interval=eval_interval, eval_iters=32),
        optimizer=OptimizerConfig(
            optimizer="adam",
            lr=lr if lr is not None else (PEFT_LR if peft is not None else SFT_LR),
            min_lr=min_lr,
            weight_decay=WEIGHT_DECAY,
            adam_beta1=0.9,
            adam_beta2=adam_beta2,
            adam_eps=ADAM_EPS,
            clip_grad=1.0,
            use_distributed_optimizer=use_distributed_optimizer,
        ),
        scheduler=scheduler(lr_warmup_iters, lr_decay_iters),
        dataset=DatasetConfig(
            kind=data_kind,
            data_paths=list(data_paths or []),
            seq_length=None,
            packed_sequence_size=seq_length if packed else 0,
            num_workers=2,
        ),
        tokenizer=TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=None),
        checkpoint=CheckpointConfig(
            save=os.path.join(run_dir, "checkpoints"),
            save_interval=save_interval,
            ckpt_format="torch_dist",
            pretrained_checkpoint=pretrained_checkpoint,
        ),
        logger=LoggerConfig(log_interval=1, tensorboard_dir=os.path.join(run_dir, "tb_logs")),
        # the finetuning recipes' DDP: no grad-reduce / param-gather overlap
        distributed=DistributedConfig(overlap_grad_reduce=False, overlap_param_gather=False),
        mixed_precision=MixedPrecisionConfig(precision=precision),
        rng=RNGConfig(seed=5678),
        peft=peft if peft is not None else PeftConfig(),
    )


def lora(scheme: str = "lora", **overrides) -> PeftConfig:
    """Megatron-Bridge's default adapters (dim 32, alpha 32, no dropout, all four linear layers)."""
    return PeftConfig(scheme=scheme, **overrides)
