"""Ministral 3 (vision-language) recipes, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/ministral3/h100/ministral3.py), one row per published recipe, composed by recipes.composition.

Each starts from the size's Instruct checkpoint (mistralai/Ministral-3-{3B,8B,14B}-Instruct-2512: the
mistral3 family's `ministral3_*_instruct` presets; give checkpoint.pretrained_checkpoint=<its folder> for the
weights and dataset.data_paths for image-text conversations, dataset.kind=vlm, docs/vlm.md). All train
one conversation per row (no packing) of 4096 tokens, global batch 32 of micro batches of 1, 50 iterations
(10 warm-up, cosine decay over 50, lr 5e-6 -> 5e-7 full / 2e-4 -> 2e-5 LoRA, beta2 0.95), evaluation every
5 iterations on 10 batches, a checkpoint every 50, the distributed optimizer, seed 1234 (Megatron-Bridge's
_sft_common_vlm / _peft_common_vlm), and nothing frozen: the vision tower trains too (freeze_vision_model
false, as published)."""

from __future__ import annotations

from bridge.models.mistral3 import presets
from recipes.composition import Row, register, vlm_finetune_row
from recipes.gpu_settings import COMMON, NATIVE_CROSS_ENTROPY

MINISTRAL3 = {**COMMON, **NATIVE_CROSS_ENTROPY}
MODELS = {
    "ministral3_3b": ("Ministral 3 3B (vision-language)", presets.ministral3_3b_instruct),
    "ministral3_8b": ("Ministral 3 8B (vision-language)", presets.ministral3_8b_instruct),
    "ministral3_14b": ("Ministral 3 14B (vision-language)", presets.ministral3_14b_instruct),
}
RUN = dict(
    data_kind="vlm",
    packed=False,
    seq_length=4096,
    train_iters=50,
    global_batch_size=32,
    micro_batch_size=1,
    lr_warmup_iters=10,
    lr_decay_iters=50,
    adam_beta2=0.95,
    eval_interval=5,
    save_interval=50,
    use_distributed_optimizer=True,
)
LR = {"sft": dict(lr=5e-6, min_lr=5e-7), "peft": dict(lr=2e-4, min_lr=2e-5)}


def _row(key: str, kind: str, gpus: int, layout: dict) -> Row:
    title, preset = MODELS[key]
    run = {**RUN, **LR[kind]}
    return vlm_finetune_row(
        "mistral3", title, preset, kind, gpus, layout, key=key, run=run, settings=MINISTRAL3
    )


ROWS = (
    _row("ministral3_3b", "sft", 1, {}),
    _row("ministral3_8b", "sft", 2, dict(tp=2)),
    _row("ministral3_14b", "sft", 4, dict(tp=4)),
    _row("ministral3_3b", "peft", 1, {}),
    _row("ministral3_8b", "peft", 1, {}),
    _row("ministral3_14b", "peft", 2, dict(tp=2)),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
ministral3_3b_sft_1gpu_h100_bf16_config = _functions["ministral3_3b_sft_1gpu_h100_bf16_config"]
ministral3_3b_sft_config = ministral3_3b_sft_1gpu_h100_bf16_config
ministral3_8b_sft_2gpu_h100_bf16_config = _functions["ministral3_8b_sft_2gpu_h100_bf16_config"]
ministral3_8b_sft_config = ministral3_8b_sft_2gpu_h100_bf16_config
ministral3_14b_sft_4gpu_h100_bf16_config = _functions["ministral3_14b_sft_4gpu_h100_bf16_config"]
ministral3_14b_sft_config = ministral3_14b_sft_4gpu_h100_bf16_config
ministral3_3b_peft_1gpu_h100_bf16_config = _functions["ministral3_3b_peft_1gpu_h100_bf16_config"]
ministral3_3b_peft_config = ministral3_3b_peft_1gpu_h100_bf16_config
ministral3_8b_peft_1gpu_h100_bf16_config = _functions["ministral3_8b_peft_1gpu_h100_bf16_config"]
ministral3_8b_peft_config = ministral3_8b_peft_1gpu_h100_bf16_config
ministral3_14b_peft_2gpu_h100_bf16_config = _functions["ministral3_14b_peft_2gpu_h100_bf16_config"]
ministral3_14b_peft_config = ministral3_14b_peft_2gpu_h100_bf16_config
# fmt: on
