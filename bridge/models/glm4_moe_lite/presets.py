"""GLM-4.7-Flash (zai-org/GLM-4.7-Flash) provider with the values of the published Hugging Face config.

Multi-latent attention (20 heads, q latent 768, kv latent 512, q/k heads of 192 + 64 rope dims, value
heads of 256), plain RoPE (base 1e6) over 202752 positions, RMSNorm eps 1e-5 (the q/kv latent norms 1e-6,
as transformers builds them), untied embeddings; layer 0 dense, then 64 routed experts (4 per token,
sigmoid scores with an expert bias, renormalised, x1.8) and one shared expert of the expert size. The
published multi-token-prediction layer is a training choice the preset leaves off (mtp_num_layers=None;
model.mtp_num_layers=1 trains it, docs/conversion.md).
"""

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider


def glm47_flash() -> GPTModelProvider:
    """zai-org/GLM-4.7-Flash: 30B (3B active), 47 layers (1 dense)."""
    layers = 47
    return llama_style_provider(
        num_layers=layers,
        hidden_size=2048,
        ffn_hidden_size=10240,
        num_attention_heads=20,
        num_query_groups=20,
        vocab_size=154880,
        seq_length=202752,
        layernorm_epsilon=1e-5,
        multi_latent_attention=True,
        qk_layernorm=True,  # q_a_layernorm / kv_a_layernorm
        mla_latent_layernorm_epsilon=1e-6,
        q_lora_rank=768,
        kv_lora_rank=512,
        qk_head_dim=192,
        qk_pos_emb_head_dim=64,
        v_head_dim=256,
        kv_channels=256,  # qk_head_dim + qk_pos_emb_head_dim
        rotary_base=1000000,
        rope_type="rope",
        rotary_scaling_factor=1.0,
        mscale=1.0,
        mscale_all_dim=0.0,
        num_moe_experts=64,
        moe_router_topk=4,
        moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=1536,
        moe_shared_expert_gate=False,
        moe_layer_freq=[0] + [1] * (layers - 1),
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=1.8,
        moe_router_dtype="fp32",
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_token_dispatcher_type="alltoall",
    )
