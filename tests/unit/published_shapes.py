"""Published model configs written as ModelShapes by hand (Megatron field names), shared by planner tests."""

from bridge.parallel.layout import ModelShape

LLAMA32_1B = ModelShape(
    16,
    32,
    8,
    8192,
    hidden_size=2048,
    vocab_size=128256,
    kv_channels=64,
    share_embeddings_and_output_weights=True,
)
LLAMA31_8B = ModelShape(32, 32, 8, 14336, hidden_size=4096, vocab_size=128256)
LLAMA31_70B = ModelShape(80, 64, 8, 28672, hidden_size=8192, vocab_size=128256, seq_length=8192)
QWEN3_30B_A3B = ModelShape(
    48,
    32,
    4,
    6144,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_ffn_hidden_size=768,
    hidden_size=2048,
    vocab_size=151936,
    kv_channels=128,
    qk_layernorm=True,
)
MIXTRAL_8X7B = ModelShape(
    32, 32, 8, 14336, num_moe_experts=8, moe_router_topk=2, hidden_size=4096, vocab_size=32000
)
PHI3_MINI_4K = ModelShape(32, 32, 32, 8192, hidden_size=3072, vocab_size=32064)
QWEN15_MOE_A27B = ModelShape(
    24,
    16,
    16,
    5632,
    num_moe_experts=60,
    moe_router_topk=4,
    moe_ffn_hidden_size=1408,
    moe_shared_expert_intermediate_size=5632,
    moe_shared_expert_gate=True,
    hidden_size=2048,
    vocab_size=151936,
    add_qkv_bias=True,
)
QWEN2_57B_A14B = ModelShape(
    28,
    28,
    4,
    18944,
    num_moe_experts=64,
    moe_router_topk=8,
    moe_ffn_hidden_size=2560,
    moe_shared_expert_intermediate_size=20480,
    moe_shared_expert_gate=True,
    hidden_size=3584,
    vocab_size=151936,
    add_qkv_bias=True,
)
# allenai/OLMo-2-1124-7B: q/k norms over whole projections (2 x 4096 weights per layer)
OLMO2_7B = ModelShape(
    32,
    32,
    32,
    11008,
    hidden_size=4096,
    vocab_size=100352,
    qk_layernorm=True,
    qk_layernorm_per_projection=True,
)
# allenai/OLMoE-1B-7B-0924: 64 experts of 1024 in every layer, 8 per token; q/k norms over whole projections
OLMOE_1B_7B = ModelShape(
    16,
    16,
    16,
    1024,
    num_moe_experts=64,
    moe_router_topk=8,
    moe_ffn_hidden_size=1024,
    hidden_size=2048,
    vocab_size=50304,
    qk_layernorm=True,
    qk_layernorm_per_projection=True,
)
# openai/gpt-oss-20b: 32 biased experts of 2880, 4 per token; biases on every linear, a sink per head
GPT_OSS_20B = ModelShape(
    24,
    64,
    8,
    2880,
    num_moe_experts=32,
    moe_router_topk=4,
    moe_ffn_hidden_size=2880,
    hidden_size=2880,
    vocab_size=201088,
    kv_channels=64,
    add_qkv_bias=True,
    add_bias_linear=True,
    attention_sinks=True,
)
# google/gemma-2-2b: four norms per layer (sandwich), head_dim 256, tied embeddings
GEMMA2_2B = ModelShape(
    26,
    8,
    4,
    9216,
    hidden_size=2304,
    vocab_size=256000,
    kv_channels=256,
    share_embeddings_and_output_weights=True,
    layer_norms=4,
)
# DeepSeek: multi-latent attention (kv_lora_rank 512, q/k heads of 128 + 64 rope dims, values of 128),
# the first layer(s) dense, shared experts of n_shared_experts * moe_intermediate_size.
_DEEPSEEK_MLA = dict(
    multi_latent_attention=True,
    qk_layernorm=True,
    kv_lora_rank=512,
    qk_head_dim=128,
    qk_pos_emb_head_dim=64,
    v_head_dim=128,
    kv_channels=192,
)
DEEPSEEK_V2_LITE = ModelShape(
    27,
    16,
    16,
    10944,
    num_moe_experts=64,
    moe_router_topk=6,
    moe_ffn_hidden_size=1408,
    moe_shared_expert_intermediate_size=2 * 1408,
    moe_layer_freq=(0,) + (1,) * 26,
    hidden_size=2048,
    vocab_size=102400,
    q_lora_rank=None,
    **_DEEPSEEK_MLA,
)
DEEPSEEK_V3 = ModelShape(
    61,
    128,
    128,
    18432,
    num_moe_experts=256,
    moe_router_topk=8,
    moe_ffn_hidden_size=2048,
    moe_shared_expert_intermediate_size=2048,
    moe_layer_freq=(0,) * 3 + (1,) * 58,
    hidden_size=7168,
    vocab_size=129280,
    q_lora_rank=1536,
    **_DEEPSEEK_MLA,
)
# google/gemma-3-1b-pt: sandwich norms, per-head q/k norms, one KV head, head_dim 256, tied embeddings
GEMMA3_1B = ModelShape(
    26,
    4,
    1,
    6912,
    hidden_size=1152,
    vocab_size=262144,
    kv_channels=256,
    share_embeddings_and_output_weights=True,
    qk_layernorm=True,
    layer_norms=4,
)
