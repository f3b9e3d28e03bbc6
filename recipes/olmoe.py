"""OLMoE (1B active / 7B) recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/olmoe/h100/olmoe_7b.py), one row per published recipe, composed by recipes.composition.

Pretraining: 4096-token sequences, global batch 2048 of micro batches of 1, 500,000 iterations (2000
warm-up, decay over the run), evaluation and a checkpoint every 2000. Finetuning: 4096-token packed rows,
Megatron-Bridge's finetuning base (global batch 128, 1000 iterations) with beta2 0.95, decay over 1000
iterations, evaluation and a checkpoint every 50. All recompute the core attention (selective) and collect
garbage every 5 iterations.
"""

from __future__ import annotations

from bridge.models.olmoe.presets import olmoe_1b_7b
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, MOE_KERNELS, NATIVE_CROSS_ENTROPY
from recipes.runs import EXPERT_LORA_NOTE, FINETUNE_COMMON

# Megatron-Bridge's OLMoE recipes: grouped GEMM, fused permutation, native fused cross-entropy
OLMOE = {**COMMON, **MOE_KERNELS, **NATIVE_CROSS_ENTROPY}
PRETRAIN_RUN = dict(
    global_batch_size=2048,
    micro_batch_size=1,
    train_iters=500_000,
    lr_warmup_iters=2000,
    lr_decay_iters=500_000,
    eval_interval=2000,
    save_interval=2000,
)
FINETUNE_RUN = {
    **FINETUNE_COMMON,
    "seq_length": 4096,
    "adam_beta2": 0.95,
    "lr_decay_iters": 1000,
    "eval_interval": 50,
    "save_interval": 50,
}
SELECTIVE_RECOMPUTE = dict(recompute_granularity="selective")
FREQUENT_GC = {"train.manual_gc_interval": 5}


def _row(kind: str, gpus: int, layout: dict, run: dict, **more) -> Row:
    return Row(
        name=f"olmoe_7b_{kind}_{gpus}gpu_h100_bf16_config",
        family="olmoe",
        kind=kind,
        title="OLMoE 1B-7B",
        preset=olmoe_1b_7b,
        gpus=gpus,
        layout=layout,
        run=run,
        settings=OLMOE,
        model=SELECTIVE_RECOMPUTE,
        config=FREQUENT_GC,
        aliases=(f"olmoe_7b_{kind}_config",),
        **more,
    )


ROWS = (
    _row("pretrain", 8, dict(ep=8), PRETRAIN_RUN),
    _row("sft", 8, dict(ep=8), FINETUNE_RUN),
    _row(
        "peft",
        1,
        {},
        FINETUNE_RUN,
        peft=dict(target_modules=["linear_qkv", "linear_proj"]),  # every OLMoE MLP is the experts
        note=EXPERT_LORA_NOTE,
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
olmoe_7b_pretrain_8gpu_h100_bf16_config = _functions["olmoe_7b_pretrain_8gpu_h100_bf16_config"]
olmoe_7b_pretrain_config = olmoe_7b_pretrain_8gpu_h100_bf16_config
olmoe_7b_sft_8gpu_h100_bf16_config = _functions["olmoe_7b_sft_8gpu_h100_bf16_config"]
olmoe_7b_sft_config = olmoe_7b_sft_8gpu_h100_bf16_config
olmoe_7b_peft_1gpu_h100_bf16_config = _functions["olmoe_7b_peft_1gpu_h100_bf16_config"]
olmoe_7b_peft_config = olmoe_7b_peft_1gpu_h100_bf16_config
# fmt: on
