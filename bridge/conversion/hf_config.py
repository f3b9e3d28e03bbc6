"""Hugging Face config <-> GPTModelProvider fields: every value that changes the math, or a ConfigError.

Reads both transformers 5 (`rope_parameters`) and 4.x (`rope_theta` + `rope_scaling`) configs. A setting
the provider cannot express (e.g. a rope type other than default/llama3, biases on the output
projection) is refused rather than dropped. The reverse, `hf_config_dict`, writes the config.json of a
provider (a model trained from scratch) and checks that reading it back gives the same fields.
"""

from __future__ import annotations

from typing import Any

from bridge.conversion.hf_common import BASE_DEFAULTS, get, refuse
from bridge.conversion.registry import Family
from bridge.errors import ConfigError
from bridge.models.deepseek import hf_config as deepseek
from bridge.models.dtypes import BY_TORCH_NAME

# HF `dtype` / `torch_dtype` -> provider dtype names.
HF_DTYPES = {torch_name: d.name for torch_name, d in BY_TORCH_NAME.items()}


# transformers' config-class defaults for every field provider_fields reads whose default is not derived
# from other fields (checked against transformers in tests/unit/test_conversion_hf_config.py): a
# config.json is read as JSON, with these defaults, and transformers is imported only for a model type
# missing here or when AutoConfig keyword arguments are given.
_BASE = BASE_DEFAULTS
_MOE = dict(router_aux_loss_coef=0.001)  # merged with _BASE by the MoE families
_GEMMA2_DEFAULTS: dict[str, Any] = dict(
    {k: v for k, v in _BASE.items() if k != "hidden_act"},  # Gemma 2 reads hidden_activation
    hidden_size=2304,
    num_hidden_layers=26,
    intermediate_size=9216,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=256,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=8192,
    vocab_size=256000,
    tie_word_embeddings=True,
    query_pre_attn_scalar=256,
    sliding_window=4096,
    final_logit_softcapping=30.0,
    attn_logit_softcapping=50.0,
    attention_bias=False,
)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(
        _BASE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=32000,
        mlp_bias=False,
        attention_bias=False,
    ),
    "mistral": dict(
        _BASE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        vocab_size=32000,
        sliding_window=4096,
    ),
    "qwen2": dict(
        _BASE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=22016,
        num_attention_heads=32,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
    ),
    "qwen3": dict(
        _BASE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=22016,
        num_attention_heads=32,
        head_dim=128,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
        attention_bias=False,
    ),
    "mixtral": dict(
        _BASE | _MOE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        vocab_size=32000,
        rms_norm_eps=1e-05,
        rope_theta=1000000.0,
        sliding_window=None,
        num_local_experts=8,
        num_experts_per_tok=2,
        router_jitter_noise=0.0,
    ),
    "phi3": dict(
        _BASE,
        hidden_size=3072,
        num_hidden_layers=32,
        intermediate_size=8192,
        num_attention_heads=32,
        max_position_embeddings=4096,
        vocab_size=32064,
        rms_norm_eps=1e-05,
        sliding_window=None,
    ),
    "qwen2_moe": dict(
        _BASE | _MOE,
        hidden_size=2048,
        num_hidden_layers=24,
        intermediate_size=5632,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=0,  # transformers sets 0 when use_sliding_window is false
        num_experts=60,
        num_experts_per_tok=4,
        moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        qkv_bias=True,
    ),
    "qwen3_moe": dict(
        _BASE | _MOE,
        hidden_size=2048,
        num_hidden_layers=24,
        intermediate_size=6144,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
        attention_bias=False,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    ),
    "olmo2": dict(
        _BASE,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=50304,
        rms_norm_eps=1e-05,
        attention_bias=False,
    ),
    "gemma2": _GEMMA2_DEFAULTS,
    **deepseek.CLASS_DEFAULTS,  # deepseek_v2, deepseek_v3 (bridge.models.deepseek.hf_config)
    # rope_theta / rope_local_base_freq defaults (1e6 / 1e4) are gemma3.hf_config's own (per layer type)
    "gemma3_text": {  # Gemma3TextConfig's defaults: Gemma2Config's but these
        **{k: v for k, v in _GEMMA2_DEFAULTS.items() if k != "rope_theta"},
        "max_position_embeddings": 131072,
        "vocab_size": 262208,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    },
}


def read_config_json(path: Any) -> dict[str, Any]:
    """config.json as a dict, or a ConfigError naming the file and what is wrong with it."""
    import json
    from pathlib import Path

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read ({e}); fix or replace the file") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg}); fix or replace the file"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: a config.json holds a JSON object, this one holds {type(config).__name__}"
        )
    return config


def with_class_defaults(config: dict[str, Any]) -> dict[str, Any] | None:
    """`config` completed with its transformers class defaults, or None for a model type not listed."""
    defaults = CLASS_DEFAULTS.get(config.get("model_type"))
    if defaults is None:
        return None
    return {**defaults, **config}


_get, _refuse = get, refuse  # the names the family modules import


def hf_dtype_name(cfg: Any) -> str:
    """The checkpoint's dtype by provider name (fp32 when the config does not say)."""
    dtype = _get(cfg, "dtype") or _get(cfg, "torch_dtype") or "float32"
    dtype = str(dtype).removeprefix("torch.")
    if dtype not in HF_DTYPES:
        raise _refuse(
            "dtype", dtype, f"must be one of {list(HF_DTYPES)}", "save the checkpoint in one of those"
        )
    return HF_DTYPES[dtype]


def _rope_fields(cfg: Any) -> dict[str, Any]:
    params = dict(_get(cfg, "rope_parameters") or {})
    legacy = _get(cfg, "rope_scaling") or {}
    theta = params.get("rope_theta", _get(cfg, "rope_theta", 10000.0))
    scaling = {**legacy, **params}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    out: dict[str, Any] = {"position_embedding_type": "rope", "rotary_base": theta}
    partial = scaling.get("partial_rotary_factor", _get(cfg, "partial_rotary_factor", 1.0))
    out["rotary_percent"] = float(partial)
    if rope_type == "default":
        return out
    if rope_type != "llama3":
        extra = ""
        if rope_type in ("longrope", "su", "yarn") and _get(cfg, "model_type") == "phi3":
            extra = (
                " (Phi-3 128k / Phi-3.5 LongRoPE: per-dimension short/long factors switched at "
                "original_max_position_embeddings, which Megatron-Core's rotary embedding does not implement)"
            )
        raise _refuse(
            "rope_parameters.rope_type",
            rope_type,
            f"only 'default' and 'llama3' RoPE are supported{extra}",
            "convert a model with default or llama3 RoPE (for Phi-3: a 4k-context variant such as "
            "microsoft/Phi-3-mini-4k-instruct)"
            if extra
            else "convert a model with default or llama3 RoPE",
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
    """Per layer 1 (MoE block) or 0 (dense MLP), as transformers' Qwen2-MoE / Qwen3-MoE decide it:
    MoE where the layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0."""
    layers = int(_get(cfg, "num_hidden_layers"))
    step = _get(cfg, "decoder_sparse_step", 1)
    step = 1 if step is None else step
    dense = set(_get(cfg, "mlp_only_layers") or [])
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise _refuse("decoder_sparse_step", step, "must be a positive integer", "use 1 (every layer MoE)")
    bad = sorted(i for i in dense if not isinstance(i, int) or not 0 <= i < layers)
    if bad:
        raise _refuse(
            "mlp_only_layers",
            sorted(dense, key=str),
            f"holds {bad}, not layer indices of a {layers}-layer model",
            f"list layer indices between 0 and {layers - 1}",
        )
    return [int(i not in dense and (i + 1) % step == 0) for i in range(layers)]


def _moe_fields(cfg: Any) -> dict[str, Any]:
    experts = _get(cfg, "num_local_experts") or _get(cfg, "num_experts")
    if not experts:
        return {}
    ffn = _get(cfg, "moe_intermediate_size") or _get(cfg, "intermediate_size")
    # Mixtral always renormalises the top-k weights; Qwen3-MoE does when norm_topk_prob is set.
    # Megatron: top-k then softmax (pre_softmax=False) == softmax, top-k, renormalise.
    renormalise = _get(cfg, "norm_topk_prob", True)
    jitter = _get(cfg, "router_jitter_noise", 0.0) or None
    out = dict(
        num_moe_experts=int(experts),
        moe_router_topk=int(_get(cfg, "num_experts_per_tok")),
        moe_ffn_hidden_size=int(ffn),
        moe_router_score_function="softmax",
        moe_router_pre_softmax=not renormalise,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=float(_get(cfg, "router_aux_loss_coef", 0.0) or 0.0),
        moe_input_jitter_eps=jitter,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )
    pattern = moe_layer_pattern(cfg)
    if not any(pattern):
        raise _refuse(
            "decoder_sparse_step/mlp_only_layers",
            (_get(cfg, "decoder_sparse_step", 1), _get(cfg, "mlp_only_layers") or []),
            "leave no MoE layer, but the config declares experts",
            "keep at least one MoE layer, or convert the model as a dense family",
        )
    if not all(pattern):
        # Megatron-Core's list form of moe_layer_freq: 1 = MoE layer, 0 = dense MLP of ffn_hidden_size
        # (HF intermediate_size). Its integer form (i % N == 0) starts with a MoE layer, HF's
        # decoder_sparse_step ((i + 1) % N == 0) ends with one: always the list.
        out["moe_layer_freq"] = pattern
    return out


def _shared_expert_fields(cfg: Any, family: Family) -> dict[str, Any]:
    """Qwen2-MoE's shared expert: an MLP every token goes through, scaled by sigmoid(shared_expert_gate(x))."""
    if family.model_type != "qwen2_moe":
        return {}
    size = _get(cfg, "shared_expert_intermediate_size")
    if not size or int(size) <= 0:
        raise _refuse(
            "shared_expert_intermediate_size",
            size,
            "Qwen2-MoE builds a shared expert in every MoE layer, so it must be a positive size",
            "use the published config.json",
        )
    from bridge.models.transformer_fields import AVAILABLE_FIELDS, INSTALLED_RELEASE

    for name in ("moe_shared_expert_intermediate_size", "moe_shared_expert_gate"):
        if name not in AVAILABLE_FIELDS:
            raise _refuse(
                "shared_expert_intermediate_size",
                size,
                f"the gated shared expert needs TransformerConfig.{name}, which megatron-core "
                f"{INSTALLED_RELEASE} does not have",
                "install a megatron-core release with it (0.16.1 and 0.19.2 have both)",
            )
    return dict(moe_shared_expert_intermediate_size=int(size), moe_shared_expert_gate=True)


def provider_fields(cfg: Any, family: Family) -> dict[str, Any]:
    """GPTModelProvider keyword arguments for an HF config (a PretrainedConfig or its dict)."""
    act = _get(cfg, "hidden_act", "silu")
    own_activation = getattr(family.hf_config, "OWN_ACTIVATION", False)  # e.g. Gemma's hidden_activation
    if act != "silu" and not own_activation:
        raise _refuse("hidden_act", act, "the supported families use SwiGLU (silu)", "use a silu model")
    for flag in ("mlp_bias",):
        if _get(cfg, flag, False):
            raise _refuse(
                flag, True, "biases on the MLP are not part of these families", "convert a model without them"
            )
    if _get(cfg, "attention_bias", False) and not family.provider_fields.get("add_qkv_bias"):
        raise _refuse(
            "attention_bias",
            True,
            f"the {family.name} mapping has no attention biases",
            "convert a model with attention_bias=false",
        )
    if family.model_type == "qwen2_moe" and not _get(cfg, "qkv_bias", True):
        raise _refuse(
            "qkv_bias",
            False,
            "the qwen2_moe mapping has q/k/v biases (every published Qwen2-MoE has them)",
            "convert a model with qkv_bias=true",
        )
    if _get(cfg, "use_sliding_window", False):
        raise _refuse(
            "use_sliding_window",
            True,
            "per-layer sliding windows are not supported",
            "convert a model with use_sliding_window=false",
        )
    heads = int(_get(cfg, "num_attention_heads"))
    hidden = int(_get(cfg, "hidden_size"))
    fields: dict[str, Any] = dict(
        num_layers=int(_get(cfg, "num_hidden_layers")),
        hidden_size=hidden,
        ffn_hidden_size=int(_get(cfg, "intermediate_size")),
        num_attention_heads=heads,
        num_query_groups=int(_get(cfg, "num_key_value_heads") or heads),
        kv_channels=int(_get(cfg, "head_dim") or hidden // heads),
        seq_length=int(_get(cfg, "max_position_embeddings")),
        vocab_size=int(_get(cfg, "vocab_size")),
        normalization="RMSNorm",
        layernorm_epsilon=float(_get(cfg, "rms_norm_eps")),
        activation_func="silu",
        gated_linear_unit=True,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=False,
        hidden_dropout=0.0,
        attention_dropout=float(_get(cfg, "attention_dropout", 0.0) or 0.0),
        init_method_std=float(_get(cfg, "initializer_range", 0.02)),
        share_embeddings_and_output_weights=bool(_get(cfg, "tie_word_embeddings", False)),
        make_vocab_size_divisible_by=128,
    )
    window = _get(cfg, "sliding_window")
    if window is not None and _get(cfg, "use_sliding_window") is None:
        # HF attends to the last `window` keys including itself; Megatron's (left, right) excludes it.
        # Mistral/Mixtral/Phi-3 (Qwen's window only acts with use_sliding_window, refused above).
        # A window of at least max_position_embeddings keys never masks a key of a sequence the model
        # takes (Phi-3.5-mini: 262144 vs 131072): no window, so the fused sdpa attention stays usable.
        if int(window) < fields["seq_length"]:
            fields["window_size"] = [int(window) - 1, 0]
    dtype = hf_dtype_name(cfg)
    fields["params_dtype"] = dtype
    fields["bf16"] = dtype == "bf16"
    fields["fp16"] = dtype == "fp16"
    if family.model_type in deepseek.MODEL_TYPES:  # multi-latent attention, YaRN, DeepSeek routing
        from bridge.models.transformer_fields import MLA_FIELDS

        return deepseek.deepseek_provider_fields(cfg, fields, bool(MLA_FIELDS)) | family.provider_fields
    # A family with per-layer RoPE (Gemma 3) translates it itself.
    fields.update(getattr(family.hf_config, "rope_fields", _rope_fields)(cfg))
    fields.update(_moe_fields(cfg))
    fields.update(_shared_expert_fields(cfg, family))
    if family.hf_config is not None:
        fields.update(family.hf_config.provider_fields(cfg))
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
    # DeepSeek (bridge.models.deepseek.hf_config): multi-latent attention and its RoPE, routing.
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
    "moe_router_topk_scaling_factor",
    "moe_router_enable_expert_bias",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_dtype",
    "seq_len_interpolation_factor",
    "local_rotary_base",
)

_DTYPE_TO_HF = {v: k for k, v in HF_DTYPES.items()}
# Provider fields a config.json does not need to reproduce: training choices, not the model's function.
_NOT_MATH = frozenset(
    {
        "seq_length",
        "make_vocab_size_divisible_by",
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
    }
)


def _dense_layers(p: Any) -> list[int]:
    """HF mlp_only_layers for the provider's moe_layer_freq (an integer N: MoE where layer % N == 0)."""
    freq = p.moe_layer_freq
    if isinstance(freq, int):
        return [i for i in range(p.num_layers) if i % freq]
    return [i for i, moe in enumerate(freq) if not moe]


def _base_config_dict(p: Any, family: Family, architecture: str) -> dict[str, Any]:
    """The config.json fields every family writes."""
    return {
        "architectures": [architecture],
        "model_type": family.model_type,
        "max_position_embeddings": p.seq_length,
        "vocab_size": p.vocab_size,
        "rms_norm_eps": p.layernorm_epsilon,
        "hidden_act": p.activation_func,
        "tie_word_embeddings": p.share_embeddings_and_output_weights,
        "initializer_range": p.init_method_std,
        "attention_dropout": p.attention_dropout,
        "torch_dtype": _DTYPE_TO_HF[p.params_dtype],
        "rope_theta": p.rotary_base,
    }


def hf_config_dict(provider: Any, family: Family, architecture: str) -> dict[str, Any]:
    """config.json content for `provider` as `architecture`; ConfigError if the family cannot express it."""
    p = provider
    if family.model_type in deepseek.MODEL_TYPES:
        out = _base_config_dict(p, family, architecture)
        out |= deepseek.deepseek_config_dict(p, family.model_type, architecture)
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
    if family.model_type in ("mistral", "mixtral", "phi3"):
        out["sliding_window"] = p.window_size[0] + 1 if p.window_size else None
    if family.model_type in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe"):
        out["use_sliding_window"] = False
    if p.num_moe_experts:
        out["num_experts_per_tok"] = p.moe_router_topk
        out["router_aux_loss_coef"] = p.moe_aux_loss_coeff
        if family.model_type == "mixtral":
            out |= {
                "num_local_experts": p.num_moe_experts,
                "intermediate_size": p.moe_ffn_hidden_size,
                "router_jitter_noise": p.moe_input_jitter_eps or 0.0,
            }
        else:
            out |= {
                "num_experts": p.num_moe_experts,
                "moe_intermediate_size": p.moe_ffn_hidden_size,
                "norm_topk_prob": not p.moe_router_pre_softmax,
                "decoder_sparse_step": 1,
                "mlp_only_layers": _dense_layers(p),
            }
        if p.moe_shared_expert_intermediate_size:
            out["shared_expert_intermediate_size"] = p.moe_shared_expert_intermediate_size
        if family.model_type == "qwen2_moe":
            out["qkv_bias"] = True
    if family.hf_config is not None:
        out.update(family.hf_config.hf_fields(p))
    return _read_back_checked(p, family, architecture, out)


def _read_back_checked(p: Any, family: Family, architecture: str, out: dict[str, Any]) -> dict[str, Any]:
    # Whatever the family cannot express shows up as a math field that does not come back.
    for name, value in provider_fields(out, family).items():
        have = getattr(p, name)
        if name not in _NOT_MATH and have != value:
            raise ConfigError(
                f"model.{name}={have!r}: a {architecture} checkpoint cannot express it (it would read back "
                f"as {value!r}). Fix: set model.{name}={value!r} or export as another architecture"
            )
    return out
