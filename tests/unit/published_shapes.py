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
