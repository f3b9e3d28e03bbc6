"""The run values several families' tables share (Megatron-Bridge's recipes, read from its source).

Each is a dict of keywords of a kind's base (recipes.common.pretrain_config / finetune_config) that a
table row's `run` starts from.
"""

from __future__ import annotations

# Llama 3 / 3.1 / 3.2 (and Gemma 3) pretraining: 8192-token sequences, global batch 512 of micro batches
# of 1, 1,168,251 iterations, 2000 warm-up iterations, evaluation every 2000
LONG_PRETRAIN = dict(
    seq_length=8192,
    global_batch_size=512,
    micro_batch_size=1,
    train_iters=1_168_251,
    lr_warmup_iters=2000,
    eval_interval=2000,
)

# Megatron-Bridge's short benchmark runs ("performance" variants, e.g. qwen3_8b_pretrain_16gpu_h100_bf16):
# 100 iterations, 40 warm-up, decay over the run, a checkpoint every 50 iterations, global batch 1024
BENCHMARK = dict(
    train_iters=100,
    global_batch_size=1024,
    micro_batch_size=1,
    lr_warmup_iters=40,
    lr_decay_iters=100,
    save_interval=50,
)

# Qwen2 / Qwen2.5 / Gemma 2 / Gemma 3 finetuning: 100 iterations (10 warm-up, decay over 100), beta2 0.95,
# evaluation every 50, a checkpoint every 100
SHORT_FINETUNE = dict(
    train_iters=100,
    lr_warmup_iters=10,
    lr_decay_iters=100,
    adam_beta2=0.95,
    eval_interval=50,
    save_interval=100,
)

# Megatron-Bridge's full recompute (provider fields): every layer's activations recomputed, one at a time
FULL_RECOMPUTE = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)

# the largest models' pipeline split (Llama 3.1 405B, Qwen3-235B-A22B): the embedding and the loss count as
# one decoder layer each and the sum splits evenly (bridge.parallel.stages), so the first and the last stage
# hold one decoder layer fewer
EMBEDDING_AND_LOSS_IN_SPLIT = dict(
    account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
)

# Megatron-Bridge's _sft_common / _peft_common as they stand (the recipes that keep them: OLMoE, EXAONE 4):
# global batch 128, evaluation and a checkpoint every 100, the distributed optimizer (the finetuning base
# here follows its H100 Llama recipes instead: global batch 8, every 30 / 50)
FINETUNE_COMMON = dict(
    global_batch_size=128, eval_interval=100, save_interval=100, use_distributed_optimizer=True
)

# Megatron-Bridge's default LoRA also adapts linear_fc1 / linear_fc2, in a MoE layer every routed expert:
# bridge's adapters take experts that run as one linear each (model.moe_grouped_gemm=false), and these
# recipes run Megatron-Bridge's grouped GEMMs
EXPERT_LORA_NOTE = (
    "LoRA on the attention only: Megatron-Bridge's also adapts the experts, which bridge adapts only as "
    "sequential experts (model.moe_grouped_gemm=false; add linear_fc1 / linear_fc2 to peft.target_modules)"
)
