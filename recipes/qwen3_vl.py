"""Qwen3-VL recipes: Megatron-Bridge's H100 table (recipes/qwen_vl/h100/qwen3_vl.py), one row per published
recipe, composed by recipes.composition.

Common to all (Megatron-Bridge's _pretrain_common / _sft_common_vlm / _peft_common_vlm): 4096-token rows
(one conversation each, not packed), global batch 32 of micro batches of 2, Adam with beta2 0.95 and the
distributed optimizer, cosine decay, seed 1234.

- `*_pretrain_*_mock`: the projector alone trains (language model and vision encoder frozen) on
  synthetic image-text conversations (dataset.kind=mock_vlm: one random 256 x 256 image, "Describe this
  image.", a random answer) through the checkpoint's processor: give tokenizer.tokenizer_model=<the HF
  folder> (and checkpoint.pretrained_checkpoint=<it> for its weights; Megatron-Bridge starts from random
  ones); lr 3e-4 -> 3e-5, 500 warm-up, 300,000 iterations, evaluation every 500 on 32 batches.
- `*_sft_*`: every part trains, lr 5e-5 -> 5e-6 over 50 iterations (10 warm-up), evaluation every 500 on 10
  batches.
- `*_peft_*`: LoRA on the language model, lr 1e-4 -> 1e-5 over 300,000 iterations (500 warm-up),
  evaluation every 500 on 32 batches.

The finetuning data are image-text conversations (dataset.kind=vlm, docs/vlm.md): give
checkpoint.pretrained_checkpoint (the Hugging Face folder) and dataset.data_paths.

Qwen3-VL-30B-A3B / 235B-A22B (bridge.models.qwen3_vl_moe): the same runs (235B-A22B's SFT: lr 5e-6 -> 1e-6
over 300,000 iterations, 500 warm-up), Megatron-Core's all-to-all token dispatcher with grouped GEMMs and
fused permutation; Megatron-Bridge's Qwen3-VL-MoE provider turns sequence parallelism on at TP > 1, as
Megatron-Core requires for MoE training (so its TP4 SFT runs with it here too).
"""

from __future__ import annotations

from bridge.models.qwen3_vl import presets
from bridge.models.qwen3_vl_moe import presets as moe_presets
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, MOE_KERNELS, NATIVE_CROSS_ENTROPY
from recipes.runs import EMBEDDING_AND_LOSS_IN_SPLIT, EXPERT_LORA_NOTE

QWEN3_VL = {**COMMON, **NATIVE_CROSS_ENTROPY}
QWEN3_VL_MOE = {**QWEN3_VL, **MOE_KERNELS, "moe_token_dispatcher_type": "alltoall"}
BASE = dict(seq_length=4096, global_batch_size=32, micro_batch_size=2)
FINETUNE = dict(BASE, data_kind="vlm", packed=False, adam_beta2=0.95, use_distributed_optimizer=True)
RUNS = {
    "pretrain": dict(
        BASE, train_iters=300_000, lr=3e-4, min_lr=3e-5, lr_warmup_iters=500, lr_decay_iters=300_000
    ),
    "sft": dict(
        FINETUNE, train_iters=50, lr=5e-5, min_lr=5e-6, lr_warmup_iters=10, lr_decay_iters=50, eval_interval=500
    ),
    "peft": dict(
        FINETUNE, train_iters=300_000, lr=1e-4, min_lr=1e-5, lr_warmup_iters=500, lr_decay_iters=300_000,
        eval_interval=500,
    ),
}  # fmt: skip
# Qwen3-VL-235B-A22B's full SFT: a long run at a lower rate
SFT_235B = dict(
    FINETUNE, train_iters=300_000, lr=5e-6, min_lr=1e-6, lr_warmup_iters=500, lr_decay_iters=300_000,
    eval_interval=500,
)  # fmt: skip
TRAINS = {  # which parts train
    "pretrain": dict(freeze_language_model=True, freeze_vision_model=True, freeze_vision_projection=False),
    "sft": dict(freeze_language_model=False, freeze_vision_model=False, freeze_vision_projection=False),
    "peft": dict(freeze_language_model=False, freeze_vision_model=False, freeze_vision_projection=False),
}
CONFIG = {
    "pretrain": {
        "dataset.kind": "mock_vlm",
        "tokenizer.tokenizer_type": "HuggingFaceTokenizer",
        "validation.eval_iters": 32,
    },
    "sft": {"validation.eval_iters": 10, "rng.seed": 1234},
    "peft": {"validation.eval_iters": 32, "rng.seed": 1234},
}


# model -> (title, preset, family folder, GPU settings)
MODELS = {
    "qwen3_vl_8b": ("Qwen3-VL 8B", presets.qwen3_vl_8b, "qwen3_vl", QWEN3_VL),
    "qwen3_vl_30b_a3b": ("Qwen3-VL 30B-A3B", moe_presets.qwen3_vl_30b_a3b, "qwen3_vl_moe", QWEN3_VL_MOE),
    "qwen3_vl_235b_a22b": (
        "Qwen3-VL 235B-A22B",
        moe_presets.qwen3_vl_235b_a22b,
        "qwen3_vl_moe",
        QWEN3_VL_MOE,
    ),
}
SP_AT_TP = "Megatron-Bridge's Qwen3-VL-MoE provider turns sequence parallelism on at TP > 1: on"
ATTENTION_LORA = dict(target_modules=["linear_qkv", "linear_proj"])
LORA_NOTE = EXPERT_LORA_NOTE


def _row(key: str, kind: str, gpus: int, layout: dict, **more) -> Row:
    """Megatron-Bridge's `<key>_<kind>_<gpus>gpu_h100_bf16[_mock]_config` and its short alias."""
    title, preset, family, settings = MODELS[key]
    mock = "_mock" if kind == "pretrain" else ""
    return Row(
        name=f"{key}_{kind}_{gpus}gpu_h100_bf16{mock}_config",
        family=family,
        kind=kind,
        title=title,
        preset=preset,
        gpus=gpus,
        layout=layout,
        run=more.pop("run", RUNS[kind]),
        settings=settings,
        model={**TRAINS[kind], **more.pop("model", {})},
        config=more.pop("config", CONFIG[kind]),
        aliases=(f"{key}_{kind}{mock}_config",),
        **more,
    )


ROWS = (
    _row("qwen3_vl_8b", "pretrain", 4, dict(tp=4)),
    _row("qwen3_vl_8b", "sft", 2, dict(tp=2)),
    _row("qwen3_vl_8b", "peft", 1, {}),
    _row("qwen3_vl_30b_a3b", "pretrain", 8, dict(tp=4, pp=2, ep=4, sp=True)),
    # context parallelism: each micro batch's loss summed per token and not averaged in the collective
    # (Megatron-Bridge's provider sets the first at CP > 1, the recipe the second); 94 layers over 16 stages
    # with the embedding and the loss counted as layers (6 each), as the text Qwen3-235B-A22B's recipes
    _row(
        "qwen3_vl_235b_a22b",
        "pretrain",
        256,
        dict(tp=4, pp=16, cp=2, ep=8, sp=True),
        model={"calculate_per_token_loss": True, **EMBEDDING_AND_LOSS_IN_SPLIT},
        config={**CONFIG["pretrain"], "distributed.average_in_collective": False},
        note="94 decoder layers over 16 pipeline stages: the embedding and the loss count as layers (6 each)",
    ),
    _row("qwen3_vl_30b_a3b", "sft", 8, dict(ep=8)),
    _row("qwen3_vl_30b_a3b", "peft", 4, dict(ep=4), peft=ATTENTION_LORA, note=LORA_NOTE),
    _row(
        "qwen3_vl_235b_a22b",
        "sft",
        32,
        dict(tp=4, ep=32, sp=True),
        run=SFT_235B,
        note=SP_AT_TP,
        config={**CONFIG["sft"], "validation.eval_iters": 32},
    ),
    _row("qwen3_vl_235b_a22b", "peft", 16, dict(ep=16), peft=ATTENTION_LORA, note=LORA_NOTE),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config = _functions["qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config"]
qwen3_vl_8b_pretrain_mock_config = qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config
qwen3_vl_8b_sft_2gpu_h100_bf16_config = _functions["qwen3_vl_8b_sft_2gpu_h100_bf16_config"]
qwen3_vl_8b_sft_config = qwen3_vl_8b_sft_2gpu_h100_bf16_config
qwen3_vl_8b_peft_1gpu_h100_bf16_config = _functions["qwen3_vl_8b_peft_1gpu_h100_bf16_config"]
qwen3_vl_8b_peft_config = qwen3_vl_8b_peft_1gpu_h100_bf16_config
qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config = _functions["qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config"]
qwen3_vl_30b_a3b_pretrain_mock_config = qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config
qwen3_vl_235b_a22b_pretrain_256gpu_h100_bf16_mock_config = _functions["qwen3_vl_235b_a22b_pretrain_256gpu_h100_bf16_mock_config"]
qwen3_vl_235b_a22b_pretrain_mock_config = qwen3_vl_235b_a22b_pretrain_256gpu_h100_bf16_mock_config
qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config = _functions["qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config"]
qwen3_vl_30b_a3b_sft_config = qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config
qwen3_vl_30b_a3b_peft_4gpu_h100_bf16_config = _functions["qwen3_vl_30b_a3b_peft_4gpu_h100_bf16_config"]
qwen3_vl_30b_a3b_peft_config = qwen3_vl_30b_a3b_peft_4gpu_h100_bf16_config
qwen3_vl_235b_a22b_sft_32gpu_h100_bf16_config = _functions["qwen3_vl_235b_a22b_sft_32gpu_h100_bf16_config"]
qwen3_vl_235b_a22b_sft_config = qwen3_vl_235b_a22b_sft_32gpu_h100_bf16_config
qwen3_vl_235b_a22b_peft_16gpu_h100_bf16_config = _functions["qwen3_vl_235b_a22b_peft_16gpu_h100_bf16_config"]
qwen3_vl_235b_a22b_peft_config = qwen3_vl_235b_a22b_peft_16gpu_h100_bf16_config
# fmt: on
