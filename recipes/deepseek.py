"""DeepSeek V2-Lite / V2 / V3 and Kimi-K2 recipes: Megatron-Bridge's H100 tables (recipes/deepseek/h100/
deepseek_v2.py, deepseek_v3.py, recipes/kimi/h100/kimi_k2.py), one row per published recipe, composed by
recipes.composition.

All pretrain 4096-token sequences for 1M iterations, micro batch 1, Adam 3e-4 -> 3e-5 after 2000 warm-up
iterations, evaluation and a checkpoint every 2000. DeepSeek-V3 and Kimi-K2 split their 61 layers over
uneven pipeline stages with Megatron-Bridge's layout strings (bridge.parallel.stages): at PP16 the
embedding and 4 layers, fourteen stages of 4, then 1 layer and the loss. Megatron-Bridge's V3 layouts put
the multi-token-prediction layer on the last stage too; bridge leaves MTP out of the model (the presets'
mtp_num_layers is None), so that stage holds the layers and the loss. DeepSeek-V2-Lite's SFT / LoRA are
bridge's own (Megatron-Bridge publishes none): the shared finetuning values at the pretraining layout's
EP8, LoRA on the attention output projection (multi-latent attention has no linear_qkv; the routed experts
take no adapters).
"""

from __future__ import annotations

from bridge.models.deepseek import presets
from recipes.composition import Row, register, variant
from recipes.performance import COMMON, MOE_KERNELS, TE_CROSS_ENTROPY
from recipes.runs import FULL_RECOMPUTE

# Megatron-Bridge's DeepSeek / Kimi bridges and recipes: grouped GEMM, fused permutation, TE cross-entropy
DEEPSEEK = {**COMMON, **MOE_KERNELS, **TE_CROSS_ENTROPY}
# Megatron-Bridge's layouts without virtual stages (MTP left out): 4 + 14 x 4 + 1 and 8 + 6 x 8 + 5 layers
PP16_LAYOUT = "Et*4|(t*4|)*14tL"
PP8_LAYOUT = "Et*8|(t*8|)*6t*5L"
# the run values Megatron-Bridge's DeepSeek / Kimi recipes set (not the shared base's 500 / 500 / 500)
LARGE_RUN = dict(
    seq_length=4096,
    global_batch_size=4096,
    train_iters=1_000_000,
    micro_batch_size=1,
    lr_warmup_iters=2000,
    eval_interval=2000,
    save_interval=2000,
)
# V3 and Kimi-K2 collect garbage every 5 iterations (the base: 100)
FREQUENT_GC = {"train.manual_gc_interval": 5}
V2_LITE_FINETUNE_NOTE = "Megatron-Bridge publishes no DeepSeek-V2-Lite finetuning recipe: bridge's own"


def _row(name: str, title: str, preset, kind: str, gpus: int, layout: dict, **more) -> Row:
    return Row(
        name=name,
        family="deepseek",
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        settings=DEEPSEEK,
        **more,
    )


V2_LITE = dict(title="DeepSeek-V2-Lite", preset=presets.deepseek_v2_lite)
V3 = _row(
    "deepseek_v3_pretrain_1024gpu_h100_bf16_config",
    "DeepSeek-V3",
    presets.deepseek_v3,
    "pretrain",
    1024,
    dict(tp=2, pp=16, ep=64, sp=True),
    run=LARGE_RUN,
    model=dict(pipeline_model_parallel_layout=PP16_LAYOUT),
    config=FREQUENT_GC,
    aliases=("deepseek_v3_pretrain_config",),
)

ROWS = (
    _row(
        "deepseek_v2_lite_pretrain_8gpu_h100_bf16_config",
        **V2_LITE,
        kind="pretrain",
        gpus=8,
        layout=dict(ep=8),
        run={**LARGE_RUN, "global_batch_size": 512},
        model=FULL_RECOMPUTE,
        aliases=("deepseek_v2_lite_pretrain_config",),
    ),
    _row(
        "deepseek_v2_pretrain_128gpu_h100_bf16_config",
        "DeepSeek-V2",
        presets.deepseek_v2,
        "pretrain",
        128,
        dict(pp=4, ep=32),
        run={**LARGE_RUN, "global_batch_size": 512},
        model=FULL_RECOMPUTE,
        aliases=("deepseek_v2_pretrain_config",),
    ),
    V3,
    variant(
        V3,
        "deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config",
        aliases=("deepseek_v3_pretrain_config_32nodes",),
        gpus=256,
        layout=dict(pp=8, ep=32),
        model=dict(pipeline_model_parallel_layout=PP8_LAYOUT, **FULL_RECOMPUTE),
    ),
    _row(
        "kimi_k2_pretrain_512gpu_h100_bf16_config",
        "Kimi-K2",
        presets.kimi_k2,
        "pretrain",
        512,
        dict(tp=2, pp=16, ep=32, sp=True),
        run=LARGE_RUN,
        model=dict(pipeline_model_parallel_layout=PP16_LAYOUT, recompute_granularity="selective"),
        config=FREQUENT_GC,
        aliases=("kimi_k2_pretrain_config",),
        note="Megatron-Bridge trains it with its distributed Muon optimizer, which bridge does not have: Adam",
    ),
    _row(
        "deepseek_v2_lite_sft_config",
        **V2_LITE,
        kind="sft",
        gpus=8,
        layout=dict(ep=8),
        run=dict(use_distributed_optimizer=True),
        note=V2_LITE_FINETUNE_NOTE,
    ),
    _row(
        "deepseek_v2_lite_peft_config",
        **V2_LITE,
        kind="peft",
        gpus=8,
        layout=dict(ep=8),
        peft=dict(target_modules=["linear_proj"]),
        note=V2_LITE_FINETUNE_NOTE,
    ),
)

RECIPES, _functions = register(ROWS, __name__)
globals().update(_functions)
