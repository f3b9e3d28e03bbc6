"""Every preset holds the published Hugging Face config values and has the same parameter count as the
Hugging Face model built from that config (both built on the meta device: no memory, no network)."""

import pytest

from bridge.models import PRESETS, preset

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0}

_V2_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
            "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}  # fmt: skip

_GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}  # fmt: skip

# The published config.json values (the fields that shape the model or change its math).
_GLM = dict(
    num_attention_heads=96, num_key_value_heads=8, head_dim=128, vocab_size=151552, rms_norm_eps=1e-5,
    rope_theta=1000000.0, partial_rotary_factor=0.5, attention_bias=True, n_shared_experts=1,
    num_experts_per_tok=8, n_group=1, topk_group=1, norm_topk_prob=True, num_nextn_predict_layers=1,
    tie_word_embeddings=False,
)  # fmt: skip
_GLM45 = dict(
    _GLM, hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=92,
    n_routed_experts=160, first_k_dense_replace=3, routed_scaling_factor=2.5, use_qk_norm=True,
)  # fmt: skip
_ERNIE = dict(
    head_dim=128, vocab_size=103424, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
    use_bias=False, moe_num_experts=64, moe_layer_interval=1, moe_norm_min=1e-12, router_aux_loss_coef=0.001,
)  # fmt: skip
_EXAONE4_ROPE = {  # EXAONE 4.0: llama3 scaling
    "rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}  # fmt: skip
_OLMO3_YARN = {  # OLMo 3: on the full-attention layers
    "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192, "beta_fast": 32,
    "beta_slow": 1, "attention_factor": 1.2079441541679836,
}  # fmt: skip
# Nemotron-H / Nano 2 (hybrid): GQA of 8 KV heads of 128, Mamba-2 with 8 groups, relu2 MLPs, no biases
_NEMOTRON_H = dict(
    num_key_value_heads=8, head_dim=128, vocab_size=131072, layer_norm_epsilon=1e-5, n_groups=8, conv_kernel=4,
    chunk_size=128, mlp_hidden_act="relu2", use_conv_bias=True, use_bias=False, mamba_proj_bias=False,
    tie_word_embeddings=False,
)  # fmt: skip
_H_V1 = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
PUBLISHED = {
    "llama2_7b": ("LlamaConfig", dict(  # meta-llama/Llama-2-7b-hf
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False)),
    "llama3_8b": ("LlamaConfig", dict(  # meta-llama/Meta-Llama-3-8B
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False)),
    "llama31_8b": ("LlamaConfig", dict(  # meta-llama/Llama-3.1-8B
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={**_LLAMA3_ROPE, "factor": 8.0, "original_max_position_embeddings": 8192})),
    "llama31_70b": ("LlamaConfig", dict(  # meta-llama/Llama-3.1-70B
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={**_LLAMA3_ROPE, "factor": 8.0, "original_max_position_embeddings": 8192})),
    "llama32_1b": ("LlamaConfig", dict(  # meta-llama/Llama-3.2-1B
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={**_LLAMA3_ROPE, "factor": 32.0, "original_max_position_embeddings": 8192})),
    "llama32_3b": ("LlamaConfig", dict(  # meta-llama/Llama-3.2-3B
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={**_LLAMA3_ROPE, "factor": 32.0, "original_max_position_embeddings": 8192})),
    "qwen25_7b": ("Qwen2Config", dict(  # Qwen/Qwen2.5-7B
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen2_500m": ("Qwen2Config", dict(  # Qwen/Qwen2-0.5B
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen2_1p5b": ("Qwen2Config", dict(  # Qwen/Qwen2-1.5B
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen2_7b": ("Qwen2Config", dict(  # Qwen/Qwen2-7B
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen2_72b": ("Qwen2Config", dict(  # Qwen/Qwen2-72B
        hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=152064, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen25_500m": ("Qwen2Config", dict(  # Qwen/Qwen2.5-0.5B
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen25_1p5b": ("Qwen2Config", dict(  # Qwen/Qwen2.5-1.5B
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen25_14b": ("Qwen2Config", dict(  # Qwen/Qwen2.5-14B
        hidden_size=5120, intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
        num_key_value_heads=8, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen25_32b": ("Qwen2Config", dict(  # Qwen/Qwen2.5-32B
        hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
        num_key_value_heads=8, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen25_72b": ("Qwen2Config", dict(  # Qwen/Qwen2.5-72B
        hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3_600m": ("Qwen3Config", dict(  # Qwen/Qwen3-0.6B
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3_1p7b": ("Qwen3Config", dict(  # Qwen/Qwen3-1.7B
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3_4b": ("Qwen3Config", dict(  # Qwen/Qwen3-4B
        hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3_14b": ("Qwen3Config", dict(  # Qwen/Qwen3-14B
        hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3_32b": ("Qwen3Config", dict(  # Qwen/Qwen3-32B
        hidden_size=5120, intermediate_size=25600, num_hidden_layers=64, num_attention_heads=64,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3_235b_a22b": ("Qwen3MoeConfig", dict(  # Qwen/Qwen3-235B-A22B
        hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        router_aux_loss_coef=0.001, tie_word_embeddings=False)),
    "llama3_70b": ("LlamaConfig", dict(  # meta-llama/Meta-Llama-3-70B
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False)),
    "llama31_405b": ("LlamaConfig", dict(  # meta-llama/Llama-3.1-405B
        hidden_size=16384, intermediate_size=53248, num_hidden_layers=126, num_attention_heads=128,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={**_LLAMA3_ROPE, "factor": 8.0, "original_max_position_embeddings": 8192})),
    "qwen3_8b": ("Qwen3Config", dict(  # Qwen/Qwen3-8B
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3_30b_a3b": ("Qwen3MoeConfig", dict(  # Qwen/Qwen3-30B-A3B
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        router_aux_loss_coef=0.001, tie_word_embeddings=False)),
    "qwen3_next_80b_a3b": ("Qwen3NextConfig", dict(  # Qwen/Qwen3-Next-80B-A3B-Instruct
        hidden_size=2048, intermediate_size=5120, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        num_experts=512, num_experts_per_tok=10, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
        vocab_size=151936, max_position_embeddings=262144, rms_norm_eps=1e-6, rope_theta=10000000.0,
        partial_rotary_factor=0.25, full_attention_interval=4, linear_conv_kernel_dim=4,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
        router_aux_loss_coef=0.001, tie_word_embeddings=False)),
    "qwen35_27b": ("Qwen3_5TextConfig", dict(  # Qwen/Qwen3.5-27B (text_config)
        hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
        num_key_value_heads=4, head_dim=256, vocab_size=248320, max_position_embeddings=262144,
        rms_norm_eps=1e-6, rope_theta=10000000.0, partial_rotary_factor=0.25, full_attention_interval=4,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
        linear_num_value_heads=48, tie_word_embeddings=False)),
    "mistral_7b": ("MistralConfig", dict(  # mistralai/Mistral-7B-v0.3
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32768, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False)),
    "mixtral_8x7b": ("MixtralConfig", dict(  # mistralai/Mixtral-8x7B-v0.1
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
        max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
        router_aux_loss_coef=0.02, sliding_window=None, tie_word_embeddings=False)),
    "phi3_mini_4k": ("Phi3Config", dict(  # microsoft/Phi-3-mini-4k-instruct
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=2047, pad_token_id=32000, tie_word_embeddings=False)),
    "phi4": ("Phi3Config", dict(  # microsoft/phi-4
        hidden_size=5120, intermediate_size=17920, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=10, vocab_size=100352, max_position_embeddings=16384, rms_norm_eps=1e-5,
        rope_theta=250000.0, sliding_window=None, pad_token_id=100257, tie_word_embeddings=False)),
    "qwen15_moe_a27b": ("Qwen2MoeConfig", dict(  # Qwen/Qwen1.5-MoE-A2.7B
        hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=1000000.0, router_aux_loss_coef=0.001, use_sliding_window=False,
        tie_word_embeddings=False)),
    "qwen2_57b_a14b": ("Qwen2MoeConfig", dict(  # Qwen/Qwen2-57B-A14B
        hidden_size=3584, intermediate_size=18944, moe_intermediate_size=2560,
        shared_expert_intermediate_size=20480, num_experts=64, num_experts_per_tok=8,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=151936, max_position_embeddings=131072,
        rms_norm_eps=1e-6, rope_theta=1000000.0, router_aux_loss_coef=0.001, use_sliding_window=False,
        tie_word_embeddings=False)),
    "olmo2_1b": ("Olmo2Config", dict(  # allenai/OLMo-2-0425-1B
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=100352, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_theta=500000.0, tie_word_embeddings=False)),
    "olmo2_7b": ("Olmo2Config", dict(  # allenai/OLMo-2-1124-7B
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_theta=500000.0, tie_word_embeddings=False)),
    "olmo2_13b": ("Olmo2Config", dict(  # allenai/OLMo-2-1124-13B
        hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=40, vocab_size=100352, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_theta=500000.0, tie_word_embeddings=False)),
    "olmoe_1b_7b": ("OlmoeConfig", dict(  # allenai/OLMoE-1B-7B-0924
        hidden_size=2048, intermediate_size=1024, num_experts=64, num_experts_per_tok=8,
        norm_topk_prob=False, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
        vocab_size=50304, max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
        router_aux_loss_coef=0.01, clip_qkv=None, tie_word_embeddings=False)),
    "gpt_oss_20b": ("GptOssConfig", dict(  # openai/gpt-oss-20b (bf16: without its quantization_config)
        hidden_size=2880, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4,
        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        vocab_size=201088, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0,
        rope_scaling=_GPT_OSS_YARN, sliding_window=128, swiglu_limit=7.0, attention_bias=True,
        router_aux_loss_coef=0.9, pad_token_id=199999, tie_word_embeddings=False)),
    "gpt_oss_120b": ("GptOssConfig", dict(  # openai/gpt-oss-120b (bf16: without its quantization_config)
        hidden_size=2880, intermediate_size=2880, num_local_experts=128, num_experts_per_tok=4,
        num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        vocab_size=201088, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0,
        rope_scaling=_GPT_OSS_YARN, sliding_window=128, swiglu_limit=7.0, attention_bias=True,
        router_aux_loss_coef=0.9, pad_token_id=199999, tie_word_embeddings=False)),
    "gemma2_2b": ("Gemma2Config", dict(  # google/gemma-2-2b
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, query_pre_attn_scalar=256,
        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh")),
    "gemma2_9b": ("Gemma2Config", dict(  # google/gemma-2-9b
        hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, query_pre_attn_scalar=256,
        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh")),
    "gemma2_27b": ("Gemma2Config", dict(  # google/gemma-2-27b
        hidden_size=4608, intermediate_size=36864, num_hidden_layers=46, num_attention_heads=32,
        num_key_value_heads=16, head_dim=128, vocab_size=256000, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, query_pre_attn_scalar=144,
        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh")),
    "deepseek_v2_lite": ("DeepseekV2Config", dict(  # deepseek-ai/DeepSeek-V2-Lite
        hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=27,
        num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
        num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=None,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=102400,
        max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=_V2_YARN,
        routed_scaling_factor=1.0, topk_method="greedy", n_group=1, topk_group=1, norm_topk_prob=False,
        aux_loss_alpha=0.001, tie_word_embeddings=False)),
    "deepseek_v2": ("DeepseekV2Config", dict(  # deepseek-ai/DeepSeek-V2
        hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=60,
        num_attention_heads=128, num_key_value_heads=128, n_routed_experts=160, n_shared_experts=2,
        num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=102400,
        max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=_V2_YARN,
        routed_scaling_factor=16.0, topk_method="group_limited_greedy", n_group=8, topk_group=3,
        norm_topk_prob=False, aux_loss_alpha=0.001, tie_word_embeddings=False)),
    "deepseek_v3": ("DeepseekV3Config", dict(  # deepseek-ai/DeepSeek-V3
        hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
        num_attention_heads=128, num_key_value_heads=128, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=8, first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
        max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0,
        rope_scaling=dict(_V2_YARN, mscale=1.0, mscale_all_dim=1.0), routed_scaling_factor=2.5,
        topk_method="noaux_tc", n_group=8, topk_group=4, norm_topk_prob=True,
        num_nextn_predict_layers=1, aux_loss_alpha=0.0001, tie_word_embeddings=False)),
    "kimi_k2": ("DeepseekV3Config", dict(  # moonshotai/Kimi-K2-Instruct (model_type kimi_k2, DeepSeek-V3's classes)
        hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
        num_attention_heads=64, num_key_value_heads=64, n_routed_experts=384, n_shared_experts=1,
        num_experts_per_tok=8, first_k_dense_replace=1, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=163840,
        max_position_embeddings=131072, rms_norm_eps=1e-6, rope_theta=50000.0,
        rope_scaling={"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
                      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        routed_scaling_factor=2.827, topk_method="noaux_tc", n_group=1, topk_group=1, norm_topk_prob=True,
        num_nextn_predict_layers=0, aux_loss_alpha=0.001, tie_word_embeddings=False)),
    "moonlight_16b": ("DeepseekV3Config", dict(  # moonshotai/Moonlight-16B-A3B (model_type deepseek_v3)
        hidden_size=2048, intermediate_size=11264, moe_intermediate_size=1408, num_hidden_layers=27,
        num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
        num_experts_per_tok=6, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=163840,
        max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=50000.0, rope_scaling=None,
        routed_scaling_factor=2.446, topk_method="noaux_tc", n_group=1, topk_group=1, norm_topk_prob=True,
        num_nextn_predict_layers=0, aux_loss_alpha=0.001, tie_word_embeddings=False)),
    # Gemma 3: 1b is text only; 4b / 12b / 27b are the text_config of the multimodal models.
    "gemma3_1b": ("Gemma3TextConfig", dict(  # google/gemma-3-1b-pt
        hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, vocab_size=262144, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
        query_pre_attn_scalar=256, sliding_window=512, sliding_window_pattern=6,
        hidden_activation="gelu_pytorch_tanh")),
    "gemma3_4b": ("Gemma3TextConfig", dict(  # google/gemma-3-4b-pt text_config
        hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=262208, max_position_embeddings=131072,
        rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, query_pre_attn_scalar=256,
        sliding_window=1024, sliding_window_pattern=6, hidden_activation="gelu_pytorch_tanh")),
    "gemma3_12b": ("Gemma3TextConfig", dict(  # google/gemma-3-12b-pt text_config
        hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, vocab_size=262208, max_position_embeddings=131072,
        rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, query_pre_attn_scalar=256,
        sliding_window=1024, sliding_window_pattern=6, hidden_activation="gelu_pytorch_tanh")),
    "gemma3_27b": ("Gemma3TextConfig", dict(  # google/gemma-3-27b-pt text_config
        hidden_size=5376, intermediate_size=21504, num_hidden_layers=62, num_attention_heads=32,
        num_key_value_heads=16, head_dim=128, vocab_size=262208, max_position_embeddings=131072,
        rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, query_pre_attn_scalar=168,
        sliding_window=1024, sliding_window_pattern=6, hidden_activation="gelu_pytorch_tanh")),
    # GLM-4.5 / 4.6 (355B) and GLM-4.5-Air (106B); 4.6 differs from 4.5 in its context only.
    "glm45": ("Glm4MoeConfig", dict(_GLM45, max_position_embeddings=131072)),  # zai-org/GLM-4.5
    "glm46": ("Glm4MoeConfig", dict(_GLM45, max_position_embeddings=202752)),  # zai-org/GLM-4.6
    "glm45_air": ("Glm4MoeConfig", dict(  # zai-org/GLM-4.5-Air
        _GLM, hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=46,
        n_routed_experts=128, first_k_dense_replace=1, routed_scaling_factor=1.0, use_qk_norm=False,
        max_position_embeddings=131072)),
    "glm47_flash": ("Glm4MoeLiteConfig", dict(  # zai-org/GLM-4.7-Flash
        hidden_size=2048, intermediate_size=10240, moe_intermediate_size=1536, num_hidden_layers=47,
        num_attention_heads=20, num_key_value_heads=20, n_routed_experts=64, n_shared_experts=1,
        num_experts_per_tok=4, first_k_dense_replace=1, q_lora_rank=768, kv_lora_rank=512,
        qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, vocab_size=154880,
        max_position_embeddings=202752, rms_norm_eps=1e-5, rope_theta=1000000.0, partial_rotary_factor=1.0,
        routed_scaling_factor=1.8, topk_method="noaux_tc", n_group=1, topk_group=1, norm_topk_prob=True,
        num_nextn_predict_layers=1, tie_word_embeddings=False)),
    # LGAI-EXAONE/K-EXAONE-236B-A23B (the sizes as its GGUF metadata lists them; rms_norm_eps the class
    # default, rope_theta Megatron-Bridge's EXAONE-MoE provider)
    "k_exaone_236b_a23b": ("ExaoneMoeConfig", dict(
        hidden_size=6144, intermediate_size=18432, num_hidden_layers=48, num_attention_heads=64,
        num_key_value_heads=8, head_dim=128, vocab_size=153600, max_position_embeddings=262144,
        rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=128, sliding_window_pattern=4,
        num_experts=128, num_experts_per_tok=8, moe_intermediate_size=2048, num_shared_experts=1,
        first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True, n_group=1, topk_group=1,
        num_nextn_predict_layers=1, tie_word_embeddings=False)),
    "minimax_m2": ("MiniMaxM2Config", dict(  # MiniMaxAI/MiniMax-M2
        hidden_size=3072, intermediate_size=1536, num_hidden_layers=62, num_attention_heads=48,
        num_key_value_heads=8, head_dim=128, rotary_dim=64, vocab_size=200064, max_position_embeddings=196608,
        rms_norm_eps=1e-6, rope_theta=5000000.0, num_local_experts=256, num_experts_per_tok=8,
        scoring_func="sigmoid", use_routing_bias=True, router_aux_loss_coef=0.001, tie_word_embeddings=False)),
    "ernie45_21b_a3b": ("Ernie4_5_MoeConfig", dict(  # baidu/ERNIE-4.5-21B-A3B-PT
        _ERNIE, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28, num_attention_heads=20,
        num_key_value_heads=4, moe_intermediate_size=1536, moe_k=6, moe_num_shared_experts=2,
        moe_layer_start_index=1, moe_layer_end_index=27, tie_word_embeddings=True)),
    "ernie45_300b_a47b": ("Ernie4_5_MoeConfig", dict(  # baidu/ERNIE-4.5-300B-A47B-PT
        _ERNIE, hidden_size=8192, intermediate_size=28672, num_hidden_layers=54, num_attention_heads=64,
        num_key_value_heads=8, moe_intermediate_size=3584, moe_k=8, moe_num_shared_experts=0,
        moe_layer_start_index=3, moe_layer_end_index=53, tie_word_embeddings=False)),
    "smollm3_3b": ("SmolLM3Config", dict(  # HuggingFaceTB/SmolLM3-3B
        hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=128256, max_position_embeddings=65536, rms_norm_eps=1e-6,
        rope_theta=5000000.0, tie_word_embeddings=True, no_rope_layer_interval=4,
        use_sliding_window=False, sliding_window=None)),
    "exaone4_1p2b": ("Exaone4Config", dict(  # LGAI-EXAONE/EXAONE-4.0-1.2B
        hidden_size=2048, intermediate_size=4096, num_hidden_layers=30, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=102400, max_position_embeddings=65536,
        rms_norm_eps=1e-5, rope_theta=1000000.0, rope_scaling=_EXAONE4_ROPE, tie_word_embeddings=True,
        sliding_window=None, layer_types=["full_attention"] * 30)),
    "exaone4_32b": ("Exaone4Config", dict(  # LGAI-EXAONE/EXAONE-4.0-32B
        hidden_size=5120, intermediate_size=27392, num_hidden_layers=64, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, vocab_size=102400, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=1000000.0, rope_scaling=_EXAONE4_ROPE, tie_word_embeddings=False,
        sliding_window=4096, sliding_window_pattern="LLLG",
        layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 16)),
    "ernie45_0p3b": ("Ernie4_5Config", dict(  # baidu/ERNIE-4.5-0.3B-PT
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=18, num_attention_heads=16,
        num_key_value_heads=2, head_dim=128, vocab_size=103424, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, use_bias=False)),
    "granite33_2b": ("GraniteConfig", dict(  # ibm-granite/granite-3.3-2b-base
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=49159, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=10000000.0, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
        logits_scaling=8.0)),
    "granite33_8b": ("GraniteConfig", dict(  # ibm-granite/granite-3.3-8b-base
        hidden_size=4096, intermediate_size=12800, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=49159, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=10000000.0, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
        logits_scaling=16.0)),
    # OLMo 3: the published (long-context) checkpoints, YaRN on the global layers (rope_scaling)
    "olmo3_7b": ("Olmo3Config", dict(  # allenai/Olmo-3-1025-7B
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=100278, max_position_embeddings=65536, rms_norm_eps=1e-6,
        rope_theta=500000.0, rope_scaling=_OLMO3_YARN, sliding_window=4096, tie_word_embeddings=False)),
    "olmo3_32b": ("Olmo3Config", dict(  # allenai/Olmo-3-1125-32B
        hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
        num_key_value_heads=8, vocab_size=100278, max_position_embeddings=65536, rms_norm_eps=1e-6,
        rope_theta=500000.0, rope_scaling=_OLMO3_YARN, sliding_window=4096, tie_word_embeddings=False)),
    "gemma_2b": ("GemmaConfig", dict(  # google/gemma-2b
        hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
        num_key_value_heads=1, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, hidden_act="gelu")),
    "gemma_7b": ("GemmaConfig", dict(  # google/gemma-7b
        hidden_size=3072, intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=16, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, hidden_act="gelu")),
    "minitron_4b": ("NemotronConfig", dict(  # nvidia/Minitron-4B-Base
        hidden_size=3072, intermediate_size=9216, num_hidden_layers=32, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, vocab_size=256000, max_position_embeddings=4096,
        norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.5, hidden_act="relu2",
        tie_word_embeddings=False)),
    "minitron_8b": ("NemotronConfig", dict(  # nvidia/Minitron-8B-Base
        hidden_size=4096, intermediate_size=16384, num_hidden_layers=32, num_attention_heads=48,
        num_key_value_heads=8, head_dim=128, vocab_size=256000, max_position_embeddings=4096,
        norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.5, hidden_act="relu2",
        tie_word_embeddings=False)),
    "glm4_9b": ("Glm4Config", dict(  # THUDM/GLM-4-9B-0414
        hidden_size=4096, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=2, head_dim=128, vocab_size=151552, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.5, attention_bias=True,
        tie_word_embeddings=False)),
    "glm4_32b_0414": ("Glm4Config", dict(  # THUDM/GLM-4-32B-0414
        hidden_size=6144, intermediate_size=23040, num_hidden_layers=61, num_attention_heads=48,
        num_key_value_heads=2, head_dim=128, vocab_size=151552, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.5, attention_bias=True,
        tie_word_embeddings=False)),
    "starcoder2_3b": ("Starcoder2Config", dict(  # bigcode/starcoder2-3b
        hidden_size=3072, intermediate_size=12288, num_hidden_layers=30, num_attention_heads=24,
        num_key_value_heads=2, vocab_size=49152, max_position_embeddings=16384, norm_epsilon=1e-5,
        rope_theta=999999.4420358813, sliding_window=4096, use_bias=True, hidden_act="gelu_pytorch_tanh",
        initializer_range=0.018042, tie_word_embeddings=True)),
    "starcoder2_7b": ("Starcoder2Config", dict(  # bigcode/starcoder2-7b
        hidden_size=4608, intermediate_size=18432, num_hidden_layers=32, num_attention_heads=36,
        num_key_value_heads=4, vocab_size=49152, max_position_embeddings=16384, norm_epsilon=1e-5,
        rope_theta=1000000.0, sliding_window=4096, use_bias=True, hidden_act="gelu_pytorch_tanh",
        initializer_range=0.018042, tie_word_embeddings=True)),
    "starcoder2_15b": ("Starcoder2Config", dict(  # bigcode/starcoder2-15b
        hidden_size=6144, intermediate_size=24576, num_hidden_layers=40, num_attention_heads=48,
        num_key_value_heads=4, vocab_size=49152, max_position_embeddings=16384, norm_epsilon=1e-5,
        rope_theta=100000.0, sliding_window=4096, use_bias=True, hidden_act="gelu_pytorch_tanh",
        initializer_range=0.01275, tie_word_embeddings=True)),
    "nemotronh_4b": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/Nemotron-H-4B-Base-8K
        hybrid_override_pattern=_H_V1, hidden_size=3072, intermediate_size=12288, num_attention_heads=32,
        mamba_num_heads=112, mamba_head_dim=64, ssm_state_size=128, max_position_embeddings=8192)),
    "nemotronh_8b": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/Nemotron-H-8B-Base-8K
        hybrid_override_pattern=_H_V1, hidden_size=4096, intermediate_size=21504, num_attention_heads=32,
        mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, max_position_embeddings=8192)),
    "nemotronh_47b": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/Nemotron-H-47B-Base-8K
        hybrid_override_pattern="M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-",
        hidden_size=8192, intermediate_size=30720, num_attention_heads=64, mamba_num_heads=256,
        mamba_head_dim=64, ssm_state_size=256, max_position_embeddings=8192)),
    "nemotronh_56b": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/Nemotron-H-56B-Base-8K
        hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
        "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        hidden_size=8192, intermediate_size=32768, num_attention_heads=64, mamba_num_heads=256,
        mamba_head_dim=64, ssm_state_size=256, max_position_embeddings=8192)),
    "nemotron_nano_9b_v2": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/NVIDIA-Nemotron-Nano-9B-v2
        hybrid_override_pattern="M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-", hidden_size=4480,
        intermediate_size=15680, num_attention_heads=40, mamba_num_heads=128, mamba_head_dim=80,
        ssm_state_size=128, max_position_embeddings=131072)),
    "nemotron_nano_12b_v2": ("NemotronHConfig", dict(_NEMOTRON_H,  # nvidia/NVIDIA-Nemotron-Nano-12B-v2
        hybrid_override_pattern="M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-",
        hidden_size=5120, intermediate_size=20480, num_attention_heads=40, mamba_num_heads=128,
        mamba_head_dim=80, ssm_state_size=128, max_position_embeddings=131072)),
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 (the sizes as Megatron-Bridge's Nemotron 3 Nano recipe
    # lists them; the context length is not math and is left at the class default)
    "nemotron_3_nano_30b_a3b": ("NemotronHConfig", dict(_NEMOTRON_H,
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", hidden_size=2688,
        intermediate_size=1856, num_attention_heads=32, num_key_value_heads=2, mamba_num_heads=64,
        mamba_head_dim=64, ssm_state_size=128, n_routed_experts=128, moe_intermediate_size=1856,
        moe_shared_expert_intermediate_size=3712, num_experts_per_tok=6, routed_scaling_factor=2.5,
        n_group=1, topk_group=1, norm_topk_prob=True)),
}  # fmt: skip
# HF architecture of a config class, where it is not the class name with ForCausalLM for Config.
# Vision-language presets (llava-hf/llava-1.5-{7b,13b}-hf's config.json): their language model's values
# are those of text_config, checked against the preset in tests/unit/test_vlm_presets.py; the parameter
# count below builds the whole model (vision tower and projector included).
_LLAVA15 = dict(
    image_token_index=32000, projector_hidden_act="gelu", vision_feature_layer=-2,
    vision_feature_select_strategy="default", vocab_size=32064,
    vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                       num_hidden_layers=24, num_attention_heads=16, image_size=336, patch_size=14,
                       projection_dim=768, vocab_size=32000),
)  # fmt: skip
_LLAVA15_TEXT = dict(
    model_type="llama", vocab_size=32064, max_position_embeddings=4096, rms_norm_eps=1e-5,
)  # fmt: skip
VLM = {
    "llava15_7b": ("LlavaConfig", dict(_LLAVA15, text_config=dict(_LLAVA15_TEXT))),
    "llava15_13b": ("LlavaConfig", dict(_LLAVA15, text_config=dict(
        _LLAVA15_TEXT, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=40,
    ))),
}  # fmt: skip
# Qwen/Qwen2.5-VL-{3B,7B,32B,72B}-Instruct's config.json (transformers 5 nests the language model in
# text_config; M-RoPE sections [16, 24, 24]).
_QWEN25_VL_VISION = dict(
    depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, hidden_act="silu", in_channels=3,
    patch_size=14, spatial_merge_size=2, temporal_patch_size=2, tokens_per_second=2, window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31],
)  # fmt: skip


def _qwen25_vl(tied: bool = False, **text) -> tuple[str, dict]:
    return ("Qwen2_5_VLConfig", dict(
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
        tie_word_embeddings=tied, vision_config=dict(_QWEN25_VL_VISION, out_hidden_size=text["hidden_size"]),
        text_config=dict(model_type="qwen2_5_vl_text", max_position_embeddings=128000, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="mrope", mrope_section=[16, 24, 24], rope_theta=1000000.0),
                         tie_word_embeddings=tied, **text),
    ))  # fmt: skip


VLM |= {
    "qwen25_vl_3b": _qwen25_vl(True, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                               num_attention_heads=16, num_key_value_heads=2, vocab_size=151936),
    "qwen25_vl_7b": _qwen25_vl(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                               num_attention_heads=28, num_key_value_heads=4, vocab_size=152064),
    "qwen25_vl_32b": _qwen25_vl(hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                                num_attention_heads=40, num_key_value_heads=8, vocab_size=152064),
    "qwen25_vl_72b": _qwen25_vl(hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                                num_attention_heads=64, num_key_value_heads=8, vocab_size=152064),
}  # fmt: skip


# Qwen/Qwen3-VL-8B-Instruct's config.json (transformers 5 layout: the RoPE keys as rope_parameters).
VLM["qwen3_vl_8b"] = ("Qwen3VLConfig", dict(
    image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
    tie_word_embeddings=False,
    vision_config=dict(
        depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, hidden_act="gelu_pytorch_tanh",
        in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
        deepstack_visual_indexes=[8, 16, 24], out_hidden_size=4096),
    text_config=dict(
        model_type="qwen3_vl_text", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=262144, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", mrope_section=[24, 20, 20], mrope_interleaved=True,
                             rope_theta=5000000.0)),
))  # fmt: skip


# Qwen/Qwen3-VL-30B-A3B-Instruct's and Qwen/Qwen3-VL-235B-A22B-Instruct's config.json: Qwen3-VL's image side
# (its merger to the language model's width) and a Qwen3-MoE language model of 128 experts, 8 per token.
def _qwen3_vl_moe(**text) -> tuple[str, dict]:
    return ("Qwen3VLMoeConfig", dict(
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
        tie_word_embeddings=False,
        vision_config=dict(VLM["qwen3_vl_8b"][1]["vision_config"], out_hidden_size=text["hidden_size"]),
        text_config=dict(
            model_type="qwen3_vl_moe_text", vocab_size=151936, head_dim=128, max_position_embeddings=262144,
            rms_norm_eps=1e-6, num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=True, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", mrope_section=[24, 20, 20], mrope_interleaved=True,
                                 rope_theta=5000000.0), **text),
    ))  # fmt: skip


VLM["qwen3_vl_30b_a3b"] = _qwen3_vl_moe(
    hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
    num_attention_heads=32, num_key_value_heads=4,
)  # fmt: skip
VLM["qwen3_vl_235b_a22b"] = _qwen3_vl_moe(
    hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=94,
    num_attention_heads=64, num_key_value_heads=4,
)  # fmt: skip

# google/gemma-3-{4b,12b,27b}-it's config.json: SigLIP So400m at 896 px (no pooling head), 256 image
# tokens; text_config is the gemma3 text preset's published config (above).
_GEMMA3_VL = dict(
    boi_token_index=255999, eoi_token_index=256000, image_token_index=262144, mm_tokens_per_image=256,
    vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                       num_hidden_layers=27, num_attention_heads=16, image_size=896, patch_size=14,
                       vision_use_head=False),
)  # fmt: skip
for _size in ("4b", "12b", "27b"):
    VLM[f"gemma3_{_size}_it"] = (
        "Gemma3Config",
        dict(_GEMMA3_VL, text_config=dict(PUBLISHED[f"gemma3_{_size}"][1], model_type="gemma3_text")),
    )
# mistralai/Mistral-Small-3.1-24B-Instruct-2503 is transformers' Mistral3Config default (its docstring
# says so): the image side's published keys are read from transformers' default config, not typed here.
_MISTRAL3 = transformers.Mistral3Config()
VLM["mistral_small_31_24b"] = ("Mistral3Config", dict(
    tie_word_embeddings=False,  # the checkpoint has its own output head (the class default ties them)
    image_token_index=_MISTRAL3.image_token_index, spatial_merge_size=_MISTRAL3.spatial_merge_size,
    projector_hidden_act=_MISTRAL3.projector_hidden_act, vision_feature_layer=_MISTRAL3.vision_feature_layer,
    multimodal_projector_bias=_MISTRAL3.multimodal_projector_bias,
    vision_config={k: getattr(_MISTRAL3.vision_config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "image_size",
        "patch_size", "head_dim", "hidden_act")},
))  # fmt: skip
# mistralai/Ministral-3-8B-Base-2512's language model is transformers' Ministral3Config default; the 3B's
# and 14B's differ from it in these keys (the sources: bridge/models/ministral3/presets.py)
PUBLISHED["ministral3_8b"] = ("Ministral3Config", {})
MINISTRAL3_TEXT = {"ministral3_3b", "ministral3_8b", "ministral3_14b"}
PUBLISHED["ministral3_3b"] = (
    "Ministral3Config",
    dict(hidden_size=3072, intermediate_size=9216, num_hidden_layers=26, tie_word_embeddings=True),
)
_ROPE_1E9 = dict(transformers.Ministral3Config().rope_parameters, rope_theta=1e9)
PUBLISHED["ministral3_14b"] = (
    "Ministral3Config",
    dict(hidden_size=5120, intermediate_size=16384, num_hidden_layers=40, rope_parameters=_ROPE_1E9),
)
# mistralai/Ministral-3-{3B,8B,14B}-Instruct-2512: Mistral Small 3.1's image side (transformers' Mistral3Config
# defaults, as above) on the Ministral 3 language model of the size
for _size in ("3b", "8b", "14b"):
    _text = PUBLISHED[f"ministral3_{_size}"][1]
    VLM[f"ministral3_{_size}_instruct"] = ("Mistral3Config", dict(
        VLM["mistral_small_31_24b"][1], tie_word_embeddings=_text.get("tie_word_embeddings", False),
        text_config=dict(_text, model_type="ministral3")))  # fmt: skip
PUBLISHED |= VLM
ARCHITECTURE = {"Gemma3TextConfig": "Gemma3ForCausalLM", "Qwen3_5TextConfig": "Qwen3_5ForCausalLM"}
# Vocabularies Megatron pads to a multiple of 128 (the padding rows are not HF parameters).
VOCAB_PADDING = {
    "phi3_mini_4k": 64, "gemma3_4b": 64, "gemma3_12b": 64, "gemma3_27b": 64, "granite33_2b": 121,
    "granite33_8b": 121, "olmo3_7b": 74, "olmo3_32b": 74, "llava15_7b": 64, "llava15_13b": 64,
    "gemma3_4b_it": 64, "gemma3_12b_it": 64, "gemma3_27b_it": 64,
}  # fmt: skip
# Families whose presets are checked field by field against the provider the HF config converts to
# (their math lives in fields the generic asserts below do not cover).
CONVERTED_FIELDS = (
    "olmo2", "gemma2", "gemma3", "glm4", "minimax_m2", "ernie45", "smollm3", "exaone4", "granite", "olmo3", "olmoe",
    "gpt_oss", "gemma_", "minitron", "starcoder2", "glm47", "k_exaone", "nemotronh", "nemotron_nano",
    "qwen3_next", "qwen35_", "nemotron_3_", "ministral3_",
)  # fmt: skip
# Presets whose config.json names its experts otherwise (n_routed_experts, moe_num_experts) and routes
# by sigmoid + bias: checked against the provider their published config converts to (above) instead.
OWN_EXPERT_KEYS = {
    "glm45", "glm46", "glm45_air", "minimax_m2", "ernie45_21b_a3b", "ernie45_300b_a47b", "glm47_flash",
    "k_exaone_236b_a23b",
}  # fmt: skip
# Presets of families with LayerNorm and an MLP without gate, outside the generic asserts below (which
# state the RMSNorm / gated-MLP families' values); checked field by field as converted instead.
NOT_RMSNORM_GATED = ("minitron", "starcoder2", "nemotronh", "nemotron_nano", "nemotron_3_")  # and the hybrids
QKV_BIAS = {
    *("glm4_9b", "glm4_32b_0414"),
    *("qwen2_500m", "qwen2_1p5b", "qwen2_7b", "qwen2_72b"),
    *("qwen25_500m", "qwen25_1p5b", "qwen25_7b", "qwen25_14b", "qwen25_32b", "qwen25_72b"),
    *("qwen15_moe_a27b", "qwen2_57b_a14b"),
}
DEEPSEEK = {"deepseek_v2_lite", "deepseek_v2", "deepseek_v3", "kimi_k2", "moonlight_16b"}
# multi-latent attention without query compression (q_lora_rank None): refused by megatron-core 0.19.2
# (bridge.models.provider_checks.check_mla_query_norm)
NO_QUERY_COMPRESSION = {"deepseek_v2_lite", "moonlight_16b"}
# Biased linears, attention sinks and YaRN: checked field by field against the provider the published
# config converts to (CONVERTED_FIELDS), not by the generic asserts below.
GPT_OSS = {"gpt_oss_20b", "gpt_oss_120b"}
# Megatron-Core builds 9600 / 14848 / 12032 expert MLP modules for these (10-20 s on the meta device), and
# 126 layers of 16384 for the 405B: their count is the planner's formula, which equals the meta-device
# GPTModel on deepseek_v2_lite below (and every other preset's built model equals Hugging Face's).
COUNTED_BY_FORMULA = {
    "deepseek_v2", "deepseek_v3", "kimi_k2", "glm45", "glm46", "glm45_air", "minimax_m2", "ernie45_21b_a3b",
    "ernie45_300b_a47b", "qwen3_235b_a22b", "llama31_405b", "glm47_flash", "k_exaone_236b_a23b",
    "qwen3_next_80b_a3b", "nemotron_3_nano_30b_a3b",
}  # fmt: skip
# Megatron-Core allocates the attention sinks on the current device, never the meta one (0.16.1 and
# 0.19.2): GPT-OSS is counted by the formula, which equals the built model below. So does its Gated
# DeltaNet (conv1d, A_log, dt_bias): Qwen3.5 likewise.
COUNTED_BY_FORMULA |= GPT_OSS | {"qwen35_27b"}


def test_every_preset_has_a_published_config():
    assert set(PUBLISHED) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(DEEPSEEK))
def test_deepseek_preset_math_equals_what_the_published_config_converts_to(name, caplog):
    # Every field that changes the math, as the conversion reads the published config.json.
    from bridge.conversion.registry import family_for
    from bridge.errors import ConfigError
    from bridge.models.hf_translation.read import provider_fields
    from bridge.models.hf_translation.registry import with_class_defaults
    from bridge.models.hf_translation.write import NOT_MATH as _NOT_MATH
    from bridge.models.provider_checks import has_mla_qk_norm_resolver

    cls, values = PUBLISHED[name]
    model_type = "deepseek_v3" if "V3" in cls else "deepseek_v2"
    arch = cls.replace("Config", "ForCausalLM")
    config = with_class_defaults({"model_type": model_type, "architectures": [arch], **values})
    family = family_for([arch])
    if name == "moonlight_16b":
        # transformers' latent norms use a fixed eps of 1e-6, Moonlight's other norms 1e-5: conversion
        # refuses it; with 1e-6 all else converts to the preset (whose norms all keep the published 1e-5)
        with pytest.raises(ConfigError, match="rms_norm_eps"):
            provider_fields(config, family)
        config["rms_norm_eps"] = 1e-6
    if name in NO_QUERY_COMPRESSION and has_mla_qk_norm_resolver():
        # megatron-core 0.19's MLA adds a query norm V2-Lite and Moonlight do not have: refused by the provider's
        # validation (so the dry run refuses it as the build would)
        with pytest.raises(ConfigError, match="QKNormConfigResolver"):
            preset(name).finalize()
        return
    p = preset(name)
    if name == "deepseek_v2":
        # Group-limited greedy ranks groups by their best expert; Megatron-Core by its top-2 sum (6 // 3).
        with pytest.raises(ConfigError, match="n_group/topk_group"):
            provider_fields(config, family)
        config["topk_method"] = "greedy"  # all else as published; the groups are Megatron-Core's
        assert (p.moe_router_num_groups, p.moe_router_group_topk) == (8, 3)
    fields = provider_fields(config, family)
    math = {k: v for k, v in fields.items() if k not in _NOT_MATH}
    if name == "moonlight_16b":
        assert (math.pop("layernorm_epsilon"), p.layernorm_epsilon) == (1e-6, 1e-5)
    if name == "deepseek_v2":
        math |= dict(moe_router_num_groups=8, moe_router_group_topk=3)
    assert {k: getattr(p, k) for k in math} == math
    # The published V3 config's MTP layer converts (mtp_num_layers=1, a training choice: not in `math`);
    # the presets train without it.
    assert fields["mtp_num_layers"] == (1 if name == "deepseek_v3" else None) and p.mtp_num_layers is None
    p.finalize()


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        # ministral3_*: transformers' class defaults (and YaRN), checked as converted (CONVERTED_FIELDS)
        for n in set(PRESETS) - DEEPSEEK - OWN_EXPERT_KEYS - GPT_OSS - set(VLM) - MINISTRAL3_TEXT
        if not n.startswith(NOT_RMSNORM_GATED)
    ),
)
def test_preset_values_equal_published_config(name):
    _, hf = PUBLISHED[name]
    p = preset(name)
    heads = hf["num_attention_heads"]
    assert (p.num_layers, p.hidden_size, p.num_attention_heads) == (
        hf["num_hidden_layers"],
        hf["hidden_size"],
        heads,
    )
    assert p.num_query_groups == hf["num_key_value_heads"]
    assert p.effective_kv_channels() == hf.get("head_dim", hf["hidden_size"] // heads)
    assert p.vocab_size == hf["vocab_size"] and p.seq_length == hf["max_position_embeddings"]
    assert p.layernorm_epsilon == hf["rms_norm_eps"] and p.rotary_base == hf["rope_theta"]
    assert p.share_embeddings_and_output_weights == hf["tie_word_embeddings"]
    activation = "gelu_tanh" if name.startswith("gemma") else "silu"
    assert (p.normalization, p.activation_func, p.gated_linear_unit) == ("RMSNorm", activation, True)
    assert p.position_embedding_type == "rope" and not p.add_bias_linear
    assert p.add_qkv_bias == (name in QKV_BIAS)
    assert p.qk_layernorm == name.startswith(("qwen3", "olmo2", "olmo3", "gemma3", "exaone4", "olmoe"))
    rope = hf.get("rope_scaling")
    if name.startswith("gemma3"):  # linear scaling on the global layers only (checked below, converted)
        assert p.seq_len_interpolation_factor == (rope["factor"] if rope else None)
        assert p.local_rotary_base == hf["rope_local_base_freq"]
        rope = None
    if name.startswith("olmo3"):  # YaRN on the global layers only (checked below, converted)
        assert (p.yarn_rope_factor, p.local_rotary_base) == (rope["factor"], hf["rope_theta"])
        rope = None
    assert p.rope_scaling == (rope is not None)
    if rope:
        assert p.rope_scaling_factor == rope["factor"]
        assert p.rope_scaling_low_freq_factor == rope["low_freq_factor"]
        assert p.rope_scaling_high_freq_factor == rope["high_freq_factor"]
        assert p.rope_scaling_original_max_position_embeddings == rope["original_max_position_embeddings"]
    experts = hf.get("num_experts", hf.get("num_local_experts"))
    assert p.num_moe_experts == experts
    if experts:
        assert p.moe_router_topk == hf["num_experts_per_tok"]
        assert p.moe_ffn_hidden_size == hf.get("moe_intermediate_size", hf["intermediate_size"])
        assert p.moe_aux_loss_coeff == hf["router_aux_loss_coef"]
        # renormalised top-k (pre_softmax False) exactly where HF renormalises (Mixtral always)
        assert p.moe_router_pre_softmax is not hf.get("norm_topk_prob", True)
        shared = hf.get("shared_expert_intermediate_size")
        assert p.moe_shared_expert_intermediate_size == shared
        assert p.moe_shared_expert_gate == bool(shared)  # Qwen2-MoE gates its shared expert
    else:
        assert p.ffn_hidden_size == hf["intermediate_size"]
    window = hf.get("sliding_window")
    assert p.window_size == ([window - 1, 0] if window else None)
    p.finalize()


@pytest.mark.parametrize(
    "name", [n for n in sorted(PRESETS) if n.startswith(CONVERTED_FIELDS) and n not in VLM]
)  # the vision-language presets: test_vlm_preset_equals_what_its_published_config_converts_to
def test_preset_equals_the_provider_its_published_config_converts_to(name):
    from bridge.conversion.registry import family_for
    from bridge.models.hf_translation.read import provider_fields
    from bridge.models.hf_translation.write import NOT_MATH as _NOT_MATH

    cls, values = PUBLISHED[name]
    config = getattr(transformers, cls)(**values)
    arch = ARCHITECTURE.get(cls, cls.replace("Config", "ForCausalLM"))
    fields = provider_fields(config, family_for([arch]))
    p = preset(name)
    have = {k: getattr(p, k) for k in fields} | {"kv_channels": p.effective_kv_channels()}
    differ = {k: (have[k], v) for k, v in fields.items() if k not in _NOT_MATH and have[k] != v}
    assert not differ, differ
    if name in OWN_EXPERT_KEYS:  # the context length too (GLM-4.6 differs from 4.5 in it only)
        assert p.seq_length == fields["seq_length"]


@pytest.fixture(scope="module")
def single_process_groups():
    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    if runtime.is_initialized():
        runtime.destroy_distributed()
    runtime.initialize_distributed(ParallelLayout(world_size=1))
    yield
    runtime.destroy_distributed()


def _hf_meta_param_count(name: str) -> int:
    cls, values = PUBLISHED[name]
    config = getattr(transformers, cls)(**values)
    auto = transformers.AutoModelForImageTextToText if name in VLM else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    # trainable ones: ERNIE 4.5's router correction bias is a frozen parameter there, a buffer in
    # Megatron-Core (as in transformers' other families)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_equals_hugging_face(name, single_process_groups):
    provider = preset(name)
    from tests.functional.workers.convert_models import refused_by_installed_release

    # V2-Lite and Moonlight (no query compression) are refused by megatron-core 0.19.2 (bridge.models.provider_checks.check_mla_query_norm)
    if name in COUNTED_BY_FORMULA or (
        name in NO_QUERY_COMPRESSION and refused_by_installed_release("deepseek_v2")
    ):
        from bridge.parallel.param_count import count_parameters

        assert provider.padded_vocab_size() == provider.vocab_size
        assert count_parameters(provider.model_shape()).total == _hf_meta_param_count(name)
        return
    hf_count = _hf_meta_param_count(name)
    # the hybrids and the vision-language models: the planner's count (per layer kind; vision tower and
    # projector from the config) too
    if name.startswith(("nemotronh_", "nemotron_nano_")) or name in VLM:
        from bridge.parallel.param_count import count_parameters

        assert count_parameters(provider.model_shape()).total == hf_count
    provider.perform_initialization = False  # meta tensors: nothing to initialise
    with torch.device("meta"):
        model = provider.provide()
    # Megatron-Core's Mamba mixer allocates its conv, dt_bias, A_log, D and gated norm on the current
    # device, never the meta one (0.16.1, 0.19.2): small vectors, counted all the same
    assert all(p.device.type == "meta" for n, p in model.named_parameters() if ".mixer." not in n)
    ours = sum(p.numel() for p in model.parameters())
    # Megatron pads the vocabulary to a multiple of 128 (Phi-3's 32064 -> 32128): discount those rows
    # of the embedding and, untied, of the output layer.
    padding = provider.padded_vocab_size() - provider.vocab_size
    tables = 1 if provider.share_embeddings_and_output_weights else 2
    assert padding == VOCAB_PADDING.get(name, 0)
    assert ours - padding * provider.hidden_size * tables == hf_count
    if name == "deepseek_v2_lite":  # the formula COUNTED_BY_FORMULA relies on, against the built model
        from bridge.parallel.param_count import count_parameters

        assert count_parameters(provider.model_shape()).total == ours


def test_biased_linears_and_sinks_formula_equals_the_built_model(single_process_groups):
    # GPT-OSS's layers (every linear biased, the router too, a sink per head, biased experts), two of
    # them with 4 experts so that Megatron-Core builds it on the meta device in well under a second.
    import dataclasses

    from bridge.parallel.param_count import count_parameters

    provider = dataclasses.replace(preset("gpt_oss_20b"), num_layers=2, num_moe_experts=4)
    provider.perform_initialization = False
    with torch.device("meta"):
        model = provider.provide()
    assert count_parameters(provider.model_shape()).total == sum(p.numel() for p in model.parameters())


def test_gated_delta_net_parameter_formula_equals_the_built_model(single_process_groups):
    # Qwen3-Next's layers (Gated DeltaNet three in four, gated attention, q/k norms, a gated shared
    # expert), smaller, on CPU (Megatron-Core puts the Gated DeltaNet's conv and decay parameters on the
    # current device, never the meta one).
    import dataclasses

    from bridge.parallel.param_count import count_parameters

    provider = dataclasses.replace(
        preset("qwen3_next_80b_a3b"), num_layers=4, hidden_size=128, kv_channels=32, num_moe_experts=4,
        moe_router_topk=2, moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=64,
        linear_key_head_dim=16, linear_value_head_dim=24, linear_num_key_heads=4, linear_num_value_heads=8,
        vocab_size=512,
    )  # fmt: skip
    provider.perform_initialization = False
    model = provider.provide()
    assert count_parameters(provider.model_shape()).total == sum(p.numel() for p in model.parameters())


def test_mla_parameter_formula_equals_the_built_model(single_process_groups):
    # DeepSeek-V3's layers (q compression, expert bias, dense first layers, a shared expert), fewer of
    # them and fewer experts so that Megatron-Core builds it on the meta device in well under a second.
    import dataclasses

    from bridge.parallel.param_count import count_parameters

    provider = dataclasses.replace(
        preset("deepseek_v3"), num_layers=3, moe_layer_freq=[0, 1, 1], num_moe_experts=16, moe_router_topk=4,
        moe_router_num_groups=4, moe_router_group_topk=2,
    )  # fmt: skip
    provider.perform_initialization = False
    with torch.device("meta"):
        model = provider.provide()
    assert count_parameters(provider.model_shape()).total == sum(p.numel() for p in model.parameters())


def test_sigmoid_routed_parameter_formula_equals_the_built_model(single_process_groups):
    # GLM-4.5's layers (q/k/v biases, q/k norms, expert bias, a shared expert, a dense first layer),
    # fewer of them and fewer experts so that Megatron-Core builds it on the meta device quickly.
    import dataclasses

    from bridge.parallel.param_count import count_parameters

    provider = dataclasses.replace(
        preset("glm45"), num_layers=3, moe_layer_freq=[0, 1, 1], num_moe_experts=16
    )
    provider.perform_initialization = False
    with torch.device("meta"):
        model = provider.provide()
    assert count_parameters(provider.model_shape()).total == sum(p.numel() for p in model.parameters())


def test_kimi_k2_config_json_with_its_own_model_type_reads_as_the_preset():
    # moonshotai/Kimi-K2-Instruct's config.json: model_type "kimi_k2", architecture DeepseekV3ForCausalLM
    from bridge.models.hf_translation import read, registry

    config = dict(PUBLISHED["kimi_k2"][1], model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"])
    fields = read.provider_fields(
        registry.with_class_defaults(config), registry.hf_family_for(config["architectures"])
    )
    built = preset("kimi_k2")
    differ = {k for k, v in fields.items() if hasattr(built, k) and getattr(built, k) != v}
    assert differ == {"should_pad_vocab"}  # a checkpoint's vocabulary is never padded (the preset's is)


def test_kimi_k2_published_size():
    from bridge.parallel.param_count import count_parameters

    count = count_parameters(preset("kimi_k2").model_shape())  # "1T total parameters, 32B activated"
    assert (round(count.total / 1e12, 2), round(count.active / 1e9)) == (1.03, 33)


def test_moonlight_16b_published_size():
    from bridge.parallel.param_count import count_parameters

    count = count_parameters(preset("moonlight_16b").model_shape())  # "16B total, 3B activated"
    assert (round(count.total / 1e9), round(count.active / 1e9)) == (16, 3)


@pytest.mark.parametrize(
    ("name", "experts_key"), [("glm47_flash", "n_routed_experts"), ("k_exaone_236b_a23b", "num_experts")]
)
def test_active_parameter_count_equals_hugging_face(name, experts_key):
    # active = every parameter but the routed experts a token does not reach: transformers' meta-device model
    # with its routed experts' parameters (mlp.experts.*) counted at num_experts_per_tok / experts
    from bridge.parallel.param_count import count_parameters

    cls, values = PUBLISHED[name]
    config = getattr(transformers, cls)(**values)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    routed = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    total = sum(p.numel() for p in model.parameters())
    share = values["num_experts_per_tok"] / values[experts_key]
    count = count_parameters(preset(name).model_shape())
    assert count.total == total
    assert count.active == total - routed + routed * share


@pytest.mark.parametrize("name", sorted(VLM))
def test_vlm_preset_equals_what_its_published_config_converts_to(name):
    """The language model's math fields as the conversion reads the published text_config, and the
    published image side (vision config, projector, image token) carried as the preset's vlm_config."""
    from bridge import AutoBridge
    from bridge.models.hf_translation.write import NOT_MATH as _NOT_MATH

    cls, values = PUBLISHED[name]
    config = getattr(transformers, cls)(**values).to_dict()
    config["architectures"] = [cls.replace("Config", "ForConditionalGeneration")]
    converted = AutoBridge.from_hf_config(config).to_megatron_provider(load_weights=False)
    p = preset(name)
    differ = {
        f: (getattr(p, f), getattr(converted, f))
        for f in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                  "vocab_size", "seq_length", "layernorm_epsilon", "rotary_base", "normalization",
                  "activation_func", "gated_linear_unit", "share_embeddings_and_output_weights",
                  "add_qkv_bias", "position_embedding_type", "mrope_section", "yarn_rope_factor",
                  "yarn_rope_original_max_position_embeddings", "llama4_attn_scale_beta")
        if f not in _NOT_MATH and getattr(p, f) != getattr(converted, f)
    }  # fmt: skip
    assert not differ, differ
    for key, value in values.items():
        if key == "vision_config":
            assert {k: p.vlm_config[key][k] for k in value} == value
        elif key != "text_config":
            assert p.vlm_config[key] == value, key
    p.finalize()


@pytest.mark.parametrize("name", ["deepseek_v3", "glm45_air"])
def test_mtp_parameter_formula_equals_the_built_model(name, single_process_groups):
    # The planner's count with one multi-token-prediction layer (enorm, hnorm, eh_proj, a decoder layer of
    # the last layer's kind, final norm) against Megatron-Core's MTP block as built: DeepSeek-V3's and
    # GLM-4.5-Air's layers, one dense and one MoE layer of 4 experts, on the meta device.
    import dataclasses

    from bridge.parallel.param_count import count_parameters

    provider = dataclasses.replace(
        preset(name),
        num_layers=2,
        num_moe_experts=4,
        moe_router_topk=2,
        moe_layer_freq=[0, 1],
        mtp_num_layers=1,
    )
    for field in ("moe_router_num_groups", "moe_router_group_topk"):  # DeepSeek-V3 routes within 8 groups
        if getattr(provider, field, None):
            setattr(provider, field, None)
    provider.perform_initialization = False
    with torch.device("meta"):
        model = provider.provide()
    built = sum(p.numel() for p in model.parameters())
    assert any("mtp" in n.split(".") for n, _ in model.named_parameters())  # the block was built
    count = count_parameters(provider.model_shape())
    assert count.total == built
