"""GPT-OSS 20B / 120B recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/gpt_oss/h100/gpt_oss.py), one row per published recipe, composed by recipes.composition.

Pretraining: 4096-token sequences, global batch 512 of micro batches of 1, 1M iterations, 2000 warm-up,
the loss divided by the tokens of the whole batch (calculate_per_token_loss, so the DP reduction must not
pre-average). Finetuning: 2048-token packed rows, global batch 128, 1000 iterations, evaluation every 50,
a checkpoint every 250. FP8 variants pad the router's token counts for FP8 GEMMs; MXFP8 needs Blackwell
(the plan refuses it on H100).
"""

from __future__ import annotations

from bridge.models.gpt_oss import presets
from recipes.composition import Row, register, variant
from recipes.gpu_settings import COMMON, MOE_KERNELS, NATIVE_CROSS_ENTROPY
from recipes.runs import EXPERT_LORA_NOTE

# Megatron-Bridge's GPT-OSS recipes: grouped GEMM, fused permutation, native fused cross-entropy
GPT_OSS = {**COMMON, **MOE_KERNELS, **NATIVE_CROSS_ENTROPY}
# the loss over all the batch's tokens (CP exchanging all-to-all); Megatron-Core's DDP refuses pre-averaging
# with it
PER_TOKEN_LOSS = dict(calculate_per_token_loss=True, cp_comm_type="a2a")
NO_AVERAGE_IN_COLLECTIVE = {"distributed.average_in_collective": False}
PRETRAIN_RUN = dict(
    global_batch_size=512, micro_batch_size=1, train_iters=1_000_000, lr_warmup_iters=2000, eval_interval=2000
)
FINETUNE_RUN = dict(seq_length=2048, global_batch_size=128, eval_interval=50, save_interval=250)
FP8CS = dict(
    run=dict(precision="bf16_with_fp8_current_scaling_mixed"), model=dict(moe_router_padding_for_fp8=True)
)
MXFP8 = dict(run=dict(precision="bf16_with_mxfp8_mixed"), model=dict(moe_router_padding_for_fp8=True))
MXFP8_NOTE = "MXFP8 needs compute capability 10.0 (Blackwell): on H100 the plan refuses it"
ATTENTION_LORA = dict(target_modules=["linear_qkv", "linear_proj"])
LORA_NOTE = EXPERT_LORA_NOTE

MODELS = {
    "gpt_oss_20b": ("GPT-OSS 20B", presets.gpt_oss_20b),
    "gpt_oss_120b": ("GPT-OSS 120B", presets.gpt_oss_120b),
}


def _row(key: str, kind: str, gpus: int, layout: dict, **more) -> Row:
    title, preset = MODELS[key]
    pretraining = kind == "pretrain"
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family="gpt_oss",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run={**(PRETRAIN_RUN if pretraining else FINETUNE_RUN), **more.pop("run", {})},
        settings=GPT_OSS,
        model=more.pop("model", PER_TOKEN_LOSS if pretraining else {}),
        config=more.pop("config", NO_AVERAGE_IN_COLLECTIVE if pretraining else {}),
        aliases=(f"{key}_{kind}_config",),
        **more,
    )


def _precision_variants(row: Row, stem: str) -> tuple[Row, Row]:
    """The FP8 current-scaling and MXFP8 variants of a 20B row (`stem`: its alias without _config)."""
    fp8cs = variant(
        row,
        row.name.replace("_bf16_", "_fp8cs_"),
        aliases=(f"{stem}_fp8_current_scaling_config",),
        run=FP8CS["run"],
        model=FP8CS["model"],
        note=row.note,
    )
    mxfp8 = variant(
        row,
        row.name.replace("_bf16_", "_fp8mx_"),
        aliases=(f"{stem}_mxfp8_config",),
        run=MXFP8["run"],
        model=MXFP8["model"],
        note="; ".join(filter(None, (MXFP8_NOTE, row.note))),
    )
    return fp8cs, mxfp8


PRETRAIN_20B = _row("gpt_oss_20b", "pretrain", 16, dict(tp=2, pp=4, ep=4, sp=True))
SFT_20B = _row("gpt_oss_20b", "sft", 8, dict(ep=8))
SFT_120B = _row("gpt_oss_120b", "sft", 32, dict(pp=4, ep=8))
PEFT_20B = _row("gpt_oss_20b", "peft", 1, {}, peft=ATTENTION_LORA, note=LORA_NOTE)

ROWS = (
    PRETRAIN_20B,
    *_precision_variants(PRETRAIN_20B, "gpt_oss_20b_pretrain"),
    _row("gpt_oss_120b", "pretrain", 64, dict(tp=2, pp=4, ep=16, sp=True)),
    SFT_20B,
    variant(
        SFT_20B,
        "gpt_oss_20b_sft_8gpu_h100_bf16_32k_config",
        aliases=("gpt_oss_20b_sft_32k_config",),
        run=dict(seq_length=32768, global_batch_size=32),
    ),
    *_precision_variants(SFT_20B, "gpt_oss_20b_sft"),
    variant(
        SFT_20B,
        "gpt_oss_20b_sft_8gpu_h100_bf16_openmathinstruct2_thinking_packed_config",
        aliases=("gpt_oss_20b_sft_openmathinstruct2_thinking_packed_config",),
        run=dict(seq_length=4096, data_kind="chat"),
        note="Megatron-Bridge downloads OpenMathInstruct-2 and renders its reasoning as the thinking channel; "
        "here: chat rows packed to 4096 tokens, from your files (dataset.data_paths)",
    ),
    SFT_120B,
    variant(
        SFT_120B,
        "gpt_oss_120b_sft_48gpu_h100_bf16_32k_config",
        aliases=("gpt_oss_120b_sft_32k_config",),
        gpus=48,
        layout=dict(tp=2, pp=6, cp=4, ep=4, sp=True),
        run=dict(seq_length=32768, global_batch_size=4),
        settings=dict(cross_entropy_loss_fusion=False, bias_activation_fusion=False),
        model={**PER_TOKEN_LOSS, "recompute_granularity": "selective"},
        config={**NO_AVERAGE_IN_COLLECTIVE, "dataset.pad_seq_to_mult": 8},
    ),
    PEFT_20B,
    *_precision_variants(PEFT_20B, "gpt_oss_20b_peft"),
    _row("gpt_oss_120b", "peft", 8, dict(ep=8), peft=ATTENTION_LORA, note=LORA_NOTE),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
gpt_oss_20b_pretrain_16gpu_h100_bf16_config = _functions["gpt_oss_20b_pretrain_16gpu_h100_bf16_config"]
gpt_oss_20b_pretrain_config = gpt_oss_20b_pretrain_16gpu_h100_bf16_config
gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config = _functions["gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config"]
gpt_oss_20b_pretrain_fp8_current_scaling_config = gpt_oss_20b_pretrain_16gpu_h100_fp8cs_config
gpt_oss_20b_pretrain_16gpu_h100_fp8mx_config = _functions["gpt_oss_20b_pretrain_16gpu_h100_fp8mx_config"]
gpt_oss_20b_pretrain_mxfp8_config = gpt_oss_20b_pretrain_16gpu_h100_fp8mx_config
gpt_oss_120b_pretrain_64gpu_h100_bf16_config = _functions["gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]
gpt_oss_120b_pretrain_config = gpt_oss_120b_pretrain_64gpu_h100_bf16_config
gpt_oss_20b_sft_8gpu_h100_bf16_config = _functions["gpt_oss_20b_sft_8gpu_h100_bf16_config"]
gpt_oss_20b_sft_config = gpt_oss_20b_sft_8gpu_h100_bf16_config
gpt_oss_20b_sft_8gpu_h100_bf16_32k_config = _functions["gpt_oss_20b_sft_8gpu_h100_bf16_32k_config"]
gpt_oss_20b_sft_32k_config = gpt_oss_20b_sft_8gpu_h100_bf16_32k_config
gpt_oss_20b_sft_8gpu_h100_fp8cs_config = _functions["gpt_oss_20b_sft_8gpu_h100_fp8cs_config"]
gpt_oss_20b_sft_fp8_current_scaling_config = gpt_oss_20b_sft_8gpu_h100_fp8cs_config
gpt_oss_20b_sft_8gpu_h100_fp8mx_config = _functions["gpt_oss_20b_sft_8gpu_h100_fp8mx_config"]
gpt_oss_20b_sft_mxfp8_config = gpt_oss_20b_sft_8gpu_h100_fp8mx_config
gpt_oss_20b_sft_8gpu_h100_bf16_openmathinstruct2_thinking_packed_config = _functions["gpt_oss_20b_sft_8gpu_h100_bf16_openmathinstruct2_thinking_packed_config"]
gpt_oss_20b_sft_openmathinstruct2_thinking_packed_config = gpt_oss_20b_sft_8gpu_h100_bf16_openmathinstruct2_thinking_packed_config
gpt_oss_120b_sft_32gpu_h100_bf16_config = _functions["gpt_oss_120b_sft_32gpu_h100_bf16_config"]
gpt_oss_120b_sft_config = gpt_oss_120b_sft_32gpu_h100_bf16_config
gpt_oss_120b_sft_48gpu_h100_bf16_32k_config = _functions["gpt_oss_120b_sft_48gpu_h100_bf16_32k_config"]
gpt_oss_120b_sft_32k_config = gpt_oss_120b_sft_48gpu_h100_bf16_32k_config
gpt_oss_20b_peft_1gpu_h100_bf16_config = _functions["gpt_oss_20b_peft_1gpu_h100_bf16_config"]
gpt_oss_20b_peft_config = gpt_oss_20b_peft_1gpu_h100_bf16_config
gpt_oss_20b_peft_1gpu_h100_fp8cs_config = _functions["gpt_oss_20b_peft_1gpu_h100_fp8cs_config"]
gpt_oss_20b_peft_fp8_current_scaling_config = gpt_oss_20b_peft_1gpu_h100_fp8cs_config
gpt_oss_20b_peft_1gpu_h100_fp8mx_config = _functions["gpt_oss_20b_peft_1gpu_h100_fp8mx_config"]
gpt_oss_20b_peft_mxfp8_config = gpt_oss_20b_peft_1gpu_h100_fp8mx_config
gpt_oss_120b_peft_8gpu_h100_bf16_config = _functions["gpt_oss_120b_peft_8gpu_h100_bf16_config"]
gpt_oss_120b_peft_config = gpt_oss_120b_peft_8gpu_h100_bf16_config
# fmt: on
