"""EXAONE 4.0 1.2B recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/exaone/h100/exaone4.py), one row per published recipe, composed by recipes.composition.

Pretraining is the base run (4096 tokens, global batch 32 of micro batches of 2, 300,000 iterations);
finetuning is Megatron-Bridge's finetuning base (2048-token packed rows, global batch 128, 1000
iterations, evaluation and a checkpoint every 100); LoRA the default adapter on all four linear layers.
"""

from __future__ import annotations

from bridge.models.exaone4.presets import exaone4_1p2b
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, TE_CROSS_ENTROPY
from recipes.runs import FINETUNE_COMMON

# Megatron-Bridge's EXAONE 4 recipes: Transformer Engine's fused cross-entropy
EXAONE4 = {**COMMON, **TE_CROSS_ENTROPY}

ROWS = tuple(
    Row(
        name=f"exaone4_1p2b_{kind}_1gpu_h100_bf16_config",
        family="exaone4",
        kind=kind,
        title="EXAONE 4.0 1.2B",
        preset=exaone4_1p2b,
        gpus=1,
        run={} if kind == "pretrain" else FINETUNE_COMMON,
        settings=EXAONE4,
        aliases=(f"exaone4_1p2b_{kind}_config",),
    )
    for kind in ("pretrain", "sft", "peft")
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
exaone4_1p2b_pretrain_1gpu_h100_bf16_config = _functions["exaone4_1p2b_pretrain_1gpu_h100_bf16_config"]
exaone4_1p2b_pretrain_config = exaone4_1p2b_pretrain_1gpu_h100_bf16_config
exaone4_1p2b_sft_1gpu_h100_bf16_config = _functions["exaone4_1p2b_sft_1gpu_h100_bf16_config"]
exaone4_1p2b_sft_config = exaone4_1p2b_sft_1gpu_h100_bf16_config
exaone4_1p2b_peft_1gpu_h100_bf16_config = _functions["exaone4_1p2b_peft_1gpu_h100_bf16_config"]
exaone4_1p2b_peft_config = exaone4_1p2b_peft_1gpu_h100_bf16_config
# fmt: on
