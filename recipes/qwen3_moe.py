"""Qwen3-MoE recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/qwen/h100/qwen3_moe.py), one row per published recipe, composed by recipes.composition.

Not here yet: Qwen3-235B-A22B (94 layers; its published layouts, PP16 / PP4, count the embedding and the
loss as pipeline layers, which bridge's layout rules do not model)."""

from __future__ import annotations

from bridge.models.qwen3_moe.presets import qwen3_30b_a3b
from recipes.composition import Row, register, variant
from recipes.performance import QWEN3_MOE
from recipes.qwen3 import ATTENTION_LORA, QWEN3_8B_FINETUNE
from recipes.runs import BENCHMARK, FULL_RECOMPUTE

FINETUNE_RUN = {**QWEN3_8B_FINETUNE, "seq_length": 2048, "eval_interval": 50}


def _row(kind: str, gpus: int, layout: dict, **more) -> Row:
    return Row(
        name=f"qwen3_30b_a3b_{kind}_{gpus}gpu_h100_bf16_config",
        family="qwen3_moe",
        kind=kind,
        title="Qwen3-30B-A3B",
        preset=qwen3_30b_a3b,
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
    aliases=("qwen3_30b_a3b_pretrain_config",),
)
SFT = _row("sft", 8, dict(tp=4, pp=2, ep=4, sp=True), run=FINETUNE_RUN)

ROWS = (
    PRETRAIN,
    variant(
        PRETRAIN,
        "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
        gpus=16,
        layout=dict(tp=1, pp=1, ep=16, sp=False),
        run=BENCHMARK,
        model=dict(recompute_granularity=None, recompute_method=None, recompute_num_layers=None),
        note="Megatron-Bridge's benchmark run, which its alias qwen3_30b_a3b_pretrain_config names; here "
        "the alias keeps the 8-GPU recipe",
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
)

RECIPES, _functions = register(ROWS, __name__)
globals().update(_functions)
