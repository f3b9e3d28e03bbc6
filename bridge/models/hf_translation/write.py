"""GPTModelProvider -> Hugging Face config.json: the keys every family writes, then the family's own
(its `hf_fields` / `moe_hf_fields` / `config_dict` hooks); reading the result back must give the
provider's math fields, else the family cannot express the provider and it is a ConfigError."""

from __future__ import annotations

from typing import Any

from bridge.errors import ConfigError
from bridge.models.hf_translation.common import HF_DTYPES
from bridge.models.hf_translation.read import provider_fields
from bridge.models.hf_translation.rules import TranslatedFamily

_DTYPE_TO_HF = {v: k for k, v in HF_DTYPES.items()}
# Provider fields a config.json does not need to reproduce: training choices, not the model's function.
NOT_MATH = frozenset(
    {
        "seq_length",
        "make_vocab_size_divisible_by",
        "should_pad_vocab",
        "hidden_dropout",
        "attention_dropout",
        "init_method_std",
        "params_dtype",
        "bf16",
        "fp16",
        "moe_token_dispatcher_type",
        "moe_grouped_gemm",
        "moe_router_load_balancing_type",
        "moe_aux_loss_coeff",
        "moe_input_jitter_eps",
        # multi-token prediction is a training choice: a run may train with fewer MTP layers than the
        # folder holds (their tensors are left out, listed, and an export carries them back)
        "mtp_num_layers",
    }
)


def dense_layers(p: Any) -> list[int]:
    """HF mlp_only_layers for the provider's moe_layer_freq (an integer N: MoE where layer % N == 0)."""
    freq = p.moe_layer_freq
    if isinstance(freq, int):
        return [i for i in range(p.num_layers) if i % freq]
    return [i for i, moe in enumerate(freq) if not moe]


def _base_config_dict(p: Any, family: TranslatedFamily, architecture: str) -> dict[str, Any]:
    """The config.json fields every family writes."""
    return {
        "architectures": [architecture],
        "model_type": family.model_type,
        "max_position_embeddings": p.seq_length,
        "vocab_size": p.vocab_size,
        family.hf_config.norm_eps_key: p.layernorm_epsilon,
        "hidden_act": p.activation_func,
        "tie_word_embeddings": p.share_embeddings_and_output_weights,
        "initializer_range": p.init_method_std,
        "attention_dropout": p.attention_dropout,
        "torch_dtype": _DTYPE_TO_HF[p.params_dtype],  # renamed `dtype` by _current_keys
        "rope_theta": p.rotary_base,
    }


def _moe_config_dict(p: Any) -> dict[str, Any]:
    """The expert keys under their common names (num_experts, moe_intermediate_size, ...); a family
    naming its experts otherwise (moe_hf_fields) writes its shared experts itself."""
    return {
        "num_experts": p.num_moe_experts,
        "moe_intermediate_size": p.moe_ffn_hidden_size,
        "norm_topk_prob": not p.moe_router_pre_softmax,
        "decoder_sparse_step": 1,
        "mlp_only_layers": dense_layers(p),
    } | (
        {"shared_expert_intermediate_size": p.moe_shared_expert_intermediate_size}
        if p.moe_shared_expert_intermediate_size
        else {}
    )


def hf_config_dict(provider: Any, family: TranslatedFamily, architecture: str) -> dict[str, Any]:
    """config.json content for `provider` as `architecture`; ConfigError if the family cannot express it."""
    p = provider
    rules = family.hf_config
    if rules.config_dict is not None:  # the family writes its sizes and experts itself
        out = _base_config_dict(p, family, architecture)
        out |= rules.config_dict(p, family.model_type, architecture)
        return _read_back_checked(p, family, architecture, out)
    heads = p.num_attention_heads
    out = _base_config_dict(p, family, architecture) | {
        "hidden_size": p.hidden_size,
        "intermediate_size": p.ffn_hidden_size,
        "num_hidden_layers": p.num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": p.num_query_groups or heads,
        "head_dim": p.kv_channels or p.hidden_size // heads,
    }
    if p.rotary_percent != 1.0:
        out["partial_rotary_factor"] = p.rotary_percent
    if p.rope_scaling:
        out["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": p.rope_scaling_factor,
            "low_freq_factor": p.rope_scaling_low_freq_factor,
            "high_freq_factor": p.rope_scaling_high_freq_factor,
            "original_max_position_embeddings": p.rope_scaling_original_max_position_embeddings,
        }
    if p.num_moe_experts:
        out["num_experts_per_tok"] = p.moe_router_topk
        out["router_aux_loss_coef"] = p.moe_aux_loss_coeff
        out |= rules.moe_hf_fields(p) if rules.moe_hf_fields is not None else _moe_config_dict(p)
    if rules.hf_fields is not None:
        out.update(rules.hf_fields(p))
    return _read_back_checked(p, family, architecture, out)


def _current_keys(out: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's names, which it loads without a deprecation warning: `dtype` (not `torch_dtype`),
    the RoPE settings in `rope_parameters` (not `rope_theta` + `rope_scaling`); and a
    `max_position_embeddings` above a scaled RoPE's `original_max_position_embeddings` (transformers
    checks it): the scaled window, original x factor, when the run's sequence length is below it."""
    out = dict(out)
    if "torch_dtype" in out:
        out["dtype"] = out.pop("torch_dtype")
    theta = out.pop("rope_theta", None)
    legacy = out.pop("rope_scaling", None) or {}
    params = out.get("rope_parameters") or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        return out  # one entry per layer type (Gemma 3): the family wrote it whole
    legacy = {("rope_type" if k == "type" else k): v for k, v in legacy.items()}
    params = {
        "rope_type": "default",
        **({"rope_theta": theta} if theta is not None else {}),
        **legacy,
        **params,
    }
    out["rope_parameters"] = params
    original, factor = params.get("original_max_position_embeddings"), params.get("factor")
    window = out.get("max_position_embeddings")
    if original and factor and window is not None and window <= original:
        out["max_position_embeddings"] = max(window, round(original * factor))
    return out


def _read_back_checked(
    p: Any, family: TranslatedFamily, architecture: str, out: dict[str, Any]
) -> dict[str, Any]:
    out = _current_keys(out)
    # Whatever the family cannot express shows up as a math field that does not come back.
    for name, value in provider_fields(out, family).items():
        have = getattr(p, name)
        if name not in NOT_MATH and have != value:
            raise ConfigError(
                f"model.{name}={have!r}: a {architecture} checkpoint cannot express it (it would read back "
                f"as {value!r}). Fix: set model.{name}={value!r} or export as another architecture"
            )
    return out


def yarn_rope_parameters(p: Any) -> dict[str, Any]:
    """HF's `rope_parameters` of the provider's RoPE: YaRN's keys when it sets yarn_rope_factor, default
    RoPE at its base otherwise (the families whose config.json writes one rope_parameters dict)."""
    if p.yarn_rope_factor is None:
        return {"rope_type": "default", "rope_theta": p.rotary_base}
    return {
        "rope_type": "yarn",
        "rope_theta": p.rotary_base,
        "factor": p.yarn_rope_factor,
        "original_max_position_embeddings": p.yarn_rope_original_max_position_embeddings,
        "beta_fast": p.yarn_rope_beta_fast,
        "beta_slow": p.yarn_rope_beta_slow,
        "attention_factor": p.yarn_rope_attention_factor,
    }


def sliding_window_hf_fields(p: Any) -> dict[str, Any]:
    """HF's `sliding_window` (keys attended, itself included) for the provider's window_size, for the
    configs that window every layer with it (no use_sliding_window switch)."""
    return {"sliding_window": p.window_size[0] + 1 if p.window_size else None}
