"""Hugging Face config -> GPTModelProvider fields: every value that changes the math, or a ConfigError.

Reads both transformers 5 (`rope_parameters`) and 4.x (`rope_theta` + `rope_scaling`) configs. A setting
the provider cannot express (e.g. a rope type other than default/llama3, biases on the output
projection) is refused rather than dropped. What a family reads differently comes from its hooks
(`family.hf_config`, see bridge.models.hf_translation.rules).
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import get, hf_dtype_name, refuse
from bridge.models.hf_translation.rules import FamilyRules, TranslatedFamily


def rope_fields(cfg: Any, rules: FamilyRules | None = None) -> dict[str, Any]:
    """One RoPE for every layer: default, or llama3 scaling (`rules`: the family's refusal notes)."""
    params = dict(get(cfg, "rope_parameters") or {})
    legacy = get(cfg, "rope_scaling") or {}
    theta = params.get("rope_theta", get(cfg, "rope_theta", 10000.0))
    scaling = {**legacy, **params}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    out: dict[str, Any] = {"position_embedding_type": "rope", "rotary_base": theta}
    partial = scaling.get("partial_rotary_factor")
    if partial is None:
        partial = get(cfg, "partial_rotary_factor")
    if partial is None:  # the config class's default share (transformers fills it in likewise)
        partial = (rules or FamilyRules()).partial_rotary_default
    out["rotary_percent"] = float(partial)
    if rope_type == "default":
        return out
    if rope_type != "llama3":
        note = (rules or FamilyRules()).rope_type_notes.get(rope_type)
        raise refuse(
            "rope_parameters.rope_type",
            rope_type,
            "only 'default' and 'llama3' RoPE are supported" + (f" ({note[0]})" if note else ""),
            note[1] if note else "convert a model with default or llama3 RoPE",
        )
    out.update(
        rope_scaling=True,
        rope_scaling_factor=float(scaling["factor"]),
        rope_scaling_low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
        rope_scaling_high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
        rope_scaling_original_max_position_embeddings=int(
            scaling.get("original_max_position_embeddings", 8192)
        ),
    )
    return out


def moe_layer_pattern(cfg: Any) -> list[int]:
    """Per layer 1 (MoE block) or 0 (dense MLP), as transformers decides it from decoder_sparse_step and
    mlp_only_layers: MoE where the layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0."""
    layers = int(get(cfg, "num_hidden_layers"))
    step = get(cfg, "decoder_sparse_step", 1)
    step = 1 if step is None else step
    dense = set(get(cfg, "mlp_only_layers") or [])
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise refuse("decoder_sparse_step", step, "must be a positive integer", "use 1 (every layer MoE)")
    bad = sorted(i for i in dense if not isinstance(i, int) or not 0 <= i < layers)
    if bad:
        raise refuse(
            "mlp_only_layers",
            sorted(dense, key=str),
            f"holds {bad}, not layer indices of a {layers}-layer model",
            f"list layer indices between 0 and {layers - 1}",
        )
    return [int(i not in dense and (i + 1) % step == 0) for i in range(layers)]


def moe_fields(cfg: Any) -> dict[str, Any]:
    """The routed experts, under either naming of their count (num_local_experts or num_experts)."""
    experts = get(cfg, "num_local_experts") or get(cfg, "num_experts")
    if not experts:
        return {}
    ffn = get(cfg, "moe_intermediate_size") or get(cfg, "intermediate_size")
    # A config without norm_topk_prob always renormalises the top-k weights; others do when it is set.
    # Megatron: top-k then softmax (pre_softmax=False) == softmax, top-k, renormalise.
    renormalise = get(cfg, "norm_topk_prob", True)
    jitter = get(cfg, "router_jitter_noise", 0.0) or None
    out = dict(
        num_moe_experts=int(experts),
        moe_router_topk=int(get(cfg, "num_experts_per_tok")),
        moe_ffn_hidden_size=int(ffn),
        moe_router_score_function="softmax",
        moe_router_pre_softmax=not renormalise,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=float(get(cfg, "router_aux_loss_coef", 0.0) or 0.0),
        moe_input_jitter_eps=jitter,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )
    pattern = moe_layer_pattern(cfg)
    if not any(pattern):
        raise refuse(
            "decoder_sparse_step/mlp_only_layers",
            (get(cfg, "decoder_sparse_step", 1), get(cfg, "mlp_only_layers") or []),
            "leave no MoE layer, but the config declares experts",
            "keep at least one MoE layer, or convert the model as a dense family",
        )
    if not all(pattern):
        # Megatron-Core's list form of moe_layer_freq: 1 = MoE layer, 0 = dense MLP of ffn_hidden_size
        # (HF intermediate_size). Its integer form (i % N == 0) starts with a MoE layer, HF's
        # decoder_sparse_step ((i + 1) % N == 0) ends with one: always the list.
        out["moe_layer_freq"] = pattern
    return out


def _check_common(cfg: Any, family: TranslatedFamily) -> None:
    rules = family.hf_config
    act = get(cfg, "hidden_act", "silu")
    if act != "silu" and not rules.own_activation:
        raise refuse("hidden_act", act, "the supported families use SwiGLU (silu)", "use a silu model")
    if get(cfg, "mlp_bias", False):
        raise refuse(
            "mlp_bias",
            True,
            "biases on the MLP are not part of these families",
            "convert a model without them",
        )
    own_bias = rules.own_attention_bias or family.provider_fields.get("add_qkv_bias")
    if get(cfg, "attention_bias", False) and not own_bias:
        raise refuse(
            "attention_bias",
            True,
            f"the {family.name} mapping has no attention biases",
            "convert a model with attention_bias=false",
        )
    if rules.check is not None:
        rules.check(cfg)
    if get(cfg, "use_sliding_window", False):
        raise refuse(
            "use_sliding_window",
            True,
            "per-layer sliding windows are not supported",
            "convert a model with use_sliding_window=false",
        )


def base_fields(cfg: Any, eps_key: str = "rms_norm_eps") -> dict[str, Any]:
    """The sizes, norms, window and dtype every family reads alike (`eps_key`: the norm epsilon's key)."""
    heads = int(get(cfg, "num_attention_heads"))
    hidden = int(get(cfg, "hidden_size"))
    layers = get(cfg, "num_hidden_layers")  # None: a config that counts its layers otherwise (translate)
    fields: dict[str, Any] = dict(
        num_layers=int(layers) if layers is not None else None,
        hidden_size=hidden,
        # a MoE config class without a dense MLP (every layer sparse): the experts' size, never used
        ffn_hidden_size=int(get(cfg, "intermediate_size") or get(cfg, "moe_intermediate_size")),
        num_attention_heads=heads,
        num_query_groups=int(get(cfg, "num_key_value_heads") or heads),
        kv_channels=int(get(cfg, "head_dim") or hidden // heads),
        seq_length=int(get(cfg, "max_position_embeddings")),
        vocab_size=int(get(cfg, "vocab_size")),
        normalization="RMSNorm",
        layernorm_epsilon=float(get(cfg, eps_key)),
        activation_func="silu",
        gated_linear_unit=True,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=False,
        hidden_dropout=0.0,
        attention_dropout=float(get(cfg, "attention_dropout", 0.0) or 0.0),
        init_method_std=float(get(cfg, "initializer_range", 0.02)),
        share_embeddings_and_output_weights=bool(get(cfg, "tie_word_embeddings", False)),
        make_vocab_size_divisible_by=128,
        # The HF vocabulary as is (Megatron-Bridge's rule): padding rows would change the math of a model
        # another framework trained, and the HF folder holds exactly vocab_size rows.
        should_pad_vocab=False,
    )
    window = get(cfg, "sliding_window")
    if window is not None and get(cfg, "use_sliding_window") is None:
        # HF attends to the last `window` keys including itself; Megatron's (left, right) excludes it.
        # (A config with a use_sliding_window switch windows only when it is set: refused in _check_common.)
        # A window of at least max_position_embeddings keys never masks a key of a sequence the model
        # takes (e.g. 262144 vs 131072): no window, so the fused sdpa attention stays usable.
        if int(window) < fields["seq_length"]:
            fields["window_size"] = [int(window) - 1, 0]
    dtype = hf_dtype_name(cfg)
    fields["params_dtype"] = dtype
    fields["bf16"] = dtype == "bf16"
    fields["fp16"] = dtype == "fp16"
    return fields


def provider_fields(cfg: Any, family: TranslatedFamily) -> dict[str, Any]:
    """GPTModelProvider keyword arguments for an HF config (a PretrainedConfig or its dict)."""
    rules = family.hf_config
    _check_common(cfg, family)
    fields = base_fields(cfg, rules.norm_eps_key)
    if rules.translate is not None:  # the family translates everything past the common fields
        return rules.translate(cfg, fields) | family.provider_fields
    if fields["num_layers"] is None:
        raise refuse(
            "num_hidden_layers", None, "is needed to size the model", "give the config its layer count"
        )
    fields.update(rules.rope_fields(cfg) if rules.rope_fields is not None else rope_fields(cfg, rules))
    fields.update(moe_fields(cfg))
    if rules.provider_fields is not None:
        fields.update(rules.provider_fields(cfg))
    fields.update(family.provider_fields)
    return fields


# Math fields provider_fields sets only for some configs (RoPE scaling, sliding windows, experts): a
# model section filled from a config.json without them must have them at the provider's defaults.
OPTIONAL_MATH_FIELDS = (
    "rope_scaling",
    "rope_scaling_factor",
    "rope_scaling_low_freq_factor",
    "rope_scaling_high_freq_factor",
    "rope_scaling_original_max_position_embeddings",
    "window_size",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_router_score_function",
    "moe_router_pre_softmax",
    "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate",
    "moe_layer_freq",
    "window_attn_skip_freq",
    "softmax_scale",
    "layernorm_zero_centered_gamma",
    "layernorm_placement",
    "qk_layernorm_scope",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "scale_embeddings_by_sqrt_hidden",
    # multi-latent attention and its RoPE, group-limited and biased routing
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "rope_type",
    "rotary_scaling_factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "mla_latent_layernorm_epsilon",
    "moe_router_topk_scaling_factor",
    "moe_router_enable_expert_bias",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_dtype",
    "seq_len_interpolation_factor",
    "local_rotary_base",
    "rotary_interleaved",
    "moe_router_softmax_scores",
    "no_rope_freq",
    "embedding_multiplier",
    "branch_output_multiplier",
    "logits_divisor",
    "yarn_rope_factor",
    "yarn_rope_original_max_position_embeddings",
    "yarn_rope_beta_fast",
    "yarn_rope_beta_slow",
    "yarn_rope_attention_factor",
    "llama4_attn_scale_beta",
    "llama4_attn_scale_original_max_position_embeddings",
    # Gated DeltaNet layers and the gated softmax attention beside them
    "experimental_attention_variant",
    "linear_attention_freq",
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "attention_output_gate",
    # attention sinks, the clamped GLU and YaRN on GPTModel's RoPE
    "softmax_type",
    "activation_func_clamp_value",
    "glu_linear_offset",
    "yarn_rotary_scaling_factor",
    "yarn_original_max_position_embeddings",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_correction_range_round_to_int",
    "yarn_mscale",
    "yarn_mscale_all_dim",
)
