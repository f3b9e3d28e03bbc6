"""K-EXAONE-236B-A23B recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/exaone/h100/exaone_moe.py), one row per published recipe, composed by recipes.composition.

Pretraining on 64 GPUs at TP4 PP8 EP8 with sequence parallelism, 4096-token sequences, micro batch 1,
full recompute; SFT at the same layout and LoRA on 16 GPUs at TP4 PP4 EP4 (adapters of rank 8, alpha 16 on
the attention, as published), 2048-token rows, Megatron-Bridge's short finetuning run (100 iterations of
global batch 32, 10 warm-up, beta2 0.95, evaluation every 50, a checkpoint every 100). Megatron-Bridge's
K-EXAONE 2.0 (750B-A37B) recipes are left out: no preset, its checkpoint's config is not published.
Megatron-Bridge's settings bridge has no field for are left out: the HybridEP SM count and router fusion
(GPU kernels), the fp32 optimizer-state switches (bridge keeps Adam's state in fp32 anyway).
"""

from __future__ import annotations

from bridge.models.exaone_moe.presets import k_exaone_236b_a23b
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, FLEX_DISPATCHER, MOE_KERNELS, TE_CROSS_ENTROPY
from recipes.runs import FULL_RECOMPUTE, SHORT_FINETUNE

# Megatron-Bridge's K-EXAONE recipes: the DeepEP flex dispatcher, grouped GEMM, fused permutation, TE
# cross-entropy
EXAONE_MOE = {**COMMON, **MOE_KERNELS, **FLEX_DISPATCHER, **TE_CROSS_ENTROPY}
FINETUNE_RUN = dict(SHORT_FINETUNE, seq_length=2048, global_batch_size=32, micro_batch_size=1)
ATTENTION_LORA = dict(dim=8, alpha=16.0, target_modules=["linear_qkv", "linear_proj"])


def _row(kind: str, gpus: int, layout: dict, **more) -> Row:
    return Row(
        name=f"exaone_moe_236b_a23b_{kind}_{gpus}gpu_h100_bf16_config",
        family="exaone_moe",
        kind=kind,
        title="K-EXAONE-236B-A23B",
        preset=k_exaone_236b_a23b,
        gpus=gpus,
        layout=layout,
        settings=EXAONE_MOE,
        aliases=(f"exaone_moe_236b_a23b_{kind}_config",),
        **more,
    )


ROWS = (
    _row(
        "pretrain",
        64,
        dict(tp=4, pp=8, ep=8, sp=True),
        run=dict(seq_length=4096, micro_batch_size=1),
        model=FULL_RECOMPUTE,
    ),
    _row("sft", 64, dict(tp=4, pp=8, ep=8, sp=True), run=FINETUNE_RUN),
    _row("peft", 16, dict(tp=4, pp=4, ep=4, sp=True), run=FINETUNE_RUN, peft=ATTENTION_LORA),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
exaone_moe_236b_a23b_pretrain_64gpu_h100_bf16_config = _functions["exaone_moe_236b_a23b_pretrain_64gpu_h100_bf16_config"]
exaone_moe_236b_a23b_pretrain_config = exaone_moe_236b_a23b_pretrain_64gpu_h100_bf16_config
exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config = _functions["exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config"]
exaone_moe_236b_a23b_sft_config = exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config
exaone_moe_236b_a23b_peft_16gpu_h100_bf16_config = _functions["exaone_moe_236b_a23b_peft_16gpu_h100_bf16_config"]
exaone_moe_236b_a23b_peft_config = exaone_moe_236b_a23b_peft_16gpu_h100_bf16_config
# fmt: on
