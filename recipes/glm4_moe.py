"""GLM-4.5 (355B) and GLM-4.5-Air (106B) recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100
table (recipes/glm/h100/glm45.py), one row per published recipe, composed by recipes.composition.

Pretraining: 4096-token sequences, global batch 2048 of micro batches of 1, 1M iterations, Adam 1e-4 ->
1e-5 after 2000 warm-up, selective recompute; the first and the last pipeline stage hold 10 (355B, PP8) or
11 (Air, PP4) layers, the others 12. Finetuning: 2048-token rows, not packed (Megatron-Bridge: packing is
not supported for GLM-4.5), global batch 128, 1000 iterations, beta2 0.95, evaluation and a checkpoint
every 50. Megatron-Bridge's multi-token-prediction layer is left out (the presets' mtp_num_layers is None;
model.mtp_num_layers=1 trains it: docs/conversion.md).
"""

from __future__ import annotations

from bridge.models.glm4_moe import presets
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, MOE_KERNELS, NATIVE_CROSS_ENTROPY

# Megatron-Bridge's GLM-4.5 recipes: grouped GEMM, fused permutation, native fused cross-entropy
GLM45 = {**COMMON, **MOE_KERNELS, **NATIVE_CROSS_ENTROPY}
PRETRAIN_RUN = dict(
    global_batch_size=2048,
    micro_batch_size=1,
    train_iters=1_000_000,
    lr=1e-4,
    min_lr=1e-5,
    lr_warmup_iters=2000,
    eval_interval=2000,
)
FINETUNE_RUN = dict(seq_length=2048, packed=False, global_batch_size=128, adam_beta2=0.95, eval_interval=50)
# Megatron-Bridge's default LoRA also adapts linear_fc1 / linear_fc2, in the MoE layers the experts, and
# bridge's expert adapters leave out shared experts, which GLM-4.5's layers hold (bridge.config.finetune_rules)
ATTENTION_LORA = dict(target_modules=["linear_qkv", "linear_proj"])
LORA_NOTE = (
    "LoRA on the attention only: Megatron-Bridge's also adapts the MLPs and experts, and bridge's expert "
    "adapters do not cover GLM-4.5's shared experts"
)

# model -> (title, preset, first / last stage layers at the pretraining and SFT layout)
MODELS = {
    "glm45_355b": ("GLM-4.5", presets.glm45, 10),
    "glm45_air_106b": ("GLM-4.5-Air", presets.glm45_air, 11),
}


def _row(key: str, kind: str, gpus: int, layout: dict, **more) -> Row:
    title, preset, end_layers = MODELS[key]
    pretraining = kind == "pretrain"
    model = dict(recompute_granularity="selective") if pretraining else {}
    if kind != "peft":
        model |= dict(
            num_layers_in_first_pipeline_stage=end_layers, num_layers_in_last_pipeline_stage=end_layers
        )
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family="glm4_moe",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=PRETRAIN_RUN if pretraining else FINETUNE_RUN,
        settings=GLM45,
        model=model,
        aliases=(f"{key}_{kind}_config",),
        **more,
    )


SP_AT_TP1 = (
    "Megatron-Bridge also sets sequence parallelism, which Megatron drops at TP1 and bridge refuses: off"
)
SP_FOR_MOE = "published without sequence parallelism, which Megatron-Core requires for MoE at TP2: on"

ROWS = (
    _row("glm45_355b", "pretrain", 128, dict(tp=2, pp=8, ep=16, sp=True)),
    _row("glm45_air_106b", "pretrain", 32, dict(pp=4, ep=8), note=SP_AT_TP1),
    _row("glm45_355b", "sft", 128, dict(tp=2, pp=8, ep=16, sp=True), note=SP_FOR_MOE),
    _row("glm45_air_106b", "sft", 32, dict(pp=4, ep=8)),
    _row(
        "glm45_355b",
        "peft",
        16,
        dict(tp=2, pp=4, ep=4, sp=True),
        peft=ATTENTION_LORA,
        note=f"{SP_FOR_MOE}; {LORA_NOTE}",
    ),
    _row("glm45_air_106b", "peft", 8, dict(pp=2, ep=4), peft=ATTENTION_LORA, note=LORA_NOTE),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
glm45_355b_pretrain_128gpu_h100_bf16_config = _functions["glm45_355b_pretrain_128gpu_h100_bf16_config"]
glm45_355b_pretrain_config = glm45_355b_pretrain_128gpu_h100_bf16_config
glm45_air_106b_pretrain_32gpu_h100_bf16_config = _functions["glm45_air_106b_pretrain_32gpu_h100_bf16_config"]
glm45_air_106b_pretrain_config = glm45_air_106b_pretrain_32gpu_h100_bf16_config
glm45_355b_sft_128gpu_h100_bf16_config = _functions["glm45_355b_sft_128gpu_h100_bf16_config"]
glm45_355b_sft_config = glm45_355b_sft_128gpu_h100_bf16_config
glm45_air_106b_sft_32gpu_h100_bf16_config = _functions["glm45_air_106b_sft_32gpu_h100_bf16_config"]
glm45_air_106b_sft_config = glm45_air_106b_sft_32gpu_h100_bf16_config
glm45_355b_peft_16gpu_h100_bf16_config = _functions["glm45_355b_peft_16gpu_h100_bf16_config"]
glm45_355b_peft_config = glm45_355b_peft_16gpu_h100_bf16_config
glm45_air_106b_peft_8gpu_h100_bf16_config = _functions["glm45_air_106b_peft_8gpu_h100_bf16_config"]
glm45_air_106b_peft_config = glm45_air_106b_peft_8gpu_h100_bf16_config
# fmt: on
