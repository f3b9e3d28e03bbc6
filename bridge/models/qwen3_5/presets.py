"""Qwen3.5 text providers with the values of the published Hugging Face configs (their text_config)."""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def qwen35_27b() -> GPTModelProvider:
    """Qwen/Qwen3.5-27B, its language model (Qwen3_5ForCausalLM): 64 layers, three Gated DeltaNet layers
    (16 key heads, 48 value heads of 128) then one gated softmax-attention layer (24 heads, 4 KV heads of
    256, RoPE over a quarter of each head); a dense SwiGLU MLP of 17408."""
    return llama_style_provider(
        num_layers=64,
        hidden_size=5120,
        ffn_hidden_size=17408,
        num_attention_heads=24,
        num_query_groups=4,
        kv_channels=256,
        vocab_size=248320,
        seq_length=262144,
        layernorm_epsilon=1e-6,
        rotary_base=10000000,
        rotary_percent=0.25,
        qk_layernorm=True,
        layernorm_zero_centered_gamma=True,
        attention_output_gate=True,
        experimental_attention_variant="gated_delta_net",
        linear_attention_freq=4,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=16,
        linear_num_value_heads=48,
    )
