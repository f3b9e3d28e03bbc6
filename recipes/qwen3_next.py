"""Qwen3-Next recipes (Megatron-Bridge's recipes/qwen/h100/qwen3_next.py): pretraining on 32 H100s
(TP1 PP4 EP8, selective recompute of the norms and MoE) and full SFT on 16 (TP1 PP2 EP8, packed
sequences off, lr 5e-6 constant). Megatron-Bridge's PEFT recipe refuses to run (full SFT only), so
there is none here."""

from __future__ import annotations

from bridge.models.qwen3_next.presets import qwen3_next_80b_a3b
from recipes.composition import Row, register
from recipes.qwen3_moe import QWEN3_MOE

SELECTIVE_RECOMPUTE = dict(
    recompute_granularity="selective",
    recompute_modules=["layernorm", "moe", "moe_act"],
    recompute_method=None,
    recompute_num_layers=None,
)
MTP_NOTE = (
    "Megatron-Bridge adds one multi-token-prediction layer (mtp_num_layers=1); bridge's recipe leaves it off "
    "(model.mtp_num_layers=1 trains it, the checkpoint's mtp.* layer when finetuning: docs/conversion.md)"
)


def _row(kind: str, gpus: int, layout: dict, **more) -> Row:
    return Row(
        name=f"qwen3_next_80b_a3b_{kind}_{gpus}gpu_h100_bf16_config",
        family="qwen3_next",
        kind=kind,
        title="Qwen3-Next-80B-A3B",
        preset=qwen3_next_80b_a3b,
        gpus=gpus,
        layout=layout,
        settings=QWEN3_MOE,
        model=SELECTIVE_RECOMPUTE,
        **more,
    )


ROWS = (
    _row(
        "pretrain",
        32,
        dict(tp=1, pp=4, ep=8, sp=False),
        run=dict(seq_length=4096),
        note=MTP_NOTE,
        aliases=("qwen3_next_80b_a3b_pretrain_config",),
    ),
    _row(
        "sft",
        16,
        dict(tp=1, pp=2, ep=8, sp=False),
        run=dict(
            seq_length=2048,
            packed=False,
            train_iters=1000,
            global_batch_size=64,
            micro_batch_size=1,
            lr=5e-6,
            min_lr=5e-6,
            lr_warmup_iters=50,
            use_distributed_optimizer=True,
        ),  # fmt: skip
        aliases=("qwen3_next_80b_a3b_sft_config",),
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config = _functions["qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config"]
qwen3_next_80b_a3b_pretrain_config = qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config
qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config = _functions["qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config"]
qwen3_next_80b_a3b_sft_config = qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config
# fmt: on
