"""The provider's field checks (`GPTModelProvider.finalize`), one named check per rule group. Pure Python.

The layout rules (sizes against the world and the model) are ParallelLayout's; these are the model's own
fields: sizes, names from a closed vocabulary, and the combinations Megatron-Core or bridge's spec cannot
build. Each raises the one ConfigError wording (bridge.errors.config_error) naming `model.<field>`.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.errors import ConfigError
from bridge.models.dtypes import DTYPES
from bridge.models.provider_fields import model_error
from bridge.models.transformer_fields import (
    BY_NAME_FIELDS,
    FIELD_CHOICES,
    INSTALLED_RELEASE,
    UNAVAILABLE_FIELDS,
    field_default,
    unavailable_field_error,
)

if TYPE_CHECKING:
    from bridge.models.provider_fields import GPTFields

# Activations by name -> (module, attribute), imported only when a model is built.
ACTIVATIONS = {
    "gelu": ("torch.nn.functional", "gelu"),
    "silu": ("torch.nn.functional", "silu"),
    "relu": ("torch.nn.functional", "relu"),
    "squared_relu": ("megatron.core.activations", "squared_relu"),
    # the fused bias-GLU path (bias_activation_fusion, GPT-OSS's clamped GLU) recognises this one
    "quick_gelu": ("megatron.core.fusions.fused_bias_geglu", "quick_gelu"),
    "fast_gelu": ("megatron.core.activations", "fast_gelu"),
    "gelu_tanh": ("bridge.models.activations", "gelu_tanh"),  # HF gelu_pytorch_tanh (Gemma's GeGLU)
}

# Layer variants bridge's local spec builds (bridge.models.layer_variant): where the norms sit, and the
# scope of the q/k norms.
LAYERNORM_PLACEMENTS = ("pre", "post", "sandwich")
QK_LAYERNORM_SCOPES = ("head", "projection")

# GPTModel position embeddings the provider can build ("yarn" from the provider's yarn_* fields;
# "mrope" from mrope_section, with [3, b, s] position ids a vision-language model computes).
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "yarn", "mrope", "none")


def check_fields(p: GPTFields) -> None:
    """Every model-field rule, in the order finalize() has always raised them."""
    _check_unavailable_fields(p)
    _check_sizes(p)
    _check_names(p)
    check_layer_variant(p)
    if p.multi_latent_attention:
        check_multi_latent_attention(p)
        check_mla_query_norm(p)  # here, so that the dry run refuses it as the build would
    elif p.mla_latent_layernorm_epsilon is not None:
        raise model_error(
            "mla_latent_layernorm_epsilon",
            p.mla_latent_layernorm_epsilon,
            "is the eps of multi-latent attention's latent norms, and multi_latent_attention is off",
            "set model.mla_latent_layernorm_epsilon=null or model.multi_latent_attention=true",
        )
    _check_precision_and_vocab(p)
    if p.rope_scaling:
        _check_rope_scaling(p)
    if p.num_moe_experts is not None:
        _check_experts(p)
    if p.experimental_attention_variant == "gated_delta_net":
        check_gated_delta_net(p)


def _check_unavailable_fields(p: GPTFields) -> None:
    # Fields of other supported releases: set only at their default on the installed one.
    for name in UNAVAILABLE_FIELDS:
        value = getattr(p, name)
        if value != field_default(name):
            raise ConfigError(unavailable_field_error(name, value))


def _check_sizes(p: GPTFields) -> None:
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"):
        if getattr(p, name) <= 0:
            raise model_error(name, getattr(p, name), "must be a positive integer", f"set model.{name}")
    if p.kv_channels is None and p.hidden_size % p.num_attention_heads:
        raise model_error(
            "hidden_size",
            p.hidden_size,
            f"must be divisible by num_attention_heads={p.num_attention_heads} when kv_channels is unset",
            "change hidden_size or num_attention_heads, or set kv_channels (the head dimension)",
        )
    groups = p.num_query_groups
    if groups is not None and (groups <= 0 or p.num_attention_heads % groups):
        raise model_error(
            "num_query_groups",
            groups,
            f"must be a positive divisor of num_attention_heads={p.num_attention_heads}",
            "set the number of key/value heads (HF num_key_value_heads), or None for MHA",
        )


def _check_names(p: GPTFields) -> None:
    # Fields given by name: Megatron-Core's enums and choices, dtypes, activations, position embeddings.
    for name, choices in FIELD_CHOICES.items():
        value = getattr(p, name)
        if value is not None and value not in choices:
            raise model_error(name, value, f"must be one of {list(choices)}", "pick one of those")
    for name, kind in BY_NAME_FIELDS.items():
        value = getattr(p, name)
        if kind == "dtype" and value is not None and value not in DTYPES:
            raise model_error(name, value, f"must be one of {list(DTYPES)}", "give the dtype by name")
    checks = (
        ("activation_func", ACTIVATIONS),
        ("position_embedding_type", POSITION_EMBEDDINGS),
    )
    for name, known in checks:
        if getattr(p, name) not in known:
            raise model_error(name, getattr(p, name), f"must be one of {list(known)}", "pick one of those")
    if p.position_embedding_type == "mrope":
        _check_mrope(p)
    if p.mrope_interleaved and (p.position_embedding_type != "mrope" or p.rotary_interleaved):
        raise model_error(
            "mrope_interleaved",
            True,
            "interleaved M-RoPE needs position_embedding_type='mrope' and rotary_interleaved=False "
            f"(got {p.position_embedding_type!r}, rotary_interleaved={p.rotary_interleaved})",
            "set position_embedding_type='mrope' and rotary_interleaved=False, or mrope_interleaved=False",
        )


def _check_mrope(p: GPTFields) -> None:
    """M-RoPE rotates the head's first rotary_percent share in (temporal, height, width) sections whose
    frequency counts sum to half of it (Megatron-Core's MultimodalRotaryEmbedding)."""
    head = p.kv_channels or p.hidden_size // p.num_attention_heads
    half = int(head * p.rotary_percent) // 2
    section = p.mrope_section
    if not section or len(section) != 3 or sum(section) != half:
        raise model_error(
            "mrope_section",
            section,
            f"position_embedding_type='mrope' needs 3 frequency counts (temporal, height, width) summing to "
            f"half the rotary head dimension ({half})",
            "set model.mrope_section from the checkpoint's rope_parameters.mrope_section",
        )


def _check_precision_and_vocab(p: GPTFields) -> None:
    if p.fp16 and p.bf16:
        raise model_error(
            "fp16", True, "fp16 and bf16 are both set", "set only one of model.fp16 / model.bf16"
        )
    if p.vocab_size is not None and p.vocab_size <= 0:
        raise model_error("vocab_size", p.vocab_size, "must be positive", "set the tokenizer's vocab size")
    if p.make_vocab_size_divisible_by <= 0:
        raise model_error(
            "make_vocab_size_divisible_by",
            p.make_vocab_size_divisible_by,
            "must be a positive integer",
            "use 128 (Megatron's default) or 1 for no padding",
        )
    if p.vocab_size is not None and not p.should_pad_vocab:
        _check_unpadded_vocab_splits(p)


def _check_unpadded_vocab_splits(p: GPTFields) -> None:
    # Without padding, each tensor-parallel rank holds vocab_size / TP rows of the embedding and output layer.
    tp = p.tensor_model_parallel_size
    if p.vocab_size % tp == 0:
        return
    working = [size for size in range(1, 65) if p.vocab_size % size == 0]
    raise model_error(
        "vocab_size",
        p.vocab_size,
        f"with should_pad_vocab=False the vocabulary is split over tensor_model_parallel_size={tp} "
        f"without padding, so it must divide by it (TP values that work up to 64: {working})",
        "use one of those TP sizes, or set model.should_pad_vocab=True: the vocabulary is then padded "
        f"to a multiple of make_vocab_size_divisible_by * TP = {p.make_vocab_size_divisible_by * tp} "
        "and the padded logits are kept out of the loss",
    )


def _check_rope_scaling(p: GPTFields) -> None:
    if p.position_embedding_type != "rope":
        raise model_error(
            "rope_scaling",
            True,
            f"needs position_embedding_type='rope', got {p.position_embedding_type!r}",
            "set model.position_embedding_type=rope or model.rope_scaling=False",
        )
    if p.rope_scaling_factor <= 0:
        raise model_error("rope_scaling_factor", p.rope_scaling_factor, "must be positive", "use e.g. 8.0")
    if not 0 < p.rope_scaling_low_freq_factor < p.rope_scaling_high_freq_factor:
        raise model_error(
            "rope_scaling_low_freq_factor",
            p.rope_scaling_low_freq_factor,
            f"must be positive and below rope_scaling_high_freq_factor={p.rope_scaling_high_freq_factor}",
            "use the values of the HF config's rope_scaling (llama3: 1.0 and 4.0)",
        )


def _check_experts(p: GPTFields) -> None:
    if p.num_moe_experts <= 0:
        raise model_error(
            "num_moe_experts", p.num_moe_experts, "must be positive", "use None for a dense model"
        )
    freq = p.moe_layer_freq
    if isinstance(freq, (list, tuple)) and (len(freq) != p.num_layers or any(v not in (0, 1) for v in freq)):
        raise model_error(
            "moe_layer_freq",
            list(freq),
            f"a per-layer pattern must hold num_layers={p.num_layers} values of 1 (MoE layer) "
            "or 0 (dense MLP of ffn_hidden_size)",
            "give one 0/1 per layer, or an integer N (a MoE layer every N layers)",
        )
    if not 1 <= p.moe_router_topk <= p.num_moe_experts:
        raise model_error(
            "moe_router_topk",
            p.moe_router_topk,
            f"must be between 1 and num_moe_experts={p.num_moe_experts}",
            "set the number of experts each token is routed to",
        )


def check_layer_variant(p: GPTFields) -> None:
    for name, known in (
        ("layernorm_placement", LAYERNORM_PLACEMENTS),
        ("qk_layernorm_scope", QK_LAYERNORM_SCOPES),
    ):
        if getattr(p, name) not in known:
            raise model_error(name, getattr(p, name), f"must be one of {list(known)}", "pick one of those")
    if p.qk_layernorm_scope == "projection" and not p.qk_layernorm:
        raise model_error(
            "qk_layernorm_scope",
            "projection",
            "scopes the q/k norms, which qk_layernorm=False does not build",
            "set model.qk_layernorm=True or model.qk_layernorm_scope=head",
        )
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = getattr(p, name)
        if value is not None and not value > 0:
            raise model_error(
                name, value, "must be positive or None (no soft-capping)", "use e.g. 50.0 or None"
            )
    _check_local_rotary_base(p)
    if p.moe_router_softmax_scores and p.moe_router_score_function != "sigmoid":
        raise model_error(
            "moe_router_softmax_scores",
            True,
            "turns the sigmoid router's scores into softmax probabilities (bridge.models.softmax_score_router), "
            f"and moe_router_score_function={p.moe_router_score_function!r} is not that router",
            "set model.moe_router_score_function=sigmoid, or model.moe_router_softmax_scores=False",
        )
    _check_multipliers(p)
    _check_yarn_rope(p)


def _check_yarn_rope(p: GPTFields) -> None:
    if p.yarn_rope_factor is None:
        return
    if not p.yarn_rope_factor > 0 or not p.yarn_rope_attention_factor > 0:
        raise model_error(
            "yarn_rope_factor",
            p.yarn_rope_factor,
            "YaRN's factor and attention factor must be positive",
            "use the model's rope_parameters (e.g. factor 8.0)",
        )
    other = [
        name
        for name, on in (
            ("rope_scaling", p.rope_scaling),
            ("seq_len_interpolation_factor", p.seq_len_interpolation_factor is not None),
            ("multi_latent_attention", p.multi_latent_attention),
        )
        if on
    ]
    if p.position_embedding_type != "rope" or other:
        raise model_error(
            "yarn_rope_factor",
            p.yarn_rope_factor,
            "scales GPTModel's RoPE (position_embedding_type='rope') and no other RoPE scaling "
            f"({other or p.position_embedding_type})",
            "set model.yarn_rope_factor=None or turn the other scaling off",
        )


def _check_multipliers(p: GPTFields) -> None:
    for name in ("embedding_multiplier", "branch_output_multiplier", "logits_divisor"):
        value = getattr(p, name)
        if value is not None and not value > 0:
            raise model_error(name, value, "must be positive or None (off)", "use e.g. 12.0 or None")


def _check_local_rotary_base(p: GPTFields) -> None:
    value = p.local_rotary_base
    if value is None:
        return
    if not value > 0:
        raise model_error("local_rotary_base", value, "must be positive or None", "use e.g. 10000.0 or None")
    if p.position_embedding_type != "rope" or p.rotary_percent != 1.0 or p.rope_scaling:
        raise model_error(
            "local_rotary_base",
            value,
            "needs position_embedding_type='rope', rotary_percent=1.0 and rope_scaling=False "
            "(the per-layer RoPE of bridge.models.local_rope_attention rotates whole heads)",
            "set those fields or model.local_rotary_base=None",
        )
    if p.window_size is None:
        raise model_error(
            "local_rotary_base",
            value,
            "is the RoPE base of the sliding-window layers, and window_size=None makes none",
            "set model.window_size (and window_attn_skip_freq) or model.local_rotary_base=None",
        )


def check_multi_latent_attention(p: GPTFields) -> None:
    # Megatron-Core's MLA (MLATransformerConfig) carries its own RoPE: rope_type "rope" or "yarn" on
    # the qk_pos_emb_head_dim slice of each head; GPTModel builds no rotary embedding of its own.
    if p.tensor_model_parallel_size > 1 and not p.sequence_parallel:
        # measured (tests/functional/test_mla_parallel.py): at TP=2 without SP the latent projections' and
        # norms' gradients differ from TP=1 on both releases (0.19.2: q_layernorm's doubled); with SP they agree
        raise model_error(
            "sequence_parallel",
            False,
            f"multi-latent attention at tensor_model_parallel_size={p.tensor_model_parallel_size} computes "
            "gradients different from TP=1 without sequence parallelism in megatron-core 0.16.1 and 0.19.2 "
            "(measured on the local spec: its latent projections' and norms' gradients)",
            "set model.sequence_parallel=true",
        )
    if p.position_embedding_type != "rope":
        raise model_error(
            "position_embedding_type",
            p.position_embedding_type,
            "multi-latent attention applies its own rotary embedding (rope_type), so it needs 'rope'",
            "set model.position_embedding_type=rope",
        )
    if p.rope_type not in ("rope", "yarn"):
        raise model_error(
            "rope_type", p.rope_type, "must be 'rope' or 'yarn' (MLA's RoPE)", "pick one of those"
        )
    if p.rope_scaling:
        raise model_error(
            "rope_scaling",
            True,
            "llama3 RoPE scaling is GPTModel's rotary embedding, which multi-latent attention does not use",
            "set model.rope_scaling=False (MLA scales its RoPE with rope_type=yarn)",
        )
    if p.q_lora_rank is not None and p.q_lora_rank <= 0:
        raise model_error(
            "q_lora_rank", p.q_lora_rank, "must be positive or None", "use None for no q compression"
        )
    for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
        if getattr(p, name) <= 0:
            raise model_error(name, getattr(p, name), "must be a positive integer", f"set model.{name}")
    eps = p.mla_latent_layernorm_epsilon
    if eps is not None and not eps > 0:
        raise model_error(
            "mla_latent_layernorm_epsilon", eps, "must be positive or None", "use None for layernorm_epsilon"
        )


@functools.cache
def has_mla_qk_norm_resolver() -> bool:
    """The installed Megatron-Core has megatron/core/transformer/mla_qk_norm_config.py (0.19.x), looked up
    on disk: importing a submodule to find it would import Megatron-Core and torch (the dry run has neither)."""
    spec = importlib.util.find_spec("megatron")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(loc) / "core" / "transformer" / "mla_qk_norm_config.py").is_file() for loc in locations)


def check_mla_query_norm(p: GPTFields) -> None:
    # megatron-core 0.19.2's MLA resolves its q/kv norms (mla_qk_norm_config.QKNormConfigResolver):
    # with qk_layernorm and q_lora_rank None it builds linear_q_proj as a fused norm+linear, a norm on
    # the query input that DeepSeek-V2-Lite does not have (0.16.1 builds no q norm then).
    if p.q_lora_rank is not None or not p.qk_layernorm:
        return
    if not has_mla_qk_norm_resolver():
        return
    raise model_error(
        "q_lora_rank",
        None,
        f"megatron-core {INSTALLED_RELEASE}'s multi-latent attention (QKNormConfigResolver) builds "
        "linear_q_proj as a fused norm+linear whenever qk_layernorm is set and q_lora_rank is None: a norm "
        "on the query input that DeepSeek-V2-Lite does not have (its one latent norm is kv_a_layernorm, "
        "which needs qk_layernorm), and the local spec has no fused norm+linear",
        "use megatron-core 0.16.1 for a model without query compression, or a model with q_lora_rank set",
    )


def check_gated_delta_net(p: GPTFields) -> None:
    """Gated DeltaNet layers (experimental_attention_variant="gated_delta_net", Megatron-Core's names):
    what Megatron-Core's GatedDeltaNet asserts at build, and what bridge's spec of it does not run."""
    freq = p.linear_attention_freq
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise model_error(
            "linear_attention_freq",
            freq,
            "with Gated DeltaNet, one softmax-attention layer every N layers (N a positive integer; layer "
            "i is softmax attention when (i + 1) % N == 0)",
            "set model.linear_attention_freq, e.g. 4 (Qwen3-Next: three linear layers, then one softmax)",
        )
    for name in (
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
    ):
        value = getattr(p, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise model_error(name, value, "Gated DeltaNet needs a positive integer", f"set model.{name}")
    if p.linear_num_value_heads % p.linear_num_key_heads:
        raise model_error(
            "linear_num_value_heads",
            p.linear_num_value_heads,
            f"must be a multiple of linear_num_key_heads={p.linear_num_key_heads} (each key head serves "
            "a whole number of value heads)",
            "set the published head counts",
        )
    tp = p.tensor_model_parallel_size
    for name in ("linear_num_key_heads", "linear_num_value_heads"):
        if getattr(p, name) % tp:
            raise model_error(
                "tensor_model_parallel_size",
                tp,
                f"must divide {name}={getattr(p, name)}: tensor parallelism splits the Gated DeltaNet "
                "layers by whole heads",
                f"use a tensor-parallel size that divides {name}",
            )
    if p.context_parallel_size > 1:
        raise model_error(
            "context_parallel_size",
            p.context_parallel_size,
            "Gated DeltaNet layers have no context-parallel path in megatron-core 0.16.1, and bridge's "
            "local layer spec of them runs none on 0.19.x either",
            "set model.context_parallel_size=1",
        )
    if p.activation_func not in ("silu",):
        raise model_error(
            "activation_func",
            p.activation_func,
            "Gated DeltaNet's short convolution and output gate use the model's activation, and its "
            "kernels (fla's and the CPU reference) know silu only",
            "set model.activation_func=silu",
        )
    if p.multi_latent_attention:
        raise model_error(
            "multi_latent_attention",
            True,
            "Gated DeltaNet is built beside Megatron-Core's standard softmax attention only",
            "set model.multi_latent_attention=False",
        )
