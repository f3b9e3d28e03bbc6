"""Qwen2.5-VL finetuning recipes, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/qwen_vl/h100/qwen25_vl.py), one row per published recipe, composed by recipes.composition.

Megatron-Bridge's VLM finetuning base: 4096-token rows (one conversation each, not packed), global batch
32 of micro batches of 2, 300,000 iterations, 500 warm-up and cosine decay over the run, evaluation every
500 on 32 batches, the distributed optimizer (beta2 0.95); lr 5e-6 -> 1e-6 (SFT) or 1e-4 -> 1e-5 (LoRA);
every part trains (freeze_vision_model false, as those recipes set it). The data are image-text
conversations (dataset.kind=vlm, docs/vlm.md) read through the checkpoint's processor: give
checkpoint.pretrained_checkpoint (the Hugging Face folder) and dataset.data_paths.
"""

from __future__ import annotations

from bridge.models.qwen25_vl import presets
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, NATIVE_CROSS_ENTROPY

QWEN25_VL = {**COMMON, **NATIVE_CROSS_ENTROPY}

# model -> (title, preset, sft GPUs and layout, peft GPUs and layout)
MODELS = {
    "qwen25_vl_3b": ("Qwen2.5-VL 3B", presets.qwen25_vl_3b, (1, {}), (1, {})),
    "qwen25_vl_7b": ("Qwen2.5-VL 7B", presets.qwen25_vl_7b, (2, dict(tp=2)), (1, {})),
    "qwen25_vl_32b": ("Qwen2.5-VL 32B", presets.qwen25_vl_32b, (16, dict(tp=8, pp=2)), (1, {})),
    "qwen25_vl_72b": ("Qwen2.5-VL 72B", presets.qwen25_vl_72b, (32, dict(tp=8, pp=4)), (1, {})),
}  # fmt: skip
VLM_FINETUNE = dict(
    data_kind="vlm", packed=False, seq_length=4096, global_batch_size=32, micro_batch_size=2,
    train_iters=300_000, lr_warmup_iters=500, lr_decay_iters=300_000, eval_interval=500,
    adam_beta2=0.95, use_distributed_optimizer=True,
)  # fmt: skip
LR = {"sft": dict(lr=5e-6, min_lr=1e-6), "peft": dict(lr=1e-4, min_lr=1e-5)}


def _rows(key: str) -> tuple[Row, ...]:
    title, preset, *layouts = MODELS[key]
    rows = []
    for kind, (gpus, layout) in zip(("sft", "peft"), layouts, strict=True):
        rows.append(
            Row(
                name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
                family="qwen25_vl",
                kind=kind,
                title=title,
                preset=preset,
                gpus=gpus,
                layout=layout,
                run={**VLM_FINETUNE, **LR[kind]},
                settings=QWEN25_VL,
                model=dict(freeze_vision_model=False, freeze_vision_projection=False),
                aliases=(f"{key}_{kind}_config",),
            )
        )
    return tuple(rows)


ROWS = tuple(row for key in MODELS for row in _rows(key))


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen25_vl_3b_sft_1gpu_h100_bf16_config = _functions["qwen25_vl_3b_sft_1gpu_h100_bf16_config"]
qwen25_vl_3b_sft_config = qwen25_vl_3b_sft_1gpu_h100_bf16_config
qwen25_vl_3b_peft_1gpu_h100_bf16_config = _functions["qwen25_vl_3b_peft_1gpu_h100_bf16_config"]
qwen25_vl_3b_peft_config = qwen25_vl_3b_peft_1gpu_h100_bf16_config
qwen25_vl_7b_sft_2gpu_h100_bf16_config = _functions["qwen25_vl_7b_sft_2gpu_h100_bf16_config"]
qwen25_vl_7b_sft_config = qwen25_vl_7b_sft_2gpu_h100_bf16_config
qwen25_vl_7b_peft_1gpu_h100_bf16_config = _functions["qwen25_vl_7b_peft_1gpu_h100_bf16_config"]
qwen25_vl_7b_peft_config = qwen25_vl_7b_peft_1gpu_h100_bf16_config
qwen25_vl_32b_sft_16gpu_h100_bf16_config = _functions["qwen25_vl_32b_sft_16gpu_h100_bf16_config"]
qwen25_vl_32b_sft_config = qwen25_vl_32b_sft_16gpu_h100_bf16_config
qwen25_vl_32b_peft_1gpu_h100_bf16_config = _functions["qwen25_vl_32b_peft_1gpu_h100_bf16_config"]
qwen25_vl_32b_peft_config = qwen25_vl_32b_peft_1gpu_h100_bf16_config
qwen25_vl_72b_sft_32gpu_h100_bf16_config = _functions["qwen25_vl_72b_sft_32gpu_h100_bf16_config"]
qwen25_vl_72b_sft_config = qwen25_vl_72b_sft_32gpu_h100_bf16_config
qwen25_vl_72b_peft_1gpu_h100_bf16_config = _functions["qwen25_vl_72b_peft_1gpu_h100_bf16_config"]
qwen25_vl_72b_peft_config = qwen25_vl_72b_peft_1gpu_h100_bf16_config
# fmt: on
