"""Nemotron-H (4B, 8B, 47B, 56B), Nemotron Nano 2 (9B, 12B) and Nemotron 3 Nano (30B-A3B) recipes,
pretraining and full SFT:
Megatron-Bridge's H100 tables (recipes/nemotronh/h100/nemotronh.py and nemotron_nano_v2.py), one row per
published recipe, composed by recipes.composition. The models are hybrids (MambaModelProvider).

Pretraining: 8192-token sequences (Nano 2: the same), global batch 768 of micro batches of 1, 1,168,251
iterations with 2000 warm-up. SFT: Megatron-Bridge's finetuning base with 8192-token packed rows (Nano 2:
2048) and a minimum learning rate of 1e-6. Native fused cross-entropy. Megatron-Bridge's LoRA recipes
adapt the Mamba in/out projections too, which bridge's LoRA does not target yet: not listed.

Nemotron 3 Nano (recipes/nemotronh/{h100,gb200}/nemotron_3_nano.py): 8 GPUs with its 128 experts over EP=8;
pretraining 39,735 iterations at lr 1.6e-3 (min 1.6e-5, 333 warm-up), global batch 1024 of 8192-token
sequences on H100 (512 micro batches of 2 x 4096 tokens on GB200); SFT of 2048-token packed rows with
beta2 0.95. Megatron-Bridge dispatches the tokens with its HybridEP / DeepEP "flex" dispatcher and uses CUDA
graphs; bridge keeps the all-to-all dispatcher (the same tokens, other kernels).
"""

from __future__ import annotations

from bridge.models.nemotron_h.presets import (
    nemotron_3_nano_30b_a3b,
    nemotron_nano_9b_v2,
    nemotron_nano_12b_v2,
    nemotronh_4b,
    nemotronh_8b,
    nemotronh_47b,
    nemotronh_56b,
)
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, NATIVE_CROSS_ENTROPY
from recipes.runs import FINETUNE_COMMON

NEMOTRON_H = {**COMMON, **NATIVE_CROSS_ENTROPY}
PRETRAIN_RUN = dict(
    seq_length=8192, global_batch_size=768, micro_batch_size=1, train_iters=1_168_251, lr_warmup_iters=2000
)
SFT_RUN = {**FINETUNE_COMMON, "seq_length": 8192, "min_lr": 1e-6}
NANO_SFT_RUN = {**SFT_RUN, "seq_length": 2048}

# (size, title, preset, pretrain GPUs and layout, sft GPUs and layout)
_MODELS = (
    ("nemotronh_4b", "Nemotron-H 4B", nemotronh_4b, (1, {}), (1, {})),
    ("nemotronh_8b", "Nemotron-H 8B", nemotronh_8b, (2, dict(tp=2, sp=True)), (2, dict(tp=2, sp=True))),
    ("nemotronh_47b", "Nemotron-H 47B", nemotronh_47b, (8, dict(tp=8, sp=True)), (16, dict(tp=8, pp=2, sp=True))),
    ("nemotronh_56b", "Nemotron-H 56B", nemotronh_56b, (8, dict(tp=8, sp=True)), (8, dict(tp=8, sp=True))),
    ("nemotron_nano_9b_v2", "Nemotron Nano 9B v2", nemotron_nano_9b_v2, (2, dict(tp=2, sp=True)), (2, dict(tp=2, sp=True))),
    ("nemotron_nano_12b_v2", "Nemotron Nano 12B v2", nemotron_nano_12b_v2, (4, dict(tp=4, sp=True)), (4, dict(tp=4, sp=True))),
)  # fmt: skip


def _row(model: str, title: str, preset, kind: str, gpus: int, layout: dict) -> Row:
    run = PRETRAIN_RUN if kind == "pretrain" else NANO_SFT_RUN if "nano" in model else SFT_RUN
    return Row(
        name=f"{model}_{kind}_{gpus}gpu_h100_bf16_config",
        family="nemotron_h",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=run,
        settings=NEMOTRON_H,
        aliases=(f"{model}_{kind}_config",),
    )


# Nemotron 3 Nano: Megatron-Bridge's values (see the module docstring)
NANO3_PRETRAIN_RUN = dict(
    seq_length=8192, global_batch_size=1024, micro_batch_size=1, train_iters=39_735, lr=1.6e-3, min_lr=1.6e-5,
    lr_warmup_iters=333,
)  # fmt: skip
NANO3_SFT_RUN = {**FINETUNE_COMMON, "seq_length": 2048, "adam_beta2": 0.95}
_NANO3_NOTE = "Megatron-Bridge dispatches with HybridEP / DeepEP ('flex'); bridge with all-to-all"


def _nano3(name: str, kind: str, run: dict, aliases: tuple[str, ...] = ()) -> Row:
    return Row(
        name=name,
        family="nemotron_h",
        kind=kind,
        title="Nemotron 3 Nano 30B-A3B",
        preset=nemotron_3_nano_30b_a3b,
        gpus=8,
        layout=dict(ep=8),
        run=run,
        settings=NEMOTRON_H,
        aliases=aliases,
        note=_NANO3_NOTE,
    )


ROWS = tuple(
    _row(model, title, preset, kind, *published)
    for model, title, preset, pretrain, sft in _MODELS
    for kind, published in (("pretrain", pretrain), ("sft", sft))
) + (
    _nano3(
        "nemotron_3_nano_pretrain_8gpu_h100_bf16_config",
        "pretrain",
        NANO3_PRETRAIN_RUN,
        ("nemotron_3_nano_pretrain_config",),
    ),
    _nano3(
        "nemotron_3_nano_pretrain_8gpu_gb200_bf16_config",
        "pretrain",
        {**NANO3_PRETRAIN_RUN, "seq_length": 4096, "global_batch_size": 512, "micro_batch_size": 2},
    ),
    _nano3(
        "nemotron_3_nano_sft_8gpu_h100_bf16_config", "sft", NANO3_SFT_RUN, ("nemotron_3_nano_sft_config",)
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
nemotronh_4b_pretrain_1gpu_h100_bf16_config = _functions["nemotronh_4b_pretrain_1gpu_h100_bf16_config"]
nemotronh_4b_pretrain_config = nemotronh_4b_pretrain_1gpu_h100_bf16_config
nemotronh_4b_sft_1gpu_h100_bf16_config = _functions["nemotronh_4b_sft_1gpu_h100_bf16_config"]
nemotronh_4b_sft_config = nemotronh_4b_sft_1gpu_h100_bf16_config
nemotronh_8b_pretrain_2gpu_h100_bf16_config = _functions["nemotronh_8b_pretrain_2gpu_h100_bf16_config"]
nemotronh_8b_pretrain_config = nemotronh_8b_pretrain_2gpu_h100_bf16_config
nemotronh_8b_sft_2gpu_h100_bf16_config = _functions["nemotronh_8b_sft_2gpu_h100_bf16_config"]
nemotronh_8b_sft_config = nemotronh_8b_sft_2gpu_h100_bf16_config
nemotronh_47b_pretrain_8gpu_h100_bf16_config = _functions["nemotronh_47b_pretrain_8gpu_h100_bf16_config"]
nemotronh_47b_pretrain_config = nemotronh_47b_pretrain_8gpu_h100_bf16_config
nemotronh_47b_sft_16gpu_h100_bf16_config = _functions["nemotronh_47b_sft_16gpu_h100_bf16_config"]
nemotronh_47b_sft_config = nemotronh_47b_sft_16gpu_h100_bf16_config
nemotronh_56b_pretrain_8gpu_h100_bf16_config = _functions["nemotronh_56b_pretrain_8gpu_h100_bf16_config"]
nemotronh_56b_pretrain_config = nemotronh_56b_pretrain_8gpu_h100_bf16_config
nemotronh_56b_sft_8gpu_h100_bf16_config = _functions["nemotronh_56b_sft_8gpu_h100_bf16_config"]
nemotronh_56b_sft_config = nemotronh_56b_sft_8gpu_h100_bf16_config
nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config = _functions["nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config"]
nemotron_nano_9b_v2_pretrain_config = nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config
nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config = _functions["nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config"]
nemotron_nano_9b_v2_sft_config = nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config
nemotron_nano_12b_v2_pretrain_4gpu_h100_bf16_config = _functions["nemotron_nano_12b_v2_pretrain_4gpu_h100_bf16_config"]
nemotron_nano_12b_v2_pretrain_config = nemotron_nano_12b_v2_pretrain_4gpu_h100_bf16_config
nemotron_nano_12b_v2_sft_4gpu_h100_bf16_config = _functions["nemotron_nano_12b_v2_sft_4gpu_h100_bf16_config"]
nemotron_nano_12b_v2_sft_config = nemotron_nano_12b_v2_sft_4gpu_h100_bf16_config
nemotron_3_nano_pretrain_8gpu_h100_bf16_config = _functions["nemotron_3_nano_pretrain_8gpu_h100_bf16_config"]
nemotron_3_nano_pretrain_config = nemotron_3_nano_pretrain_8gpu_h100_bf16_config
nemotron_3_nano_pretrain_8gpu_gb200_bf16_config = _functions["nemotron_3_nano_pretrain_8gpu_gb200_bf16_config"]
nemotron_3_nano_sft_8gpu_h100_bf16_config = _functions["nemotron_3_nano_sft_8gpu_h100_bf16_config"]
nemotron_3_nano_sft_config = nemotron_3_nano_sft_8gpu_h100_bf16_config
# fmt: on
