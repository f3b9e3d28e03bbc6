"""Gemma 2 / Gemma 3 recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 tables
(recipes/gemma/h100/gemma2.py, gemma3.py), one row per published recipe, composed by recipes.composition.

Gemma 2 pretraining is the base run (4096 tokens, global batch 32 of micro batches of 2, 300,000
iterations, 500 warm-up); Gemma 3 1B pretrains 32K-token sequences with Llama 3's long run."""

from __future__ import annotations

from bridge.models.gemma2 import presets as gemma2
from bridge.models.gemma3 import presets as gemma3
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, NATIVE_CROSS_ENTROPY, PIPELINE_OVERLAP
from recipes.runs import LONG_PRETRAIN, SHORT_FINETUNE

# Megatron-Bridge's GPU settings for Gemma 2 (its recipes fuse the cross-entropy natively)
GEMMA2 = {**COMMON, **NATIVE_CROSS_ENTROPY, **PIPELINE_OVERLAP}

GEMMA2_FINETUNE = {**SHORT_FINETUNE, "seq_length": 2048, "global_batch_size": 128}
GEMMA3_FINETUNE = {**SHORT_FINETUNE, "seq_length": 4096, "global_batch_size": 32}


def _row(key: str, title: str, preset, kind: str, gpus: int, layout: dict, run: dict, **more) -> Row:
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family=key.split("_")[0],
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=run,
        settings=GEMMA2,
        aliases=(f"{key}_{kind}_config",),
        **more,
    )


ROWS = (
    _row("gemma2_2b", "Gemma 2 2B", gemma2.gemma2_2b, "pretrain", 2, dict(tp=2), {}),
    _row("gemma2_9b", "Gemma 2 9B", gemma2.gemma2_9b, "pretrain", 8, dict(tp=8), {}),
    _row("gemma2_27b", "Gemma 2 27B", gemma2.gemma2_27b, "pretrain", 16, dict(tp=8, pp=2), {}),
    _row("gemma2_2b", "Gemma 2 2B", gemma2.gemma2_2b, "sft", 1, {}, GEMMA2_FINETUNE),
    _row("gemma2_9b", "Gemma 2 9B", gemma2.gemma2_9b, "sft", 4, dict(tp=4), GEMMA2_FINETUNE),
    _row("gemma2_27b", "Gemma 2 27B", gemma2.gemma2_27b, "sft", 16, dict(tp=8, pp=2), GEMMA2_FINETUNE),
    _row("gemma2_2b", "Gemma 2 2B", gemma2.gemma2_2b, "peft", 1, {}, GEMMA2_FINETUNE),
    _row("gemma2_9b", "Gemma 2 9B", gemma2.gemma2_9b, "peft", 1, {}, GEMMA2_FINETUNE),
    _row("gemma2_27b", "Gemma 2 27B", gemma2.gemma2_27b, "peft", 4, dict(tp=4), GEMMA2_FINETUNE),
    _row(
        "gemma3_1b", "Gemma 3 1B", gemma3.gemma3_1b, "pretrain", 1, {}, {**LONG_PRETRAIN, "seq_length": 32768}
    ),
    _row("gemma3_1b", "Gemma 3 1B", gemma3.gemma3_1b, "sft", 1, {}, GEMMA3_FINETUNE),
    _row(
        "gemma3_1b",
        "Gemma 3 1B",
        gemma3.gemma3_1b,
        "peft",
        1,
        {},
        GEMMA3_FINETUNE,
        peft=dict(dim=8, alpha=16.0),
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
gemma2_2b_pretrain_2gpu_h100_bf16_config = _functions["gemma2_2b_pretrain_2gpu_h100_bf16_config"]
gemma2_2b_pretrain_config = gemma2_2b_pretrain_2gpu_h100_bf16_config
gemma2_9b_pretrain_8gpu_h100_bf16_config = _functions["gemma2_9b_pretrain_8gpu_h100_bf16_config"]
gemma2_9b_pretrain_config = gemma2_9b_pretrain_8gpu_h100_bf16_config
gemma2_27b_pretrain_16gpu_h100_bf16_config = _functions["gemma2_27b_pretrain_16gpu_h100_bf16_config"]
gemma2_27b_pretrain_config = gemma2_27b_pretrain_16gpu_h100_bf16_config
gemma2_2b_sft_1gpu_h100_bf16_config = _functions["gemma2_2b_sft_1gpu_h100_bf16_config"]
gemma2_2b_sft_config = gemma2_2b_sft_1gpu_h100_bf16_config
gemma2_9b_sft_4gpu_h100_bf16_config = _functions["gemma2_9b_sft_4gpu_h100_bf16_config"]
gemma2_9b_sft_config = gemma2_9b_sft_4gpu_h100_bf16_config
gemma2_27b_sft_16gpu_h100_bf16_config = _functions["gemma2_27b_sft_16gpu_h100_bf16_config"]
gemma2_27b_sft_config = gemma2_27b_sft_16gpu_h100_bf16_config
gemma2_2b_peft_1gpu_h100_bf16_config = _functions["gemma2_2b_peft_1gpu_h100_bf16_config"]
gemma2_2b_peft_config = gemma2_2b_peft_1gpu_h100_bf16_config
gemma2_9b_peft_1gpu_h100_bf16_config = _functions["gemma2_9b_peft_1gpu_h100_bf16_config"]
gemma2_9b_peft_config = gemma2_9b_peft_1gpu_h100_bf16_config
gemma2_27b_peft_4gpu_h100_bf16_config = _functions["gemma2_27b_peft_4gpu_h100_bf16_config"]
gemma2_27b_peft_config = gemma2_27b_peft_4gpu_h100_bf16_config
gemma3_1b_pretrain_1gpu_h100_bf16_config = _functions["gemma3_1b_pretrain_1gpu_h100_bf16_config"]
gemma3_1b_pretrain_config = gemma3_1b_pretrain_1gpu_h100_bf16_config
gemma3_1b_sft_1gpu_h100_bf16_config = _functions["gemma3_1b_sft_1gpu_h100_bf16_config"]
gemma3_1b_sft_config = gemma3_1b_sft_1gpu_h100_bf16_config
gemma3_1b_peft_1gpu_h100_bf16_config = _functions["gemma3_1b_peft_1gpu_h100_bf16_config"]
gemma3_1b_peft_config = gemma3_1b_peft_1gpu_h100_bf16_config
# fmt: on
