"""Qwen3-MoE recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/qwen/h100/qwen3_moe.py), one row per published recipe, composed by recipes.composition.

Qwen3-235B-A22B's layouts (PP16, PP4) count the embedding and the loss as pipeline layers: 94 + 2 layers
split evenly, the first and the last stage one decoder layer short (bridge.parallel.stages)."""

from __future__ import annotations

from bridge.models.qwen3_moe.presets import qwen3_30b_a3b, qwen3_235b_a22b
from recipes.composition import Row, register, variant
from recipes.gpu_settings import FLEX_DISPATCHER, MOE_KERNELS
from recipes.qwen3 import ATTENTION_LORA, QWEN3, QWEN3_8B_FINETUNE
from recipes.runs import BENCHMARK, EMBEDDING_AND_LOSS_IN_SPLIT, FULL_RECOMPUTE

# Qwen3's settings, grouped-GEMM experts and DeepEP's flex dispatcher (Megatron-Bridge's Qwen3-MoE recipes)
QWEN3_MOE = {**QWEN3, **MOE_KERNELS, **FLEX_DISPATCHER}

FINETUNE_RUN = {**QWEN3_8B_FINETUNE, "seq_length": 2048, "eval_interval": 50}


MODELS = {
    "qwen3_30b_a3b": ("Qwen3-30B-A3B", qwen3_30b_a3b),
    "qwen3_235b_a22b": ("Qwen3-235B-A22B", qwen3_235b_a22b),
}


def _row(kind: str, gpus: int, layout: dict, key: str = "qwen3_30b_a3b", **more) -> Row:
    title, preset = MODELS[key]
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family="qwen3_moe",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        settings=QWEN3_MOE,
        **more,
    )


PRETRAIN = _row(
    "pretrain",
    8,
    dict(tp=4, pp=2, ep=4, sp=True),
    model=FULL_RECOMPUTE,
)
SFT = _row("sft", 8, dict(tp=4, pp=2, ep=4, sp=True), run=FINETUNE_RUN)

BENCHMARK_16GPU = variant(
    PRETRAIN,
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
    gpus=16,
    layout=dict(tp=1, pp=1, ep=16, sp=False),
    run=BENCHMARK,
    model=dict(recompute_granularity=None, recompute_method=None, recompute_num_layers=None),
    aliases=("qwen3_30b_a3b_pretrain_config",),  # Megatron-Bridge's alias names this benchmark run
)


ROWS = (
    PRETRAIN,
    BENCHMARK_16GPU,
    # Megatron-Bridge's GB200 functional check (recipes/qwen/gb200/qwen3_moe.py): the benchmark on 8 GPUs
    variant(
        BENCHMARK_16GPU,
        "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config",
        gpus=8,
        layout=dict(ep=8),
        run=dict(global_batch_size=512, micro_batch_size=4, precision="bf16_with_mxfp8_mixed"),
        config={"validation.eval_interval": 0},
        note="MXFP8 on Blackwell; Megatron-Bridge also uses the HybridEP dispatcher, expert-parallel "
        "communication overlap, TE's op fuser and FP8 attention, which bridge has no settings for",
    ),
    SFT,
    variant(
        SFT,
        "qwen3_30b_a3b_sft_16gpu_h100_bf16_config",
        aliases=("qwen3_30b_a3b_sft_config",),
        gpus=16,
        layout=dict(tp=1, pp=1, ep=16, sp=False),
    ),
    _row(
        "peft",
        4,
        dict(tp=4, ep=4, sp=True),
        run=FINETUNE_RUN,
        peft=ATTENTION_LORA,
        aliases=("qwen3_30b_a3b_peft_config",),
    ),
    _row(
        "pretrain",
        256,
        dict(tp=4, pp=16, cp=2, ep=8, sp=True),
        "qwen3_235b_a22b",
        run=dict(micro_batch_size=1),
        model=EMBEDDING_AND_LOSS_IN_SPLIT,
        aliases=("qwen3_235b_a22b_pretrain_config",),
    ),
    _row(
        "sft",
        64,
        dict(tp=4, pp=16, ep=4, sp=True),
        "qwen3_235b_a22b",
        run=FINETUNE_RUN,
        model=EMBEDDING_AND_LOSS_IN_SPLIT,
        aliases=("qwen3_235b_a22b_sft_config",),
    ),
    _row(
        "peft",
        16,
        dict(tp=4, pp=4, ep=4, sp=True),
        "qwen3_235b_a22b",
        run=FINETUNE_RUN,
        model=EMBEDDING_AND_LOSS_IN_SPLIT,
        peft=ATTENTION_LORA,
        aliases=("qwen3_235b_a22b_peft_config",),
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config = _functions["qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config"]
qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config = _functions["qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"]
qwen3_30b_a3b_pretrain_config = qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config
qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config = _functions["qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config"]
qwen3_30b_a3b_sft_8gpu_h100_bf16_config = _functions["qwen3_30b_a3b_sft_8gpu_h100_bf16_config"]
qwen3_30b_a3b_sft_16gpu_h100_bf16_config = _functions["qwen3_30b_a3b_sft_16gpu_h100_bf16_config"]
qwen3_30b_a3b_sft_config = qwen3_30b_a3b_sft_16gpu_h100_bf16_config
qwen3_30b_a3b_peft_4gpu_h100_bf16_config = _functions["qwen3_30b_a3b_peft_4gpu_h100_bf16_config"]
qwen3_30b_a3b_peft_config = qwen3_30b_a3b_peft_4gpu_h100_bf16_config
qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config = _functions["qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"]
qwen3_235b_a22b_pretrain_config = qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config
qwen3_235b_a22b_sft_64gpu_h100_bf16_config = _functions["qwen3_235b_a22b_sft_64gpu_h100_bf16_config"]
qwen3_235b_a22b_sft_config = qwen3_235b_a22b_sft_64gpu_h100_bf16_config
qwen3_235b_a22b_peft_16gpu_h100_bf16_config = _functions["qwen3_235b_a22b_peft_16gpu_h100_bf16_config"]
qwen3_235b_a22b_peft_config = qwen3_235b_a22b_peft_16gpu_h100_bf16_config
# fmt: on
