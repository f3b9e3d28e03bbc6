"""Qwen3 (dense) recipes, pretraining, full SFT and LoRA: Megatron-Bridge's H100 table
(recipes/qwen/h100/qwen3.py), one row per published recipe, composed by recipes.composition."""

from __future__ import annotations

from bridge.models.qwen3 import presets
from recipes.composition import Row, register, variant
from recipes.gpu_settings import COMMON, LAYER_FUSIONS, PIPELINE_OVERLAP, TE_CROSS_ENTROPY
from recipes.runs import BENCHMARK, FULL_RECOMPUTE

# Megatron-Bridge's GPU settings for Qwen3 (its H100 recipes)
QWEN3 = {**COMMON, **LAYER_FUSIONS, **TE_CROSS_ENTROPY, **PIPELINE_OVERLAP}

# Qwen3 8B's finetuning (and the MoE's): 100 iterations of global batch 32, beta2 0.95, 10 warm-up
QWEN3_8B_FINETUNE = dict(
    train_iters=100,
    global_batch_size=32,
    adam_beta2=0.95,
    lr_warmup_iters=10,
    lr_decay_iters=100,
    save_interval=100,
    use_distributed_optimizer=True,
)
ATTENTION_LORA = dict(dim=8, alpha=16.0, target_modules=["linear_qkv", "linear_proj"])
PER_TOKEN_LOSS = dict(calculate_per_token_loss=True)
# Megatron-Bridge's "must be False when calculate_per_token_loss=True" (Megatron-Core's DDP refuses the pair)
NO_AVERAGE_IN_COLLECTIVE = {"distributed.average_in_collective": False}

# Qwen3 0.6B stretched from its 40960 trained positions to 131072 with YaRN, Megatron-Bridge's values
# (Megatron-Core's YarnRotaryEmbedding: factor 3.2, the correction range unrounded, cos / sin unscaled
# since mscale = mscale_all_dim)
YARN_128K = dict(
    position_embedding_type="yarn",
    yarn_original_max_position_embeddings=40960,
    yarn_rotary_scaling_factor=131072 / 40960,
    yarn_beta_fast=32.0,
    yarn_beta_slow=1.0,
    yarn_mscale=1.0,
    yarn_mscale_all_dim=1.0,
    yarn_correction_range_round_to_int=False,
)


MODELS = {
    "qwen3_600m": ("Qwen3 0.6B", presets.qwen3_600m),
    "qwen3_1p7b": ("Qwen3 1.7B", presets.qwen3_1p7b),
    "qwen3_4b": ("Qwen3 4B", presets.qwen3_4b),
    "qwen3_8b": ("Qwen3 8B", presets.qwen3_8b),
    "qwen3_14b": ("Qwen3 14B", presets.qwen3_14b),
    "qwen3_32b": ("Qwen3 32B", presets.qwen3_32b),
}


def _row(key: str, kind: str, gpus: int, layout: dict, *, alias: bool = True, **more) -> Row:
    title, preset = MODELS[key]
    run = more.pop("run", {})
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16_config",
        family="qwen3",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=run if kind == "pretrain" else {"seq_length": 2048, **run},
        settings=QWEN3,
        aliases=(f"{key}_{kind}_config",) if alias else (),
        **more,
    )


Q8_PRETRAIN = _row("qwen3_8b", "pretrain", 4, dict(tp=4), alias=False)
Q600M_SFT = _row("qwen3_600m", "sft", 1, {})
Q8_SFT = _row("qwen3_8b", "sft", 4, dict(tp=4), run=QWEN3_8B_FINETUNE)

ROWS = (
    _row("qwen3_600m", "pretrain", 1, {}),
    _row("qwen3_1p7b", "pretrain", 1, {}),
    _row("qwen3_4b", "pretrain", 2, dict(tp=2)),
    Q8_PRETRAIN,
    variant(
        Q8_PRETRAIN,
        "qwen3_8b_pretrain_16gpu_h100_bf16_config",
        gpus=16,
        layout=dict(tp=1),
        run=BENCHMARK,
        aliases=("qwen3_8b_pretrain_config",),  # Megatron-Bridge's alias names this benchmark run
    ),
    _row("qwen3_14b", "pretrain", 8, dict(tp=8)),
    _row("qwen3_32b", "pretrain", 16, dict(tp=8, pp=2), model=FULL_RECOMPUTE),
    Q600M_SFT,
    variant(
        Q600M_SFT,
        "qwen3_600m_sft_8gpu_h100_bf16_128k_config",
        aliases=("qwen3_600m_sft_128k_config",),
        gpus=8,
        layout=dict(cp=8),
        run=dict(seq_length=131072, global_batch_size=2, lr=1e-6, min_lr=1e-6, lr_warmup_iters=10),
        model=PER_TOKEN_LOSS,
        config={**Q600M_SFT.config, **NO_AVERAGE_IN_COLLECTIVE},
    ),
    variant(
        Q600M_SFT,
        "qwen3_600m_sft_8gpu_h100_bf16_yarn_128k_config",
        aliases=("qwen3_600m_sft_yarn_128k_config",),
        gpus=8,
        layout=dict(cp=8),
        run=dict(
            seq_length=131072, global_batch_size=8, lr=1e-6, min_lr=1e-6, lr_warmup_iters=10, data_kind="chat"
        ),
        settings=dict(cross_entropy_loss_fusion=False),
        model={**PER_TOKEN_LOSS, **YARN_128K},
        config={
            **Q600M_SFT.config,
            **NO_AVERAGE_IN_COLLECTIVE,
            "scheduler.lr_warmup_init": 1e-11,
            "distributed.timeout_minutes": 30,
        },
        note="YaRN RoPE 40960 -> 131072 positions; Megatron-Bridge trains it on chat rows (the math subset of "
        "nvidia/Nemotron-Cascade-2-SFT-Data with Qwen3-0.6B's chat template): dataset.kind chat, your files",
    ),
    _row("qwen3_1p7b", "sft", 1, {}),
    _row("qwen3_4b", "sft", 2, dict(tp=2)),
    Q8_SFT,
    variant(
        Q8_SFT,
        "qwen3_8b_sft_8gpu_h100_bf16_32k_config",
        aliases=("qwen3_8b_sft_32k_config",),
        gpus=8,
        layout=dict(cp=2, sp=True),
        run=dict(seq_length=32768, global_batch_size=8),
        model=PER_TOKEN_LOSS,
        config={**Q8_SFT.config, **NO_AVERAGE_IN_COLLECTIVE},
    ),
    _row("qwen3_14b", "sft", 8, dict(tp=8)),
    _row("qwen3_32b", "sft", 16, dict(tp=8, pp=2), model=FULL_RECOMPUTE),
    _row("qwen3_600m", "peft", 1, {}),
    _row("qwen3_1p7b", "peft", 1, {}),
    _row("qwen3_4b", "peft", 1, {}),
    _row("qwen3_8b", "peft", 1, {}, run=QWEN3_8B_FINETUNE, peft=ATTENTION_LORA),
    _row("qwen3_14b", "peft", 1, {}),
    _row("qwen3_32b", "peft", 1, {}, model=FULL_RECOMPUTE),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen3_600m_pretrain_1gpu_h100_bf16_config = _functions["qwen3_600m_pretrain_1gpu_h100_bf16_config"]
qwen3_600m_pretrain_config = qwen3_600m_pretrain_1gpu_h100_bf16_config
qwen3_1p7b_pretrain_1gpu_h100_bf16_config = _functions["qwen3_1p7b_pretrain_1gpu_h100_bf16_config"]
qwen3_1p7b_pretrain_config = qwen3_1p7b_pretrain_1gpu_h100_bf16_config
qwen3_4b_pretrain_2gpu_h100_bf16_config = _functions["qwen3_4b_pretrain_2gpu_h100_bf16_config"]
qwen3_4b_pretrain_config = qwen3_4b_pretrain_2gpu_h100_bf16_config
qwen3_8b_pretrain_4gpu_h100_bf16_config = _functions["qwen3_8b_pretrain_4gpu_h100_bf16_config"]
qwen3_8b_pretrain_16gpu_h100_bf16_config = _functions["qwen3_8b_pretrain_16gpu_h100_bf16_config"]
qwen3_8b_pretrain_config = qwen3_8b_pretrain_16gpu_h100_bf16_config
qwen3_14b_pretrain_8gpu_h100_bf16_config = _functions["qwen3_14b_pretrain_8gpu_h100_bf16_config"]
qwen3_14b_pretrain_config = qwen3_14b_pretrain_8gpu_h100_bf16_config
qwen3_32b_pretrain_16gpu_h100_bf16_config = _functions["qwen3_32b_pretrain_16gpu_h100_bf16_config"]
qwen3_32b_pretrain_config = qwen3_32b_pretrain_16gpu_h100_bf16_config
qwen3_600m_sft_1gpu_h100_bf16_config = _functions["qwen3_600m_sft_1gpu_h100_bf16_config"]
qwen3_600m_sft_config = qwen3_600m_sft_1gpu_h100_bf16_config
qwen3_600m_sft_8gpu_h100_bf16_128k_config = _functions["qwen3_600m_sft_8gpu_h100_bf16_128k_config"]
qwen3_600m_sft_128k_config = qwen3_600m_sft_8gpu_h100_bf16_128k_config
qwen3_600m_sft_8gpu_h100_bf16_yarn_128k_config = _functions["qwen3_600m_sft_8gpu_h100_bf16_yarn_128k_config"]
qwen3_600m_sft_yarn_128k_config = qwen3_600m_sft_8gpu_h100_bf16_yarn_128k_config
qwen3_1p7b_sft_1gpu_h100_bf16_config = _functions["qwen3_1p7b_sft_1gpu_h100_bf16_config"]
qwen3_1p7b_sft_config = qwen3_1p7b_sft_1gpu_h100_bf16_config
qwen3_4b_sft_2gpu_h100_bf16_config = _functions["qwen3_4b_sft_2gpu_h100_bf16_config"]
qwen3_4b_sft_config = qwen3_4b_sft_2gpu_h100_bf16_config
qwen3_8b_sft_4gpu_h100_bf16_config = _functions["qwen3_8b_sft_4gpu_h100_bf16_config"]
qwen3_8b_sft_config = qwen3_8b_sft_4gpu_h100_bf16_config
qwen3_8b_sft_8gpu_h100_bf16_32k_config = _functions["qwen3_8b_sft_8gpu_h100_bf16_32k_config"]
qwen3_8b_sft_32k_config = qwen3_8b_sft_8gpu_h100_bf16_32k_config
qwen3_14b_sft_8gpu_h100_bf16_config = _functions["qwen3_14b_sft_8gpu_h100_bf16_config"]
qwen3_14b_sft_config = qwen3_14b_sft_8gpu_h100_bf16_config
qwen3_32b_sft_16gpu_h100_bf16_config = _functions["qwen3_32b_sft_16gpu_h100_bf16_config"]
qwen3_32b_sft_config = qwen3_32b_sft_16gpu_h100_bf16_config
qwen3_600m_peft_1gpu_h100_bf16_config = _functions["qwen3_600m_peft_1gpu_h100_bf16_config"]
qwen3_600m_peft_config = qwen3_600m_peft_1gpu_h100_bf16_config
qwen3_1p7b_peft_1gpu_h100_bf16_config = _functions["qwen3_1p7b_peft_1gpu_h100_bf16_config"]
qwen3_1p7b_peft_config = qwen3_1p7b_peft_1gpu_h100_bf16_config
qwen3_4b_peft_1gpu_h100_bf16_config = _functions["qwen3_4b_peft_1gpu_h100_bf16_config"]
qwen3_4b_peft_config = qwen3_4b_peft_1gpu_h100_bf16_config
qwen3_8b_peft_1gpu_h100_bf16_config = _functions["qwen3_8b_peft_1gpu_h100_bf16_config"]
qwen3_8b_peft_config = qwen3_8b_peft_1gpu_h100_bf16_config
qwen3_14b_peft_1gpu_h100_bf16_config = _functions["qwen3_14b_peft_1gpu_h100_bf16_config"]
qwen3_14b_peft_config = qwen3_14b_peft_1gpu_h100_bf16_config
qwen3_32b_peft_1gpu_h100_bf16_config = _functions["qwen3_32b_peft_1gpu_h100_bf16_config"]
qwen3_32b_peft_config = qwen3_32b_peft_1gpu_h100_bf16_config
# fmt: on
