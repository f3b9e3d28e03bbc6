"""Tiny random Hugging Face models of every supported family, and checks shared by the conversion tests.

The models come from transformers' own classes; every weight (norms and biases included) is drawn at
random so that a mapping mistake anywhere changes the logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `import bridge`

import torch  # noqa: E402

VOCAB = 250  # not a multiple of 128: the Megatron embedding has padding rows
SEQ = 16
BATCH = 2

_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
)

# DeepSeek's multi-latent attention: 4 heads of q/k 16 + 8 rope dims and values of 12; latent kv of 32.
# rms_norm_eps 1e-6: transformers' q_a / kv_a layernorms use that eps whatever the config says.
_DEEPSEEK = dict(
    tie_word_embeddings=False,
    num_key_value_heads=4,
    rms_norm_eps=1e-6,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
)
_YARN = dict(factor=4.0, original_max_position_embeddings=16, beta_fast=32, beta_slow=1)

# Nemotron-H's tiny sizes (the layer kinds are each entry's): 4 layers, 2 groups of 4 Mamba heads, chunks of 8
_NEMOTRON_H = dict(
    num_hidden_layers=4,
    head_dim=16,
    layer_norm_epsilon=1e-5,
    ssm_state_size=16,
    mamba_num_heads=8,
    mamba_head_dim=16,
    n_groups=2,
    conv_kernel=4,
    chunk_size=8,
    tie_word_embeddings=False,
)

# family -> (config class, model class, config fields)
FAMILIES: dict[str, tuple[str, str, dict]] = {
    # Llama 3.2 style: tied embeddings, llama3 RoPE scaling with non-default frequency bounds.
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            tie_word_embeddings=True,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 2.0,
                "high_freq_factor": 8.0,
                "original_max_position_embeddings": 32,
            },
        ),
    ),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=False, rope_theta=1000000.0)),
    # head_dim differs from hidden_size / heads, as in the published Qwen3 configs.
    "qwen3": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        dict(tie_word_embeddings=False, head_dim=32, rms_norm_eps=1e-6),
    ),
    # a window shorter than the test sequence, so that the sliding window matters.
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(tie_word_embeddings=False, sliding_window=6)),
    # Ministral 3's language model: YaRN RoPE and Llama 4's query scale, over 8 original positions (the
    # published 16384) so that the scale departs from 1 within the test sequence.
    "ministral3": (
        "Ministral3Config",
        "Ministral3ForCausalLM",
        dict(
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1,
            },
        ),
    ),
    "mixtral": (
        "MixtralConfig",
        "MixtralForCausalLM",
        dict(tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    ),
    # norm_topk_prob=False: the top-k probabilities are not renormalised (Mixtral's are).
    # mlp_only_layers=[1]: layer 0 is MoE, layer 1 a dense MLP (Megatron moe_layer_freq [1, 0]).
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
        ),
    ),
    # Phi-3: packed qkv_proj / gate_up_proj; GQA (2 heads per group), partial rotary, a sliding window
    # shorter than the test sequence. pad/bos/eos inside the tiny vocabulary.
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        dict(
            tie_word_embeddings=False,
            sliding_window=6,
            partial_rotary_factor=0.5,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # Qwen2-MoE: q/k/v biases, a gated shared expert; decoder_sparse_step=2: layer 0 dense, layer 1 MoE.
    # Gated DeltaNet (layer 0) and gated softmax attention (layer 1); two value heads per key head and
    # value heads smaller than key heads, so that a mix-up of the grouped in_proj layout shows.
    "qwen3_next": (
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=32,
            layer_types=["linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=8,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
    # Qwen3.5: the Gated DeltaNet input projections stored apart (in_proj_qkv / _z / _b / _a)
    "qwen3_5": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=32,
            layer_types=["linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=8,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
        ),
    ),
    "qwen3_5_moe": (
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=32,
            layer_types=["linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=8,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
        ),
    ),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            mlp_only_layers=[],
        ),
    ),
    # OLMo 2: norms after the branches, q/k RMSNorms over whole projections (GQA: 2 heads per group).
    "olmo2": (
        "Olmo2Config",
        "Olmo2ForCausalLM",
        dict(tie_word_embeddings=False, rope_theta=500000.0, pad_token_id=1, eos_token_id=2),
    ),
    # Gemma 2: sandwich (1 + w) norms, GeGLU, scaled embeddings, soft-capped attention and logits;
    # head_dim 32 != hidden / heads, query_pre_attn_scalar != head_dim, a window (6) shorter than the
    # test sequence on layer 0 (sliding), layer 1 global; tied embeddings as published.
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        dict(
            head_dim=32,
            query_pre_attn_scalar=24,
            sliding_window=6,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # DeepSeek-V2-Lite style: multi-latent attention without query compression (q_lora_rank None), YaRN
    # (mscale = mscale_all_dim: softmax scale x mscale^2, cos/sin unscaled), greedy softmax routing
    # without renormalisation, x1.5 routed scaling, 2 shared experts, layer 0 dense.
    "deepseek_v2": (
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        dict(
            _DEEPSEEK,
            q_lora_rank=None,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=2,
            routed_scaling_factor=1.5,
            topk_method="greedy",
            norm_topk_prob=False,
            rope_scaling={"rope_type": "yarn", **_YARN, "mscale": 0.707, "mscale_all_dim": 0.707},
        ),
    ),
    # DeepSeek-V3 style: q compression, sigmoid scores + e_score_correction_bias (random here), 4 groups
    # of which 2 per token (4 // 2 = 2: each group ranked by its top-2 sum), renormalised top-k, x2.5,
    # YaRN with mscale != mscale_all_dim (cos/sin scaled too), layer 0 dense.
    "deepseek_v3": (
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        dict(
            _DEEPSEEK,
            q_lora_rank=24,
            n_routed_experts=8,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            n_shared_experts=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            num_nextn_predict_layers=0,
            rope_scaling={"rope_type": "yarn", **_YARN, "mscale": 1.0, "mscale_all_dim": 0.8},
        ),
    ),
    # GLM-4.7-Flash style: DeepSeek-V3's MLA with q compression (latent norms at transformers' fixed 1e-6,
    # the others at rms_norm_eps 1e-5), default RoPE (base 5000) over the interleaved rope slice, GLM's
    # sigmoid + e_score_correction_bias (random here) routing in 4 groups of 2, 2 per token (4 // 2 = 2),
    # renormalised top-4, x1.8, a shared expert of 2 * 32; layer 0 dense (mlp_layer_types).
    "glm4_moe_lite": (
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        dict(
            _DEEPSEEK,
            rms_norm_eps=1e-5,
            q_lora_rank=24,
            rope_theta=5000.0,
            n_routed_experts=8,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            n_shared_experts=2,
            routed_scaling_factor=1.8,
            norm_topk_prob=True,
            mlp_layer_types=["dense", "sparse"],
        ),
    ),
    # Gemma 3: Gemma 2's layout plus per-head (1 + w) q/k norms, no soft-capping; layer 0 sliding (window
    # 6 < the test sequence, RoPE base 50), layer 1 global (base 500, linear scaling 4): a layer given
    # the other kind's RoPE (e.g. by its stage-local index under PP) changes the logits.
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            head_dim=32,
            query_pre_attn_scalar=24,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
            },
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # GLM-4.5 style: q/k/v biases, per-head q/k norms, RoPE over half of each head (head_dim 32 != hidden /
    # heads), sigmoid + e_score_correction_bias (random here) routing in 4 groups of 2, 2 groups per token
    # (4 // 2 = 2: each group ranked by its top-2 sum), renormalised top-4, x2.5, a shared expert of 2 * 32,
    # layer 0 dense.
    "glm4_moe": (
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=32,
            attention_bias=True,
            use_qk_norm=True,
            partial_rotary_factor=0.5,
            n_routed_experts=8,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            n_shared_experts=2,
            moe_intermediate_size=32,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            first_k_dense_replace=1,
            num_nextn_predict_layers=0,
        ),
    ),
    # MiniMax-M2 style: q/k norms over whole projections (GQA: 2 heads per group), RoPE over 16 of 32 head
    # dims (the released configs' rotary_dim key), sigmoid + e_score_correction_bias (random here) routing
    # of 2 among 8 experts, renormalised.
    "minimax_m2": (
        "MiniMaxM2Config",
        "MiniMaxM2ForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=32,
            rotary_dim=16,
            rope_theta=5000.0,
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # ERNIE 4.5 MoE style: interleaved RoPE, softmax routing with moe_statics.e_score_correction_bias
    # (random here) for the choice, top-2 of 8 renormalised, a shared expert; layer 0 dense (start index
    # 1); tied embeddings as the 21B.
    "ernie4_5_moe": (
        "Ernie4_5_MoeConfig",
        "Ernie4_5_MoeForCausalLM",
        dict(
            tie_word_embeddings=True,
            rope_theta=500000.0,
            moe_num_experts=8,
            moe_k=2,
            moe_num_shared_experts=1,
            moe_intermediate_size=32,
            moe_layer_start_index=1,
            moe_layer_interval=1,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # OLMoE: q/k RMSNorms over whole projections (GQA: k_norm over 2 heads) before RoPE, pre-norm
    # placement, softmax over all experts and the top 2 kept without renormalisation.
    "olmoe": (
        "OlmoeConfig",
        "OlmoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            num_experts=4,
            num_experts_per_tok=2,
            intermediate_size=32,
            norm_topk_prob=False,
            pad_token_id=1,
            eos_token_id=2,
        ),
    ),
    # GPT-OSS: a learnable sink per head, a window (6) shorter than the test sequence on layer 0 and
    # none on layer 1, biases on q/k/v/o, router and experts, the clamped SwiGLU (limit 0.5, so that
    # the clamps bite) with its +1 offset, YaRN x4 from 16 positions (truncate false: the
    # correction range unrounded; attention factor folded into the softmax scale); experts stacked
    # in the checkpoint, gate/up interleaved.
    "gpt_oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            tie_word_embeddings=False,
            head_dim=16,
            intermediate_size=32,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=6,
            swiglu_limit=0.5,
            rope_parameters={"rope_type": "yarn", **_YARN, "truncate": False, "rope_theta": 10000.0},
        ),
    ),
    # Gemma 1: pre-norm (1 + w) RMSNorms, GeGLU, scaled embeddings, tied output; head_dim 32 != hidden /
    # heads (as published: 16 x 256 over 3072), multi-head attention as gemma-7b (gemma-2b's single
    # key/value head does not split over TP=2). pad/bos/eos inside the tiny vocabulary.
    "gemma": (
        "GemmaConfig",
        "GemmaForCausalLM",
        dict(
            head_dim=32,
            num_key_value_heads=4,
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # Nemotron: LayerNorm1P (1 + w, with bias), squared-ReLU MLP without gate, RoPE over a quarter of each
    # head (not the default half), head_dim 32 != hidden / heads; untied output as published.
    "nemotron": (
        "NemotronConfig",
        "NemotronForCausalLM",
        dict(
            head_dim=32,
            norm_eps=1e-5,
            partial_rotary_factor=0.25,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # GLM-4: sandwich RMSNorms, q/k/v biases, fused gate_up_proj, interleaved RoPE over a quarter of each
    # head (not the default half); head_dim 32 != hidden / heads. pad/eos inside the tiny vocabulary.
    "glm4": (
        "Glm4Config",
        "Glm4ForCausalLM",
        dict(
            head_dim=32,
            partial_rotary_factor=0.25,
            attention_bias=True,
            tie_word_embeddings=False,
            pad_token_id=0,
            eos_token_id=2,
        ),
    ),
    # StarCoder2: LayerNorms with biases, biases on every linear, tanh-GELU MLP without gate, a window (6)
    # shorter than the test sequence on every layer; tied output as published. bos/eos in the vocabulary.
    "starcoder2": (
        "Starcoder2Config",
        "Starcoder2ForCausalLM",
        dict(
            norm_epsilon=1e-5,
            sliding_window=6,
            use_bias=True,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # SmolLM3: layer 1 (every 2nd) attends without RoPE; tied embeddings as published.
    "smollm3": (
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        dict(tie_word_embeddings=True, no_rope_layer_interval=2, rope_theta=5000.0, pad_token_id=0),
    ),
    # EXAONE 4: norms after the branches, per-head q/k norms; layer 0 local (window 6 < the test
    # sequence, RoPE), layer 1 global without RoPE; llama3 RoPE scaling as published.
    "exaone4": (
        "Exaone4Config",
        "Exaone4ForCausalLM",
        dict(
            tie_word_embeddings=False,
            sliding_window=6,
            sliding_window_pattern=2,
            rope_theta=5000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # EXAONE-MoE (K-EXAONE) style: pre-norm, per-head q/k norms, GQA; layer 0 local (window 6 < the test
    # sequence, RoPE), layer 1 global without RoPE; layer 0 dense, layer 1 MoE: sigmoid +
    # e_score_correction_bias (random here) routing in 4 groups of 2, 2 per token (4 // 2 = 2),
    # renormalised top-4, x2.5, a shared expert of 2 * 32.
    "exaone_moe": (
        "ExaoneMoeConfig",
        "ExaoneMoeForCausalLM",
        dict(
            tie_word_embeddings=False,
            sliding_window=6,
            sliding_window_pattern=2,
            rope_theta=5000.0,
            num_experts=8,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            num_shared_experts=2,
            moe_intermediate_size=32,
            routed_scaling_factor=2.5,
            first_k_dense_replace=1,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # ERNIE 4.5: interleaved RoPE (adjacent channel pairs), head_dim 32 != hidden / heads, tied embeddings.
    "ernie4_5": (
        "Ernie4_5Config",
        "Ernie4_5ForCausalLM",
        dict(head_dim=32, rope_theta=5000.0, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1),
    ),
    # Granite 3: embeddings x 3, branch outputs x 0.5, attention scale 0.3 (not head_dim ** -0.5),
    # logits / 4; tied embeddings as published.
    "granite": (
        "GraniteConfig",
        "GraniteForCausalLM",
        dict(
            tie_word_embeddings=True,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.3,
            logits_scaling=4.0,
            rope_theta=5000.0,
            pad_token_id=0,
        ),
    ),
    # OLMo 3: OLMo 2's layout; layer 0 sliding (window 6 < the test sequence, default RoPE of base 50),
    # layer 1 global with YaRN (factor 4 over 16 positions, attention factor 1.3, not the default).
    "olmo3": (
        "Olmo3Config",
        "Olmo3ForCausalLM",
        dict(
            tie_word_embeddings=False,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {
                    "rope_type": "yarn",
                    "rope_theta": 500.0,
                    **_YARN,
                    "attention_factor": 1.3,
                },
                "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
            },
            pad_token_id=1,
            eos_token_id=2,
        ),
    ),
    # Nemotron-H: a hybrid (MambaModelProvider) of Mamba-2, attention (no RoPE) and squared-ReLU MLP
    # layers; chunks of 8 over the 16 tokens so that the SSD scan hands a state between chunks; 2 groups of
    # 4 Mamba heads, so that TP=2 splits heads and groups; the 4 layers split M* | M- on 2 stages.
    "nemotron_h": (
        "NemotronHConfig",
        "NemotronHForCausalLM",
        dict(
            _NEMOTRON_H, layers_block_type=["linear_attention", "full_attention", "linear_attention", "mlp"]
        ),
    ),
    # Nemotron 3 (Nano / Super): Nemotron-H with MoE layers (E): 4 squared-ReLU experts without gate on a
    # latent size of 32 (not the hidden 64), top-2 sigmoid routing with a score-correction bias, limited to
    # 1 of 2 groups (each ranked by its best two, Megatron-Core's top-k // group-top-k), scaled by 2.5, and a
    # shared expert of 48; the 4 layers split ME | *E on 2 stages.
    "nemotron_h_moe": (
        "NemotronHConfig",
        "NemotronHForCausalLM",
        dict(
            _NEMOTRON_H,
            layers_block_type=["linear_attention", "moe", "full_attention", "moe"],
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48,
            moe_latent_size=32,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
        ),
    ),
}
# 3-layer tiny models (ROOT/hf/<name>, refs/<name>.pt) on 2 pipeline stages that cannot split them evenly:
# Llama's tied embedding with 2 + 1 layers by the first-stage count, DeepSeek-V3's MLA with its dense
# layer 0 and MoE layers by a layout string (1 + 2 layers).
UNEVEN = {
    "llama_3layers": dict(num_layers_in_first_pipeline_stage=2),
    "deepseek_v3_3layers": dict(pipeline_model_parallel_layout="Et|ttL"),
}

# The tiny models with routed experts (the EP=2 parity runs): those whose config counts experts.
_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
MOE_FAMILIES = tuple(f for f, (_, _, fields) in FAMILIES.items() if set(_EXPERT_COUNT_KEYS) & set(fields))


def refused_by_installed_release(family: str) -> str | None:
    """The ConfigError text (a regex) the installed Megatron-Core gets for `family`'s tiny model, or None.

    deepseek_v2 (q_lora_rank None, as DeepSeek-V2-Lite): megatron-core 0.19.2's MLA would add a query
    norm (bridge.models.provider_checks.check_mla_query_norm); it converts on 0.16.1."""
    import importlib.util

    if family == "deepseek_v2" and importlib.util.find_spec("megatron.core.transformer.mla_qk_norm_config"):
        return r"model\.q_lora_rank = None: megatron-core .* fused norm\+linear"
    return None


def make_hf_config(family: str, **overrides):
    import transformers

    config_cls, model_cls, fields = FAMILIES[family]
    return getattr(transformers, config_cls)(architectures=[model_cls], **{**_COMMON, **fields, **overrides})


def make_hf_model(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    import transformers

    config = make_hf_config(family, **overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, FAMILIES[family][1])(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3's routing bias: a saved buffer
                b.copy_(0.05 * torch.randn_like(b))
    return model


def save_hf_model(
    family: str,
    folder: str | Path,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    with_tokenizer: bool = True,
    **overrides,
) -> torch.nn.Module:
    model = make_hf_model(family, seed, **overrides).to(dtype)
    model.save_pretrained(str(folder))
    if with_tokenizer:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import PreTrainedTokenizerFast

        vocab = {f"w{i}": i for i in range(VOCAB - 1)} | {"<unk>": VOCAB - 1}
        tok = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>"
        )
        tok.save_pretrained(str(folder))
    return model


def tokens(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def hf_logits(model: torch.nn.Module, toks: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(toks).logits.float()


def megatron_logits(chunk: torch.nn.Module, toks: torch.Tensor) -> torch.Tensor:
    """Logits of a whole (PP=1) GPTModel, the padded vocabulary rows cut off."""
    pos = torch.arange(toks.shape[1]).unsqueeze(0).expand_as(toks)
    with torch.no_grad():
        out = chunk(toks, pos, attention_mask=None)
    return out[..., :VOCAB].float()


def read_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of an HF folder (single file or sharded), by name."""
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str | None:
    """None when both hold the same names, dtypes, shapes and bytes; else what differs."""
    if set(a) != set(b):
        return f"names differ: only in first {sorted(set(a) - set(b))[:4]}, only in second {sorted(set(b) - set(a))[:4]}"
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape:
            return f"{k}: {a[k].dtype}{list(a[k].shape)} vs {b[k].dtype}{list(b[k].shape)}"
        if not torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)):
            return f"{k}: bytes differ"
    return None
