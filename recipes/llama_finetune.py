"""Llama 3 / 3.1 / 3.2 finetuning recipes, full SFT, LoRA and DPO: Megatron-Bridge's H100 table
(recipes/llama/h100/llama3.py), one row per published recipe, composed by recipes.composition.

All train 4096-token packed rows, global batch 8, 1000 iterations (the finetuning base)."""

from __future__ import annotations

from bridge.models.llama import presets
from recipes.composition import Row, register, variant
from recipes.llama import LLAMA, LLAMA_70B
from recipes.runs import EMBEDDING_AND_LOSS_IN_SPLIT

MODELS = {
    "llama32_1b": ("Llama 3.2 1B", presets.llama32_1b),
    "llama32_3b": ("Llama 3.2 3B", presets.llama32_3b),
    "llama3_8b": ("Llama 3 8B", presets.llama3_8b),
    "llama31_8b": ("Llama 3.1 8B", presets.llama31_8b),
    "llama3_70b": ("Llama 3 70B", presets.llama3_70b),
    "llama31_70b": ("Llama 3.1 70B", presets.llama31_70b),
    "llama31_405b": ("Llama 3.1 405B", presets.llama31_405b),
}


DISTILL = {"distill.enabled": True}
DPO_RUN = {"data_kind": "preference", "packed": False, "lr": 1e-6}


def _row(key: str, kind: str, gpus: int, layout: dict, run: dict | None = None, **more) -> Row:
    title, preset = MODELS[key]
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family="llama",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run={"seq_length": 4096, **(run or {})},
        settings=more.pop("settings", LLAMA),
        aliases=(f"{key}_{kind}_config",),
        **more,
    )


ROWS = (
    _row("llama32_1b", "sft", 1, {}),
    _row("llama32_3b", "sft", 1, {}),
    _row("llama3_8b", "sft", 2, dict(tp=2)),
    _row("llama31_8b", "sft", 2, dict(tp=2)),
    _row("llama3_70b", "sft", 32, dict(tp=8, pp=4)),
    _row("llama31_70b", "sft", 32, dict(tp=8, pp=4)),
    _row("llama32_1b", "peft", 1, {}),
    _row("llama32_3b", "peft", 1, {}),
    _row("llama3_8b", "peft", 1, {}, peft=dict(dim=8, alpha=16.0)),
    _row("llama31_8b", "peft", 1, {}, peft=dict(dim=8, alpha=16.0)),
    _row("llama3_70b", "peft", 8, dict(tp=8), peft=dict(dim=16, alpha=32.0)),
    _row("llama31_70b", "peft", 8, dict(tp=8), peft=dict(dim=16, alpha=32.0)),
    # DPO on {"prompt", "chosen", "rejected"} pairs (a pair per micro batch, rows unpacked): TRL's
    # DPOConfig defaults (lr 1e-6, beta 0.1: the dpo section's); Megatron-Bridge publishes no DPO recipe,
    # so the names are bridge's own, in its `<model>_<kind>_config` form
    *(
        variant(_row(key, "dpo", gpus, layout, DPO_RUN), f"{key}_dpo_config")
        for key, gpus, layout in (
            ("llama32_1b", 1, {}),
            ("llama3_8b", 2, dict(tp=2)),
            ("llama31_8b", 2, dict(tp=2)),
        )
    ),
    # Distillation into the 1B / 8B students (Megatron-Bridge's example distils Llama 3.2 3B into 1B): the
    # SFT base with rows unpacked, the KD loss alone at temperature 1 (ModelOptDistillConfig's defaults);
    # the teacher is the run's distill.teacher
    *(
        variant(
            _row(key, "distill", gpus, layout, {"packed": False}), f"{key}_distill_config", config=DISTILL
        )
        for key, gpus, layout in (("llama32_1b", 1, {}), ("llama31_8b", 2, dict(tp=2)))
    ),
    # 405B: 2048-token rows, the embedding and the loss counted as pipeline layers (126 + 2 over 16 / 64 stages)
    _row(
        "llama31_405b",
        "sft",
        128,
        dict(tp=8, pp=16, sp=True),
        dict(seq_length=2048, global_batch_size=16),
        settings=LLAMA_70B,
        model=EMBEDDING_AND_LOSS_IN_SPLIT,
        note="TP communication overlap with Transformer Engine's default userbuffers; Megatron-Bridge also "
        "defers the embedding's weight gradients (defer_embedding_wgrad_compute), which bridge has no field for",
    ),
    _row(
        "llama31_405b",
        "peft",
        32,
        dict(tp=4, pp=8, vpp=8, sp=True),
        dict(seq_length=2048, global_batch_size=32),
        model=EMBEDDING_AND_LOSS_IN_SPLIT,
        peft=dict(dim=16, alpha=32.0, target_modules=["linear_qkv"]),
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
llama32_1b_sft_1gpu_h100_bf16_config = _functions["llama32_1b_sft_1gpu_h100_bf16_config"]
llama32_1b_sft_config = llama32_1b_sft_1gpu_h100_bf16_config
llama32_3b_sft_1gpu_h100_bf16_config = _functions["llama32_3b_sft_1gpu_h100_bf16_config"]
llama32_3b_sft_config = llama32_3b_sft_1gpu_h100_bf16_config
llama3_8b_sft_2gpu_h100_bf16_config = _functions["llama3_8b_sft_2gpu_h100_bf16_config"]
llama3_8b_sft_config = llama3_8b_sft_2gpu_h100_bf16_config
llama31_8b_sft_2gpu_h100_bf16_config = _functions["llama31_8b_sft_2gpu_h100_bf16_config"]
llama31_8b_sft_config = llama31_8b_sft_2gpu_h100_bf16_config
llama3_70b_sft_32gpu_h100_bf16_config = _functions["llama3_70b_sft_32gpu_h100_bf16_config"]
llama3_70b_sft_config = llama3_70b_sft_32gpu_h100_bf16_config
llama31_70b_sft_32gpu_h100_bf16_config = _functions["llama31_70b_sft_32gpu_h100_bf16_config"]
llama31_70b_sft_config = llama31_70b_sft_32gpu_h100_bf16_config
llama32_1b_peft_1gpu_h100_bf16_config = _functions["llama32_1b_peft_1gpu_h100_bf16_config"]
llama32_1b_peft_config = llama32_1b_peft_1gpu_h100_bf16_config
llama32_3b_peft_1gpu_h100_bf16_config = _functions["llama32_3b_peft_1gpu_h100_bf16_config"]
llama32_3b_peft_config = llama32_3b_peft_1gpu_h100_bf16_config
llama3_8b_peft_1gpu_h100_bf16_config = _functions["llama3_8b_peft_1gpu_h100_bf16_config"]
llama3_8b_peft_config = llama3_8b_peft_1gpu_h100_bf16_config
llama31_8b_peft_1gpu_h100_bf16_config = _functions["llama31_8b_peft_1gpu_h100_bf16_config"]
llama31_8b_peft_config = llama31_8b_peft_1gpu_h100_bf16_config
llama3_70b_peft_8gpu_h100_bf16_config = _functions["llama3_70b_peft_8gpu_h100_bf16_config"]
llama3_70b_peft_config = llama3_70b_peft_8gpu_h100_bf16_config
llama31_70b_peft_8gpu_h100_bf16_config = _functions["llama31_70b_peft_8gpu_h100_bf16_config"]
llama31_70b_peft_config = llama31_70b_peft_8gpu_h100_bf16_config
llama32_1b_dpo_config = _functions["llama32_1b_dpo_config"]
llama3_8b_dpo_config = _functions["llama3_8b_dpo_config"]
llama31_8b_dpo_config = _functions["llama31_8b_dpo_config"]
llama32_1b_distill_config = _functions["llama32_1b_distill_config"]
llama31_8b_distill_config = _functions["llama31_8b_distill_config"]
llama31_405b_sft_128gpu_h100_bf16_config = _functions["llama31_405b_sft_128gpu_h100_bf16_config"]
llama31_405b_sft_config = llama31_405b_sft_128gpu_h100_bf16_config
llama31_405b_peft_32gpu_h100_bf16_config = _functions["llama31_405b_peft_32gpu_h100_bf16_config"]
llama31_405b_peft_config = llama31_405b_peft_32gpu_h100_bf16_config
# fmt: on
