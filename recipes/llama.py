"""Llama 2 / 3 / 3.1 / 3.2 pretraining recipes: Megatron-Bridge's H100 table (recipes/llama/h100/llama3.py,
llama2.py), one row per published recipe, composed by recipes.composition."""

from __future__ import annotations

from bridge.models.llama import presets
from recipes.composition import Row, register, variant
from recipes.gpu_settings import COMMON, LAYER_FUSIONS, PIPELINE_OVERLAP, TE_CROSS_ENTROPY
from recipes.runs import EMBEDDING_AND_LOSS_IN_SPLIT, LONG_PRETRAIN

# Megatron-Bridge's GPU settings for Llama (its Llama bridge and H100 recipes); 70B adds TP overlap
LLAMA = {**COMMON, **LAYER_FUSIONS, **TE_CROSS_ENTROPY, **PIPELINE_OVERLAP}
LLAMA_70B = {**LLAMA, "tp_comm_overlap": True}  # + distributed.tp_comm_overlap_cfg below
# Transformer Engine's ub_cfgs for Llama 3 70B on H100 (hidden 8192, TP4, micro batch 1, 8192 tokens)
USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192 = {
    "qkv_dgrad": {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False},
    "qkv_wgrad": {"method": "bulk", "num_sm": 24, "cga_size": 2, "set_sm_margin": False},
    "fc1_dgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc1_wgrad": {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False},
    "qkv_fprop": {"method": "ring_exchange", "aggregate": False},
    "proj_dgrad": {"method": "ring_exchange", "aggregate": False},
    "fc1_fprop": {"method": "ring_exchange", "aggregate": False},
    "fc2_dgrad": {"method": "ring_exchange", "aggregate": False},
    "proj_fprop": {"method": "pipeline", "num_sm": 24, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
    "fc2_fprop": {"method": "pipeline", "num_sm": 16, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
}
# ... and for Llama 3.1 405B (hidden 16384, TP8, CP2, micro batch 1, 8192 tokens): fewer SMs on three GEMMs
USERBUFFERS_BF16_H100_H16384_TP8_CP2_MBS1_SEQ8192 = {
    **USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192,
    "qkv_dgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc1_wgrad": {"method": "bulk", "num_sm": 2, "cga_size": 2, "set_sm_margin": False},
    "fc2_fprop": {"method": "pipeline", "num_sm": 8, "cga_size": 2, "num_splits": 4, "set_sm_margin": True},
}

SEQ_16K, SEQ_64K, SEQ_128K = 16384, 65536, 131072
# TP communication overlapped with Transformer Engine's userbuffers; None = TE's defaults for the shape
TP_OVERLAP_8K = {"distributed.tp_comm_overlap_cfg": dict(USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192)}
# Megatron-Bridge's apply_determinism_overrides: deterministic kernels, no fused cross-entropy, no TP overlap
DETERMINISTIC = dict(deterministic_mode=True, cross_entropy_loss_fusion=False, tp_comm_overlap=False)


def _pretrain(name: str, title: str, preset, gpus: int, layout: dict, **more) -> Row:
    return Row(
        name=name,
        family="llama",
        kind="pretrain",
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run={**LONG_PRETRAIN, **more.pop("run", {})},
        settings=more.pop("settings", LLAMA),
        **more,
    )


L3_8B = _pretrain(
    "llama3_8b_pretrain_2gpu_h100_bf16_config",
    "Llama 3 8B",
    presets.llama3_8b,
    2,
    dict(cp=2),
    aliases=("llama3_8b_pretrain_config",),
)
L3_8B_LOW = variant(
    L3_8B,
    "llama3_8b_pretrain_2gpu_h100_fp8cs_config",
    aliases=("llama3_8b_low_precision_pretrain_config",),
    run=dict(global_batch_size=768, lr=6e-4, min_lr=6e-6, precision="bf16_with_fp8_current_scaling_mixed"),
)
L3_70B = _pretrain(
    "llama3_70b_pretrain_32gpu_h100_bf16_config",
    "Llama 3 70B",
    presets.llama3_70b,
    32,
    dict(tp=4, pp=4, vpp=5, cp=2, sp=True),
    settings=LLAMA_70B,
    config=TP_OVERLAP_8K,
    aliases=("llama3_70b_pretrain_config",),
)

ROWS = (
    _pretrain(
        "llama32_1b_pretrain_1gpu_h100_bf16_config",
        "Llama 3.2 1B",
        presets.llama32_1b,
        1,
        {},
        aliases=("llama32_1b_pretrain_config",),
    ),
    _pretrain(
        "llama32_3b_pretrain_1gpu_h100_bf16_config",
        "Llama 3.2 3B",
        presets.llama32_3b,
        1,
        {},
        aliases=("llama32_3b_pretrain_config",),
    ),
    L3_8B,
    variant(
        L3_8B,
        "llama3_8b_pretrain_16gpu_h100_bf16_16k_config",
        aliases=("llama3_8b_16k_pretrain_config",),
        gpus=16,
        layout=dict(tp=4, pp=2, cp=2, sp=True),
        run=dict(seq_length=SEQ_16K),
    ),
    variant(
        L3_8B,
        "llama3_8b_pretrain_32gpu_h100_bf16_64k_config",
        aliases=("llama3_8b_64k_pretrain_config",),
        gpus=32,
        layout=dict(tp=4, pp=2, cp=4, sp=True),
        run=dict(seq_length=SEQ_64K),
    ),
    variant(
        L3_8B,
        "llama3_8b_pretrain_64gpu_h100_bf16_128k_config",
        aliases=("llama3_8b_128k_pretrain_config",),
        gpus=64,
        layout=dict(tp=4, pp=2, cp=8, sp=True),
        run=dict(seq_length=SEQ_128K),
    ),
    L3_8B_LOW,
    variant(
        L3_8B_LOW,
        "llama3_8b_pretrain_2gpu_h100_fp8mx_config",
        run=dict(precision="bf16_with_mxfp8_mixed"),
        note="MXFP8 needs compute capability 10.0 (Blackwell): on H100 the plan refuses it",
    ),
    variant(
        L3_8B_LOW,
        "llama3_8b_pretrain_2gpu_h100_nvfp4_config",
        run=dict(precision="bf16_mixed"),
        note="published in NVFP4 (bf16_with_nvfp4_mixed), which bridge has no precision for: trains in bf16",
    ),
    L3_70B,
    variant(
        L3_70B,
        "llama3_70b_pretrain_32gpu_h100_bf16_deterministic_config",
        aliases=("llama3_70b_pretrain_deterministic_config",),
        model=DETERMINISTIC,
        config={"distributed.tp_comm_overlap_cfg": None},
    ),
    variant(
        L3_70B,
        "llama3_70b_pretrain_32gpu_h100_bf16_16k_config",
        aliases=("llama3_70b_16k_pretrain_config",),
        layout=dict(tp=8, pp=2, vpp=None, cp=2, sp=True),
        run=dict(seq_length=SEQ_16K),
        config={"distributed.tp_comm_overlap_cfg": None},
    ),
    variant(
        L3_70B,
        "llama3_70b_pretrain_256gpu_h100_bf16_64k_config",
        aliases=("llama3_70b_64k_pretrain_config",),
        gpus=256,
        layout=dict(tp=8, pp=4, vpp=None, cp=8, sp=True),
        run=dict(seq_length=SEQ_64K),
        config={"distributed.tp_comm_overlap_cfg": None},
    ),
    _pretrain(
        "llama31_8b_pretrain_2gpu_h100_bf16_config",
        "Llama 3.1 8B",
        presets.llama31_8b,
        2,
        dict(cp=2),
        aliases=("llama31_8b_pretrain_config",),
    ),
    variant(
        L3_70B,
        "llama31_70b_pretrain_32gpu_h100_bf16_config",
        aliases=("llama31_70b_pretrain_config",),
        title="Llama 3.1 70B",
        preset=presets.llama31_70b,
        note="Megatron-Bridge gives it 131072-token sequences on Llama 3 70B's 8K layout and 8K userbuffers "
        "(a slip): 8192 here, as Llama 3 70B",
    ),
    _pretrain(
        "llama2_7b_pretrain_2gpu_h100_bf16_config",
        "Llama 2 7B",
        presets.llama2_7b,
        2,
        dict(tp=2),
        run=dict(seq_length=4096, save_interval=2000),
        settings={**LLAMA, "cross_entropy_fusion_impl": "native"},
        aliases=("llama2_7b_pretrain_config",),
    ),
)

L31_405B = _pretrain(
    "llama31_405b_pretrain_256gpu_h100_bf16_config",
    "Llama 3.1 405B",
    presets.llama31_405b,
    256,
    dict(tp=8, pp=8, vpp=2, cp=4, sp=True),
    settings=LLAMA_70B,
    model=EMBEDDING_AND_LOSS_IN_SPLIT,
    config={"distributed.tp_comm_overlap_cfg": dict(USERBUFFERS_BF16_H100_H16384_TP8_CP2_MBS1_SEQ8192)},
    aliases=("llama31_405b_pretrain_config",),
    note="Megatron-Bridge gives it 131072-token sequences with 8K userbuffers (a slip, as Llama 3.1 70B): "
    "8192 here",
)
ROWS += (
    L31_405B,
    variant(
        L31_405B,
        "llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config",
        aliases=("llama31_405b_pretrain_deterministic_config",),
        model=DETERMINISTIC,
        config={"distributed.tp_comm_overlap_cfg": None},
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
llama32_1b_pretrain_1gpu_h100_bf16_config = _functions["llama32_1b_pretrain_1gpu_h100_bf16_config"]
llama32_1b_pretrain_config = llama32_1b_pretrain_1gpu_h100_bf16_config
llama32_3b_pretrain_1gpu_h100_bf16_config = _functions["llama32_3b_pretrain_1gpu_h100_bf16_config"]
llama32_3b_pretrain_config = llama32_3b_pretrain_1gpu_h100_bf16_config
llama3_8b_pretrain_2gpu_h100_bf16_config = _functions["llama3_8b_pretrain_2gpu_h100_bf16_config"]
llama3_8b_pretrain_config = llama3_8b_pretrain_2gpu_h100_bf16_config
llama3_8b_pretrain_16gpu_h100_bf16_16k_config = _functions["llama3_8b_pretrain_16gpu_h100_bf16_16k_config"]
llama3_8b_16k_pretrain_config = llama3_8b_pretrain_16gpu_h100_bf16_16k_config
llama3_8b_pretrain_32gpu_h100_bf16_64k_config = _functions["llama3_8b_pretrain_32gpu_h100_bf16_64k_config"]
llama3_8b_64k_pretrain_config = llama3_8b_pretrain_32gpu_h100_bf16_64k_config
llama3_8b_pretrain_64gpu_h100_bf16_128k_config = _functions["llama3_8b_pretrain_64gpu_h100_bf16_128k_config"]
llama3_8b_128k_pretrain_config = llama3_8b_pretrain_64gpu_h100_bf16_128k_config
llama3_8b_pretrain_2gpu_h100_fp8cs_config = _functions["llama3_8b_pretrain_2gpu_h100_fp8cs_config"]
llama3_8b_low_precision_pretrain_config = llama3_8b_pretrain_2gpu_h100_fp8cs_config
llama3_8b_pretrain_2gpu_h100_fp8mx_config = _functions["llama3_8b_pretrain_2gpu_h100_fp8mx_config"]
llama3_8b_pretrain_2gpu_h100_nvfp4_config = _functions["llama3_8b_pretrain_2gpu_h100_nvfp4_config"]
llama3_70b_pretrain_32gpu_h100_bf16_config = _functions["llama3_70b_pretrain_32gpu_h100_bf16_config"]
llama3_70b_pretrain_config = llama3_70b_pretrain_32gpu_h100_bf16_config
llama3_70b_pretrain_32gpu_h100_bf16_deterministic_config = _functions["llama3_70b_pretrain_32gpu_h100_bf16_deterministic_config"]
llama3_70b_pretrain_deterministic_config = llama3_70b_pretrain_32gpu_h100_bf16_deterministic_config
llama3_70b_pretrain_32gpu_h100_bf16_16k_config = _functions["llama3_70b_pretrain_32gpu_h100_bf16_16k_config"]
llama3_70b_16k_pretrain_config = llama3_70b_pretrain_32gpu_h100_bf16_16k_config
llama3_70b_pretrain_256gpu_h100_bf16_64k_config = _functions["llama3_70b_pretrain_256gpu_h100_bf16_64k_config"]
llama3_70b_64k_pretrain_config = llama3_70b_pretrain_256gpu_h100_bf16_64k_config
llama31_8b_pretrain_2gpu_h100_bf16_config = _functions["llama31_8b_pretrain_2gpu_h100_bf16_config"]
llama31_8b_pretrain_config = llama31_8b_pretrain_2gpu_h100_bf16_config
llama31_70b_pretrain_32gpu_h100_bf16_config = _functions["llama31_70b_pretrain_32gpu_h100_bf16_config"]
llama31_70b_pretrain_config = llama31_70b_pretrain_32gpu_h100_bf16_config
llama2_7b_pretrain_2gpu_h100_bf16_config = _functions["llama2_7b_pretrain_2gpu_h100_bf16_config"]
llama2_7b_pretrain_config = llama2_7b_pretrain_2gpu_h100_bf16_config
llama31_405b_pretrain_256gpu_h100_bf16_config = _functions["llama31_405b_pretrain_256gpu_h100_bf16_config"]
llama31_405b_pretrain_config = llama31_405b_pretrain_256gpu_h100_bf16_config
llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config = _functions["llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config"]
llama31_405b_pretrain_deterministic_config = llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config
# fmt: on
