"""GPTFields: what a GPT model and its parallel sizes are, as plain data (no torch, no megatron.core).

The fields (every TransformerConfig field of the supported Megatron-Core releases, by Megatron-Core's
names, plus the GPTModel arguments and bridge's layer variants), the typo check on assignment, and the
views computed from the fields alone. GPTModelProvider (bridge.models.gpt_provider) is this data plus
what builds from it; the field checks (provider_checks), the layout derivation (provider_layout) and the
Megatron-Core builds (provider_build, provider_distributed) read a GPTFields.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, fields
from typing import Any

from bridge.errors import ConfigError, config_error
from bridge.models.layer_variant import LayerVariant
from bridge.models.transformer_fields import AVAILABLE_FIELDS, TransformerFields
from bridge.parallel.param_count import padded_vocab_size

# Where the provider's default deliberately differs from TransformerConfig's (tested).
DEFAULTS_DIFFERING_FROM_MCORE = {
    "expert_tensor_parallel_size": (
        "1, not None: Megatron-Core's None means 'same as tensor_model_parallel_size', but bridge's "
        "layouts (and Megatron-Bridge's recipes) keep expert weights unsplit (ETP=1) unless asked"
    ),
}


def model_error(field: str, value: Any, rule: str, fix: str) -> ConfigError:
    """A provider field's ConfigError: `model.<field> = <value>: <rule>. Fix: <fix>.`"""
    return config_error(f"model.{field}", value, rule, fix)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def transformer_field_names() -> tuple[str, ...]:
    """The provider fields that are passed to TransformerConfig (in TransformerConfig's order)."""
    return AVAILABLE_FIELDS


@dataclass
class GPTFields(TransformerFields):
    """A GPT model by Megatron-Core's own field names.

    Every TransformerConfig field of the installed Megatron-Core is a field here, with that release's
    default (see transformer_fields/), with dtypes (`params_dtype`, `pipeline_dtype`, `autocast_dtype`:
    "fp32" | "bf16" | "fp16"), `activation_func` ("silu", "gelu", ...) and enums (`attention_backend`)
    given by name. Fields of other supported releases are here too, at their default: setting one the
    installed release lacks is a ConfigError.
    `pipeline_dtype=None` means the training dtype (bf16/fp16 when set, else params_dtype), as in
    Megatron-LM. Below: the GPTModel constructor arguments that TransformerConfig does not hold.
    """

    # See DEFAULTS_DIFFERING_FROM_MCORE.
    expert_tensor_parallel_size: int | None = 1

    # GPTModel arguments.
    vocab_size: int | None = None  # unpadded; padded_vocab_size() is what the model allocates
    seq_length: int = 1024
    make_vocab_size_divisible_by: int = 128
    # Megatron-Bridge's name. True (from-scratch recipes): the embedding / output layer get
    # padded_vocab_size() rows and the padded logits are masked out of the loss (output_hooks). False
    # (providers made from an HF config): exactly vocab_size rows, which must then divide by TP.
    should_pad_vocab: bool = True
    position_embedding_type: str = "learned_absolute"
    rotary_base: float = 10000  # HF rope_theta, not always whole (bigcode/starcoder2-3b: 999999.44...)
    rotary_percent: float = 1.0
    seq_len_interpolation_factor: float | None = None
    # llama3-style RoPE scaling (Llama 3.1 / 3.2), as HF's rope_scaling {"rope_type": "llama3", ...}.
    rope_scaling: bool = False
    rope_scaling_factor: float = 8.0
    rope_scaling_low_freq_factor: float = 1.0
    rope_scaling_high_freq_factor: float = 4.0
    rope_scaling_original_max_position_embeddings: int = 8192
    # YaRN RoPE (position_embedding_type "yarn", Megatron-Bridge's names): GPTModel and its attention
    # read them from the TransformerConfig. round_to_int False: the correction range unrounded (HF's
    # truncate=false). cos / sin are scaled by 0.1 ln(factor) + 1, or by the ratio of that with
    # yarn_mscale and with yarn_mscale_all_dim when both are set.
    yarn_rotary_scaling_factor: float = 1.0
    yarn_original_max_position_embeddings: int = 4096
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_correction_range_round_to_int: bool = True
    yarn_mscale: float | None = None
    yarn_mscale_all_dim: float | None = None
    # With position_embedding_type 'mrope': frequency i follows position axis i mod 3 (temporal, height,
    # width) up to mrope_section's counts, instead of one contiguous block per axis
    # (bridge.models.interleaved_mrope; HF's mrope_interleaved, Qwen3-VL).
    mrope_interleaved: bool = False
    share_embeddings_and_output_weights: bool = False
    fp16_lm_cross_entropy: bool = False
    parallel_output: bool = True
    scatter_embedding_sequence_parallel: bool = True  # a VLM keeps them whole to merge images, then scatters

    # Layer and model variants outside TransformerConfig, built by bridge (bridge.models.layer_variant,
    # bridge.models.output_hooks); the defaults are the plain pre-norm GPT.
    # "pre": a norm before attention and before the MLP; "post" (OLMo 2): a norm after each (on the
    # branch output, before the residual add), none before; "sandwich" (Gemma 2/3): both.
    layernorm_placement: str = "pre"
    # q/k norms (qk_layernorm) over each head ("head") or over the whole q / k projection, all heads
    # together ("projection", OLMo 2).
    qk_layernorm_scope: str = "head"
    attn_logit_softcapping: float | None = None  # scores -> tanh(s / c) * c before the mask (Gemma 2)
    final_logit_softcapping: float | None = None  # logits -> tanh(l / c) * c (Gemma 2)
    # RoPE base of the sliding-window layers (window_size / window_attn_skip_freq), unscaled; the other
    # layers keep rotary_base and seq_len_interpolation_factor (Gemma 3's rope_local_base_freq).
    local_rotary_base: float | None = None
    scale_embeddings_by_sqrt_hidden: bool = False  # embeddings * sqrt(hidden_size), in their dtype (Gemma)
    # The MoE router's sigmoid scores are the softmax probabilities (its logits -> logit(softmax)): with
    # moe_router_score_function="sigmoid" and moe_router_enable_expert_bias, experts are chosen by
    # probability + expert bias and weighted by the chosen probabilities renormalised (ERNIE 4.5).
    moe_router_softmax_scores: bool = False
    # Constant multipliers (Granite's muP-style scaling; None: off): embeddings * embedding_multiplier,
    # each attention / MLP branch output * branch_output_multiplier before its residual add, and the
    # logits / logits_divisor.
    embedding_multiplier: float | None = None
    branch_output_multiplier: float | None = None
    logits_divisor: float | None = None
    # YaRN scaling of GPTModel's RoPE (HF rope_type "yarn"; bridge.models.yarn_rope), None: off. The
    # layers rotating with it (all, or with local_rotary_base the global ones) score q.k times
    # yarn_rope_attention_factor ** 2 (HF scales their cos and sin by it).
    yarn_rope_factor: float | None = None
    yarn_rope_original_max_position_embeddings: int = 4096
    yarn_rope_beta_fast: float = 32.0
    yarn_rope_beta_slow: float = 1.0
    yarn_rope_attention_factor: float = 1.0
    # Llama 4's position-dependent query scale (HF rope_parameters.llama_4_scaling_beta; Ministral 3): the
    # query at position p is multiplied by 1 + beta * log(1 + floor(p / original)) after RoPE (1 below
    # `original` positions), in bridge's explicit attention. None: off.
    llama4_attn_scale_beta: float | None = None
    llama4_attn_scale_original_max_position_embeddings: int = 16384
    # Multi-latent attention's q / kv latent norms (q_layernorm, kv_layernorm) with this eps instead of
    # layernorm_epsilon (None); transformers' DeepSeek-style MLA fixes theirs at 1e-6 (GLM-4.7-Flash).
    mla_latent_layernorm_epsilon: float | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        # A typo (provider.num_layer = 4) must fail, not create a new attribute nobody reads.
        if not name.startswith("_") and name not in _field_names(type(self)):
            close = difflib.get_close_matches(name, _field_names(type(self)), n=3)
            kind = type(self).__name__
            hint = f"did you mean {', '.join(close)}?" if close else f"see {kind}'s fields"
            raise ConfigError(f"model.{name}: unknown {kind} field. Fix: {hint}")
        object.__setattr__(self, name, value)

    # ---- views computed from the fields alone ------------------------------------------------------

    def layer_variant(self):
        """The layer variant bridge's spec builds for this model (pure data)."""
        return LayerVariant(
            layernorm_placement=self.layernorm_placement,
            qk_layernorm_scope=self.qk_layernorm_scope,
            attn_logit_softcapping=self.attn_logit_softcapping,
            local_rotary_base=self.local_rotary_base,
            moe_router_softmax_scores=self.moe_router_softmax_scores,
            rope_score_multiplier=(
                self.yarn_rope_attention_factor**2
                if self.yarn_rope_factor is not None and self.yarn_rope_attention_factor != 1.0
                else None
            ),
            mla_latent_norm_epsilon=self.mla_latent_layernorm_epsilon,
            query_position_scale=(
                (self.llama4_attn_scale_beta, self.llama4_attn_scale_original_max_position_embeddings)
                if self.llama4_attn_scale_beta
                else None
            ),
            linear_attention_freq=(
                self.linear_attention_freq
                if self.experimental_attention_variant == "gated_delta_net"
                else None
            ),
        )

    def effective_ffn_hidden_size(self) -> int:
        # TransformerConfig's rule: None means 4 * hidden_size.
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    def effective_kv_channels(self) -> int:
        return (
            self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads
        )

    def effective_expert_tensor_parallel_size(self) -> int:
        # Megatron-Core's rule: None means the same as tensor_model_parallel_size.
        etp = self.expert_tensor_parallel_size
        return etp if etp is not None else self.tensor_model_parallel_size

    def padded_vocab_size(self) -> int:
        """The rows the model allocates: vocab_size rounded up to a multiple of
        make_vocab_size_divisible_by * tp (Megatron's rule), or vocab_size itself without should_pad_vocab."""
        if self.vocab_size is None:
            raise model_error(
                "vocab_size", None, "is needed to build the model", "set the tokenizer's vocab size"
            )
        if not self.should_pad_vocab:
            return self.vocab_size

        return padded_vocab_size(
            self.vocab_size, self.tensor_model_parallel_size, self.make_vocab_size_divisible_by
        )
