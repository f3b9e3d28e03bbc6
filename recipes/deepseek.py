"""DeepSeek V2-Lite / V2 / V3, Kimi-K2 and Moonlight recipes: Megatron-Bridge's H100 tables
(recipes/deepseek/h100/deepseek_v2.py, deepseek_v3.py, recipes/kimi/h100/kimi_k2.py,
recipes/moonlight/h100/moonlight_16b.py), one row per published recipe, composed by recipes.composition.

The DeepSeek and Kimi rows pretrain 4096-token sequences for 1M iterations, micro batch 1, Adam 3e-4 ->
3e-5 after 2000 warm-up iterations, evaluation and a checkpoint every 2000. DeepSeek-V3 and Kimi-K2 split their 61 layers over
uneven pipeline stages with Megatron-Bridge's layout strings (bridge.parallel.stages): at PP16 the
embedding and 4 layers, fourteen stages of 4, then 1 layer and the loss. Megatron-Bridge's V3 layouts put
the multi-token-prediction layer on the last stage too; the presets train without MTP (mtp_num_layers is None;
model.mtp_num_layers=1 with an "m" before the "L" adds it: docs/conversion.md), so that stage holds the layers
and the loss. DeepSeek-V2-Lite's SFT / LoRA are
bridge's own (Megatron-Bridge publishes none): the shared finetuning values at the pretraining layout's
EP8, LoRA on every attention projection, as Moonlight's 4-GPU LoRA (multi-latent attention has no linear_qkv:
linear_q_proj, linear_kv_down_proj, linear_kv_up_proj, linear_proj; the shared experts take no adapters yet).

Moonlight-16B-A3B (recipes/moonlight/h100/moonlight_16b.py): pretraining at TP2 EP8 (500,000 iterations
of 2048 x 4096 tokens, selective recompute) and its 16-GPU 100-iteration run; full SFT at TP4 PP2 EP4 (2048
tokens) with its TP1 8K and TP2 CP2 8K variants; LoRA on 2 and 4 GPUs. Its SFT recipes and 4-GPU LoRA start
from Megatron-Bridge's "convergence contract" (100 iterations of global batch 32, beta2 0.95, 10 warm-up, a
checkpoint at the end). Megatron-Bridge's settings bridge has no field for are left out, each named in a
row's note or here: the precision-aware optimizer's bf16 gradients and moments (bridge keeps Adam's state
in fp32), the HybridEP SM counts, shared-expert / expert-communication overlap and router fusion (GPU
kernels with no bridge performance setting). Moonlight has no query compression, so megatron-core 0.19.2
refuses it as it refuses DeepSeek-V2-Lite (bridge.models.provider_checks.check_mla_query_norm).
"""

from __future__ import annotations

from bridge.models.deepseek import presets
from recipes.composition import Row, register, variant
from recipes.gpu_settings import COMMON, FLEX_DISPATCHER, MOE_KERNELS, TE_CROSS_ENTROPY
from recipes.runs import BENCHMARK, FINETUNE_COMMON, FULL_RECOMPUTE

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
# multi-latent attention without query compression (V2-Lite, Moonlight): every attention projection
MLA_NO_Q_COMPRESSION_LORA = ["linear_q_proj", "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj"]
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
    # Megatron-Bridge's recipe recomputes nothing, which needs ~90.6 GB per rank here (activations ~78 GB
    # of 16 micro batches in flight on the first 1F1B stage): more than an H100's 80 GB. Full recompute
    # as its 256-GPU DeepSeek-V3 recipe sets it (its 1024-GPU benchmark recomputes selectively)
    model=dict(pipeline_model_parallel_layout=PP16_LAYOUT, **FULL_RECOMPUTE),
    config=FREQUENT_GC,
    aliases=("deepseek_v3_pretrain_config",),
    note="full recompute, as Megatron-Bridge's 256-GPU DeepSeek-V3 recipe (without it: ~90.6 GB per rank)",
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
        note="Megatron-Bridge trains it with its layer-wise distributed Muon (dist_muon), which bridge does not "
        "have: Adam (optimizer.optimizer=muon with optimizer.use_distributed_optimizer=false runs Megatron-Core's "
        "Muon undistributed)",
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
        peft=dict(target_modules=MLA_NO_Q_COMPRESSION_LORA),
        note=V2_LITE_FINETUNE_NOTE,
    ),
)

# ---- Moonlight-16B-A3B ---------------------------------------------------------------------------------

MOONLIGHT = dict(title="Moonlight-16B-A3B", preset=presets.moonlight_16b)
SELECTIVE = dict(recompute_granularity="selective")
NO_RECOMPUTE = dict(recompute_granularity=None, recompute_method=None, recompute_num_layers=None)
# the tuned single-node runs: the flex dispatcher on DeepEP's HybridEP kernels
HYBRID_EP = {**FLEX_DISPATCHER, "moe_flex_dispatcher_backend": "hybridep"}
BF16_GRAD_REDUCE = {"distributed.grad_reduce_in_fp32": False}
BF16_OPTIMIZER_NOTE = (
    "Megatron-Bridge keeps Adam's gradients and moments in bf16 (precision-aware optimizer), which bridge "
    "does not have: fp32"
)
VOCAB_NOTE = (
    "Megatron-Bridge widens the embedding to 163842 rows for its tokenizer's ids; bridge keeps the "
    "checkpoint's 163840"
)
# Megatron-Bridge's 2-GPU LoRA takes its default targets: linear_qkv (multi-latent attention has none,
# so it adapts nothing there), linear_proj, and linear_fc1 / linear_fc2, here the dense MLP and the routed
# and shared experts; its 4-GPU LoRA the attention projections (MLA_NO_Q_COMPRESSION_LORA, as published)
LORA_NOTE = (
    "LoRA on the attention output projection only: Megatron-Bridge's default targets also adapt linear_fc1 / "
    "linear_fc2, which in Moonlight are its experts, and bridge's adapters do not cover shared experts yet"
)
MOONLIGHT_PRETRAIN = _row(
    "moonlight_16b_pretrain_8gpu_h100_bf16_config",
    **MOONLIGHT,
    kind="pretrain",
    gpus=8,
    layout=dict(tp=2, ep=8, sp=True),
    run=dict(
        seq_length=4096,
        global_batch_size=2048,
        micro_batch_size=1,
        train_iters=500_000,
        lr_warmup_iters=2000,
        eval_interval=2000,
        save_interval=2000,
    ),
    model=SELECTIVE,
    config={**FREQUENT_GC, "dataset.split": "99990,8,2", **BF16_GRAD_REDUCE},
    note=BF16_OPTIMIZER_NOTE,
)
# Megatron-Bridge's finetuning convergence contract (its SFT at TP4 PP2 and its 4-GPU LoRA)
CONVERGENCE = dict(
    train_iters=100,
    global_batch_size=32,
    micro_batch_size=1,
    adam_beta2=0.95,
    lr_warmup_iters=10,
    lr_decay_iters=100,
    eval_interval=50,
    save_interval=100,
    use_distributed_optimizer=True,
)
CONVERGENCE_CONFIG = {
    "validation.eval_iters": 10,
    "dataset.seed": 1234,
    "distributed.overlap_grad_reduce": True,
    "distributed.overlap_param_gather": True,
}
MOONLIGHT_SFT = _row(
    "moonlight_16b_sft_8gpu_h100_bf16_config",
    **MOONLIGHT,
    kind="sft",
    gpus=8,
    layout=dict(tp=4, pp=2, ep=4, sp=True),
    run=dict(CONVERGENCE, seq_length=2048),
    # Megatron-Bridge's PP2 layout: the embedding and 14 layers, then 13 layers and the loss
    model=dict(SELECTIVE, pipeline_model_parallel_layout="Et*14|t*13L"),
    config={**CONVERGENCE_CONFIG, "dataset.pad_seq_to_mult": 4},
    note=VOCAB_NOTE,
)
MOONLIGHT_PEFT = _row(
    "moonlight_16b_peft_2gpu_h100_bf16_config",
    **MOONLIGHT,
    kind="peft",
    gpus=2,
    layout=dict(ep=2),
    run={
        **FINETUNE_COMMON,
        "seq_length": 4096,
        "lr_decay_iters": 1000,
        "eval_interval": 50,
        "save_interval": 50,
    },
    model=SELECTIVE,
    config={
        **FREQUENT_GC,
        "optimizer.adam_eps": 1e-5,
        "distributed.overlap_grad_reduce": True,
        "distributed.overlap_param_gather": True,
        **BF16_GRAD_REDUCE,
    },
    peft=dict(target_modules=["linear_proj"]),
    note=f"Adam eps 1e-5 as published; {LORA_NOTE}; {BF16_OPTIMIZER_NOTE}; {VOCAB_NOTE}",
)

ROWS += (
    MOONLIGHT_PRETRAIN,
    variant(
        MOONLIGHT_PRETRAIN,
        "moonlight_16b_pretrain_16gpu_h100_bf16_config",
        aliases=("moonlight_16b_pretrain_config",),
        gpus=16,
        layout=dict(tp=1, sp=False),
        run={**BENCHMARK, "micro_batch_size": 2},
        settings=HYBRID_EP,
        model=NO_RECOMPUTE,
        note=BF16_OPTIMIZER_NOTE,
    ),
    MOONLIGHT_SFT,
    variant(
        MOONLIGHT_SFT,
        "moonlight_16b_sft_8gpu_h100_bf16_tp1_config",
        aliases=("moonlight_16b_sft_config",),
        layout=dict(tp=1, pp=1, ep=8, sp=False),
        run=dict(seq_length=8192, global_batch_size=8),
        settings=HYBRID_EP,
        model=dict(NO_RECOMPUTE, pipeline_model_parallel_layout=None),
        config={"dataset.pad_seq_to_mult": 1, **BF16_GRAD_REDUCE},
        note=f"{BF16_OPTIMIZER_NOTE}, so bridge's memory estimate (87 GB per rank) is over an H100's 80 and "
        f"the run refuses unless train.check_memory=false; {VOCAB_NOTE}",
    ),
    variant(
        MOONLIGHT_SFT,
        "moonlight_16b_sft_8gpu_h100_bf16_8k_config",
        aliases=("moonlight_16b_sft_8k_config",),
        layout=dict(tp=2, pp=1, cp=2, ep=8, sp=True),
        run=dict(
            seq_length=8192,
            train_iters=20,
            global_batch_size=128,
            lr=1e-6,
            adam_beta2=0.98,
            lr_warmup_iters=2,
            lr_decay_iters=20,
            eval_interval=0,
            save_interval=50,
        ),
        settings=dict(cross_entropy_loss_fusion=False),
        # the loss over all the batch's tokens: Megatron-Core's DDP then must not pre-average
        model=dict(pipeline_model_parallel_layout=None, calculate_per_token_loss=True),
        config={
            **FREQUENT_GC,
            "optimizer.adam_eps": 1e-5,
            "distributed.average_in_collective": False,
            **BF16_GRAD_REDUCE,
        },
        note=f"Adam eps 1e-5 as published; {BF16_OPTIMIZER_NOTE}; {VOCAB_NOTE}",
    ),
    MOONLIGHT_PEFT,
    variant(
        MOONLIGHT_PEFT,
        "moonlight_16b_peft_4gpu_h100_bf16_config",
        aliases=("moonlight_16b_peft_config",),
        gpus=4,
        layout=dict(ep=4),
        run=dict(CONVERGENCE, seq_length=2048),
        model=NO_RECOMPUTE,
        config={
            **CONVERGENCE_CONFIG,
            "train.manual_gc_interval": 100,
            "optimizer.adam_eps": 1e-8,
            "distributed.grad_reduce_in_fp32": True,
            "dataset.pad_seq_to_mult": 4,
        },
        peft=dict(dim=8, alpha=16.0, dropout=0.0, target_modules=MLA_NO_Q_COMPRESSION_LORA),
        note=VOCAB_NOTE,
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
deepseek_v2_lite_pretrain_8gpu_h100_bf16_config = _functions["deepseek_v2_lite_pretrain_8gpu_h100_bf16_config"]
deepseek_v2_lite_pretrain_config = deepseek_v2_lite_pretrain_8gpu_h100_bf16_config
deepseek_v2_pretrain_128gpu_h100_bf16_config = _functions["deepseek_v2_pretrain_128gpu_h100_bf16_config"]
deepseek_v2_pretrain_config = deepseek_v2_pretrain_128gpu_h100_bf16_config
deepseek_v3_pretrain_1024gpu_h100_bf16_config = _functions["deepseek_v3_pretrain_1024gpu_h100_bf16_config"]
deepseek_v3_pretrain_config = deepseek_v3_pretrain_1024gpu_h100_bf16_config
deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config = _functions["deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config"]
deepseek_v3_pretrain_config_32nodes = deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config
kimi_k2_pretrain_512gpu_h100_bf16_config = _functions["kimi_k2_pretrain_512gpu_h100_bf16_config"]
kimi_k2_pretrain_config = kimi_k2_pretrain_512gpu_h100_bf16_config
deepseek_v2_lite_sft_config = _functions["deepseek_v2_lite_sft_config"]
deepseek_v2_lite_peft_config = _functions["deepseek_v2_lite_peft_config"]
moonlight_16b_pretrain_8gpu_h100_bf16_config = _functions["moonlight_16b_pretrain_8gpu_h100_bf16_config"]
moonlight_16b_pretrain_16gpu_h100_bf16_config = _functions["moonlight_16b_pretrain_16gpu_h100_bf16_config"]
moonlight_16b_pretrain_config = moonlight_16b_pretrain_16gpu_h100_bf16_config
moonlight_16b_sft_8gpu_h100_bf16_config = _functions["moonlight_16b_sft_8gpu_h100_bf16_config"]
moonlight_16b_sft_8gpu_h100_bf16_tp1_config = _functions["moonlight_16b_sft_8gpu_h100_bf16_tp1_config"]
moonlight_16b_sft_config = moonlight_16b_sft_8gpu_h100_bf16_tp1_config
moonlight_16b_sft_8gpu_h100_bf16_8k_config = _functions["moonlight_16b_sft_8gpu_h100_bf16_8k_config"]
moonlight_16b_sft_8k_config = moonlight_16b_sft_8gpu_h100_bf16_8k_config
moonlight_16b_peft_2gpu_h100_bf16_config = _functions["moonlight_16b_peft_2gpu_h100_bf16_config"]
moonlight_16b_peft_4gpu_h100_bf16_config = _functions["moonlight_16b_peft_4gpu_h100_bf16_config"]
moonlight_16b_peft_config = moonlight_16b_peft_4gpu_h100_bf16_config
# fmt: on
