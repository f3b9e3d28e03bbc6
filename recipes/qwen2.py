"""Qwen2 / Qwen2.5 recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/qwen/h100/qwen2.py), one row per published recipe, composed by recipes.composition.

Pretraining is the base run (4096 tokens, global batch 32, 300,000 iterations); finetuning trains 2048-token
packed rows for 100 iterations at global batch 128 (SFT; Megatron-Bridge leaves _sft_common's 128) with beta2
0.95; LoRA is the default adapter (dim 32, alpha 32, all four linear layers)."""

from __future__ import annotations

from bridge.models.qwen2 import presets
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, LAYER_FUSIONS, NATIVE_CROSS_ENTROPY, PIPELINE_OVERLAP
from recipes.runs import SHORT_FINETUNE

# Megatron-Bridge's GPU settings for Qwen2 / 2.5
QWEN2 = {**COMMON, **LAYER_FUSIONS, **NATIVE_CROSS_ENTROPY, **PIPELINE_OVERLAP}


# model -> (title, preset, pretrain GPUs and layout, sft GPUs and layout, peft GPUs and layout)
MODELS = {
    "qwen2_500m": ("Qwen2 0.5B", presets.qwen2_500m, (1, {}), (1, {}), (1, {})),
    "qwen2_1p5b": ("Qwen2 1.5B", presets.qwen2_1p5b, (1, {}), (1, {}), (1, {})),
    "qwen2_7b": ("Qwen2 7B", presets.qwen2_7b, (2, dict(tp=2)), (2, dict(tp=2)), (1, {})),
    "qwen2_72b": ("Qwen2 72B", presets.qwen2_72b, (32, dict(tp=8, pp=4)), (32, dict(tp=8, pp=4)), (8, dict(tp=8))),
    "qwen25_500m": ("Qwen2.5 0.5B", presets.qwen25_500m, (1, {}), (1, {}), (1, {})),
    "qwen25_1p5b": ("Qwen2.5 1.5B", presets.qwen25_1p5b, (1, {}), (1, {}), (1, {})),
    "qwen25_7b": ("Qwen2.5 7B", presets.qwen25_7b, (2, dict(tp=2)), (2, dict(tp=2)), (1, {})),
    "qwen25_14b": ("Qwen2.5 14B", presets.qwen25_14b, (4, dict(tp=4)), (4, dict(tp=4)), (1, {})),
    "qwen25_32b": ("Qwen2.5 32B", presets.qwen25_32b, (16, dict(tp=8, pp=2)), (16, dict(tp=8, pp=2)), (8, dict(tp=8))),
    "qwen25_72b": ("Qwen2.5 72B", presets.qwen25_72b, (32, dict(tp=8, pp=4)), (32, dict(tp=8, pp=4)), (8, dict(tp=8))),
}  # fmt: skip
FINETUNE_RUN = {**SHORT_FINETUNE, "seq_length": 2048, "global_batch_size": 128}


def _rows(key: str) -> tuple[Row, ...]:
    title, preset, *layouts = MODELS[key]
    rows = []
    for kind, (gpus, layout) in zip(("pretrain", "sft", "peft"), layouts, strict=True):
        rows.append(
            Row(
                name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
                family="qwen2",
                kind=kind,
                title=title,
                preset=preset,
                gpus=gpus,
                layout=layout,
                run={} if kind == "pretrain" else FINETUNE_RUN,
                settings=QWEN2,
                aliases=(f"{key}_{kind}_config",),
            )
        )
    return tuple(rows)


ROWS = tuple(row for key in MODELS for row in _rows(key))


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen2_500m_pretrain_1gpu_h100_bf16_config = _functions["qwen2_500m_pretrain_1gpu_h100_bf16_config"]
qwen2_500m_pretrain_config = qwen2_500m_pretrain_1gpu_h100_bf16_config
qwen2_500m_sft_1gpu_h100_bf16_config = _functions["qwen2_500m_sft_1gpu_h100_bf16_config"]
qwen2_500m_sft_config = qwen2_500m_sft_1gpu_h100_bf16_config
qwen2_500m_peft_1gpu_h100_bf16_config = _functions["qwen2_500m_peft_1gpu_h100_bf16_config"]
qwen2_500m_peft_config = qwen2_500m_peft_1gpu_h100_bf16_config
qwen2_1p5b_pretrain_1gpu_h100_bf16_config = _functions["qwen2_1p5b_pretrain_1gpu_h100_bf16_config"]
qwen2_1p5b_pretrain_config = qwen2_1p5b_pretrain_1gpu_h100_bf16_config
qwen2_1p5b_sft_1gpu_h100_bf16_config = _functions["qwen2_1p5b_sft_1gpu_h100_bf16_config"]
qwen2_1p5b_sft_config = qwen2_1p5b_sft_1gpu_h100_bf16_config
qwen2_1p5b_peft_1gpu_h100_bf16_config = _functions["qwen2_1p5b_peft_1gpu_h100_bf16_config"]
qwen2_1p5b_peft_config = qwen2_1p5b_peft_1gpu_h100_bf16_config
qwen2_7b_pretrain_2gpu_h100_bf16_config = _functions["qwen2_7b_pretrain_2gpu_h100_bf16_config"]
qwen2_7b_pretrain_config = qwen2_7b_pretrain_2gpu_h100_bf16_config
qwen2_7b_sft_2gpu_h100_bf16_config = _functions["qwen2_7b_sft_2gpu_h100_bf16_config"]
qwen2_7b_sft_config = qwen2_7b_sft_2gpu_h100_bf16_config
qwen2_7b_peft_1gpu_h100_bf16_config = _functions["qwen2_7b_peft_1gpu_h100_bf16_config"]
qwen2_7b_peft_config = qwen2_7b_peft_1gpu_h100_bf16_config
qwen2_72b_pretrain_32gpu_h100_bf16_config = _functions["qwen2_72b_pretrain_32gpu_h100_bf16_config"]
qwen2_72b_pretrain_config = qwen2_72b_pretrain_32gpu_h100_bf16_config
qwen2_72b_sft_32gpu_h100_bf16_config = _functions["qwen2_72b_sft_32gpu_h100_bf16_config"]
qwen2_72b_sft_config = qwen2_72b_sft_32gpu_h100_bf16_config
qwen2_72b_peft_8gpu_h100_bf16_config = _functions["qwen2_72b_peft_8gpu_h100_bf16_config"]
qwen2_72b_peft_config = qwen2_72b_peft_8gpu_h100_bf16_config
qwen25_500m_pretrain_1gpu_h100_bf16_config = _functions["qwen25_500m_pretrain_1gpu_h100_bf16_config"]
qwen25_500m_pretrain_config = qwen25_500m_pretrain_1gpu_h100_bf16_config
qwen25_500m_sft_1gpu_h100_bf16_config = _functions["qwen25_500m_sft_1gpu_h100_bf16_config"]
qwen25_500m_sft_config = qwen25_500m_sft_1gpu_h100_bf16_config
qwen25_500m_peft_1gpu_h100_bf16_config = _functions["qwen25_500m_peft_1gpu_h100_bf16_config"]
qwen25_500m_peft_config = qwen25_500m_peft_1gpu_h100_bf16_config
qwen25_1p5b_pretrain_1gpu_h100_bf16_config = _functions["qwen25_1p5b_pretrain_1gpu_h100_bf16_config"]
qwen25_1p5b_pretrain_config = qwen25_1p5b_pretrain_1gpu_h100_bf16_config
qwen25_1p5b_sft_1gpu_h100_bf16_config = _functions["qwen25_1p5b_sft_1gpu_h100_bf16_config"]
qwen25_1p5b_sft_config = qwen25_1p5b_sft_1gpu_h100_bf16_config
qwen25_1p5b_peft_1gpu_h100_bf16_config = _functions["qwen25_1p5b_peft_1gpu_h100_bf16_config"]
qwen25_1p5b_peft_config = qwen25_1p5b_peft_1gpu_h100_bf16_config
qwen25_7b_pretrain_2gpu_h100_bf16_config = _functions["qwen25_7b_pretrain_2gpu_h100_bf16_config"]
qwen25_7b_pretrain_config = qwen25_7b_pretrain_2gpu_h100_bf16_config
qwen25_7b_sft_2gpu_h100_bf16_config = _functions["qwen25_7b_sft_2gpu_h100_bf16_config"]
qwen25_7b_sft_config = qwen25_7b_sft_2gpu_h100_bf16_config
qwen25_7b_peft_1gpu_h100_bf16_config = _functions["qwen25_7b_peft_1gpu_h100_bf16_config"]
qwen25_7b_peft_config = qwen25_7b_peft_1gpu_h100_bf16_config
qwen25_14b_pretrain_4gpu_h100_bf16_config = _functions["qwen25_14b_pretrain_4gpu_h100_bf16_config"]
qwen25_14b_pretrain_config = qwen25_14b_pretrain_4gpu_h100_bf16_config
qwen25_14b_sft_4gpu_h100_bf16_config = _functions["qwen25_14b_sft_4gpu_h100_bf16_config"]
qwen25_14b_sft_config = qwen25_14b_sft_4gpu_h100_bf16_config
qwen25_14b_peft_1gpu_h100_bf16_config = _functions["qwen25_14b_peft_1gpu_h100_bf16_config"]
qwen25_14b_peft_config = qwen25_14b_peft_1gpu_h100_bf16_config
qwen25_32b_pretrain_16gpu_h100_bf16_config = _functions["qwen25_32b_pretrain_16gpu_h100_bf16_config"]
qwen25_32b_pretrain_config = qwen25_32b_pretrain_16gpu_h100_bf16_config
qwen25_32b_sft_16gpu_h100_bf16_config = _functions["qwen25_32b_sft_16gpu_h100_bf16_config"]
qwen25_32b_sft_config = qwen25_32b_sft_16gpu_h100_bf16_config
qwen25_32b_peft_8gpu_h100_bf16_config = _functions["qwen25_32b_peft_8gpu_h100_bf16_config"]
qwen25_32b_peft_config = qwen25_32b_peft_8gpu_h100_bf16_config
qwen25_72b_pretrain_32gpu_h100_bf16_config = _functions["qwen25_72b_pretrain_32gpu_h100_bf16_config"]
qwen25_72b_pretrain_config = qwen25_72b_pretrain_32gpu_h100_bf16_config
qwen25_72b_sft_32gpu_h100_bf16_config = _functions["qwen25_72b_sft_32gpu_h100_bf16_config"]
qwen25_72b_sft_config = qwen25_72b_sft_32gpu_h100_bf16_config
qwen25_72b_peft_8gpu_h100_bf16_config = _functions["qwen25_72b_peft_8gpu_h100_bf16_config"]
qwen25_72b_peft_config = qwen25_72b_peft_8gpu_h100_bf16_config
# fmt: on
