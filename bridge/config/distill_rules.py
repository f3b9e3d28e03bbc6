"""The rules of knowledge-distillation runs (the `distill` section) and their plan: the teacher's model,
built on the student's layout. Called by bridge.config.run_plan (one place)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.checkpoint.paths import HF_ASSETS_DIR, is_hf_folder
from bridge.errors import ConfigError, config_error
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hf_architecture import model_from_hf
from bridge.models.provider_layout import derive_layout

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout


@dataclass(frozen=True)
class DistillPlan:
    """What a distillation run's loss needs (bridge.training.distill reads it)."""

    teacher_path: (
        str  # the Hugging Face folder of the teacher's config.json (and weights, without a checkpoint)
    )
    teacher: GPTModelProvider  # the teacher's architecture with the student's parallel sizes and precision
    temperature: float
    skip_lm_loss: bool
    kd_loss_scale: float
    top_k: int | None
    # a bridge torch_dist checkpoint the teacher's weights load from (resharded to the student's layout)
    teacher_checkpoint: str | None = None


def distill_plan(
    cfg: ConfigContainer,
    provider: GPTModelProvider,
    layout: ParallelLayout,
    world_size: int,
    pipeline_engine: str | None = None,
) -> DistillPlan | None:
    """The plan of a run with distill.teacher set (None otherwise); every rule raises one ConfigError."""
    d = cfg.distill
    if d.teacher is None:
        if d.enabled:
            raise config_error(
                "distill.teacher", None, "distillation (distill.enabled=true, the distill recipes) needs a teacher",
                "set distill.teacher=<Hugging Face folder with the student's tokenizer>",
            )  # fmt: skip
        return None
    teacher_checkpoint = None
    config_folder = str(d.teacher)
    if not is_hf_folder(d.teacher):
        assets = Path(str(d.teacher)) / HF_ASSETS_DIR
        if not (assets / "config.json").is_file():
            raise config_error(
                "distill.teacher",
                d.teacher,
                "is neither a Hugging Face model folder (config.json and safetensors weights) nor a bridge "
                f"checkpoint that names its architecture ({HF_ASSETS_DIR}/config.json, as "
                "convert_checkpoint.py import writes)",
                "give the teacher's Hugging Face folder or imported checkpoint (a trained run's checkpoint: "
                "export it with convert_checkpoint.py export first)",
            )
        teacher_checkpoint, config_folder = str(d.teacher), str(assets)
    t = d.logit_kl_temperature
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not (t > 0 and math.isfinite(t)):
        raise config_error("distill.logit_kl_temperature", t, "must be a finite number > 0", "e.g. 1.0")
    if not d.skip_lm_loss and not d.kd_loss_scale >= 0:
        raise config_error("distill.kd_loss_scale", d.kd_loss_scale, "must be >= 0", "e.g. 1.0")
    if d.top_k is not None and (isinstance(d.top_k, bool) or not isinstance(d.top_k, int) or d.top_k < 1):
        raise config_error(
            "distill.top_k", d.top_k, "must be null or an integer >= 1", "e.g. distill.top_k=64"
        )
    if cfg.dataset.kind == "preference":
        raise config_error(
            "distill.teacher", d.teacher, "distils on token data, and dataset.kind=preference is DPO's",
            "remove it (~distill.teacher), or use dataset.kind=sft / chat / indexed",
        )  # fmt: skip
    teacher = model_from_hf(provider, config_folder)
    teacher.should_pad_vocab = provider.should_pad_vocab  # the same rows as the student's logits
    if teacher.vocab_size != provider.vocab_size:
        raise config_error(
            "distill.teacher",
            d.teacher,
            f"its vocabulary has {teacher.vocab_size} tokens and the student's {provider.vocab_size}; the KL "
            "compares the two distributions token by token, so both need one tokenizer",
            "give a teacher with the student's tokenizer",
        )
    if layout.cp > 1:
        raise config_error(
            "model.context_parallel_size", layout.cp,
            "the teacher's logits are collected per micro batch on the last stage, which context parallelism "
            "splits over ranks (not supported yet)", "set model.context_parallel_size=1",
        )  # fmt: skip
    if cfg.distributed.strategy not in ("megatron", "ddp"):
        raise config_error(
            "distributed.strategy", cfg.distributed.strategy,
            "the teacher pass runs on Megatron-Core's schedules with plain or DDP-wrapped chunks",
            "use distributed.strategy=megatron",
        )  # fmt: skip
    if pipeline_engine == "torch":
        raise config_error(
            "distributed.pp_schedule", cfg.distributed.pp_schedule,
            "the teacher pass runs on Megatron-Core's pipeline schedules, not torch.distributed.pipelining's",
            "use distributed.pp_schedule=1f1b (or interleaved_1f1b)",
        )  # fmt: skip
    try:  # the teacher sits on the student's layout: every layout rule holds for its shape too
        derive_layout(
            teacher,
            world_size,
            strategy=cfg.distributed.strategy,
            gpus_per_node=cfg.distributed.gpus_per_node,
        )
    except ConfigError as err:
        raise ConfigError(
            f"distill.teacher = {d.teacher!r}: the teacher cannot be placed on the student's layout "
            f"({layout.describe()}): {err}"
        ) from None
    if cfg.dataset.packed_sequence_size:
        raise config_error(
            "dataset.packed_sequence_size", cfg.dataset.packed_sequence_size,
            "distillation runs on unpacked rows (the teacher pass takes no packed-sequence boundaries yet)",
            "set dataset.packed_sequence_size=0",
        )  # fmt: skip
    return DistillPlan(
        teacher_path=config_folder,
        teacher=teacher,
        teacher_checkpoint=teacher_checkpoint,
        temperature=float(t),
        skip_lm_loss=bool(d.skip_lm_loss),
        kd_loss_scale=float(d.kd_loss_scale),
        top_k=d.top_k,
    )
