"""Gemma 3 vision-language recipes, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/gemma3_vl/h100/gemma3_vl.py), one row per published recipe, composed by recipes.composition.

All train image-text conversations (dataset.kind=vlm, one conversation per row: no packing) of 4096
tokens, global batch 32 of micro batches of 2, 50 iterations (10 warm-up, cosine decay over 50, lr 5e-5 ->
5e-6 full / 2e-4 -> 2e-5 LoRA, beta2 0.95), evaluation every 5 iterations on 10 batches, a checkpoint every
500, the distributed optimizer, seed 1234 (Megatron-Bridge's _sft_common_vlm / _peft_common_vlm), and
nothing frozen: the vision tower trains too (freeze_vision_model false, as published)."""

from __future__ import annotations

from bridge.models.gemma3_vl import presets
from recipes.composition import Row, register, vlm_finetune_row
from recipes.gpu_settings import COMMON, NATIVE_CROSS_ENTROPY

GEMMA3_VL = {**COMMON, **NATIVE_CROSS_ENTROPY}
MODELS = {
    "gemma3_vl_4b": ("Gemma 3 4B (vision-language)", presets.gemma3_4b_it),
    "gemma3_vl_12b": ("Gemma 3 12B (vision-language)", presets.gemma3_12b_it),
    "gemma3_vl_27b": ("Gemma 3 27B (vision-language)", presets.gemma3_27b_it),
}
RUN = dict(
    data_kind="vlm",
    packed=False,
    seq_length=4096,
    train_iters=50,
    global_batch_size=32,
    micro_batch_size=2,
    lr_warmup_iters=10,
    lr_decay_iters=50,
    adam_beta2=0.95,
    eval_interval=5,
    save_interval=500,
    use_distributed_optimizer=True,
)
LR = {"sft": dict(lr=5e-5, min_lr=5e-6), "peft": dict(lr=2e-4, min_lr=2e-5)}


def _row(key: str, kind: str, gpus: int, layout: dict) -> Row:
    title, preset = MODELS[key]
    run = {**RUN, **LR[kind]}
    return vlm_finetune_row(
        "gemma3_vl", title, preset, kind, gpus, layout, key=key, run=run, settings=GEMMA3_VL
    )


ROWS = (
    _row("gemma3_vl_4b", "sft", 1, {}),
    _row("gemma3_vl_12b", "sft", 4, dict(tp=4)),
    _row("gemma3_vl_27b", "sft", 16, dict(tp=8, pp=2)),
    _row("gemma3_vl_4b", "peft", 1, {}),
    _row("gemma3_vl_12b", "peft", 1, {}),
    _row("gemma3_vl_27b", "peft", 4, dict(tp=4)),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
gemma3_vl_4b_sft_1gpu_h100_bf16_config = _functions["gemma3_vl_4b_sft_1gpu_h100_bf16_config"]
gemma3_vl_4b_sft_config = gemma3_vl_4b_sft_1gpu_h100_bf16_config
gemma3_vl_12b_sft_4gpu_h100_bf16_config = _functions["gemma3_vl_12b_sft_4gpu_h100_bf16_config"]
gemma3_vl_12b_sft_config = gemma3_vl_12b_sft_4gpu_h100_bf16_config
gemma3_vl_27b_sft_16gpu_h100_bf16_config = _functions["gemma3_vl_27b_sft_16gpu_h100_bf16_config"]
gemma3_vl_27b_sft_config = gemma3_vl_27b_sft_16gpu_h100_bf16_config
gemma3_vl_4b_peft_1gpu_h100_bf16_config = _functions["gemma3_vl_4b_peft_1gpu_h100_bf16_config"]
gemma3_vl_4b_peft_config = gemma3_vl_4b_peft_1gpu_h100_bf16_config
gemma3_vl_12b_peft_1gpu_h100_bf16_config = _functions["gemma3_vl_12b_peft_1gpu_h100_bf16_config"]
gemma3_vl_12b_peft_config = gemma3_vl_12b_peft_1gpu_h100_bf16_config
gemma3_vl_27b_peft_4gpu_h100_bf16_config = _functions["gemma3_vl_27b_peft_4gpu_h100_bf16_config"]
gemma3_vl_27b_peft_config = gemma3_vl_27b_peft_4gpu_h100_bf16_config
# fmt: on
