"""GPTModelProvider: a GPT model and its parallel sizes described as data, built on Megatron-Core on demand.

Pure data: defining, overriding, validating and serialising a provider imports neither torch nor
megatron.core. `transformer_config()`, `provide()` and `provide_distributed_model()` import them when a
model is actually built.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigError
from bridge.models.dtypes import DTYPES, torch_dtype
from bridge.models.transformer_fields import (
    AVAILABLE_FIELDS,
    BY_NAME_FIELDS,
    FIELD_CHOICES,
    INSTALLED_RELEASE,
    MLA_FIELDS,
    SNAPSHOT,
    TESTED_RELEASES,
    UNAVAILABLE_FIELDS,
    TransformerFields,
    field_default,
    unavailable_field_error,
)

if TYPE_CHECKING:
    from bridge.parallel.layout import ModelShape, ParallelLayout

logger = logging.getLogger(__name__)


# Activations by name -> (module, attribute), imported only when a model is built.
ACTIVATIONS = {
    "gelu": ("torch.nn.functional", "gelu"),
    "silu": ("torch.nn.functional", "silu"),
    "relu": ("torch.nn.functional", "relu"),
    "squared_relu": ("megatron.core.activations", "squared_relu"),
    "quick_gelu": ("megatron.core.activations", "quick_gelu"),
    "fast_gelu": ("megatron.core.activations", "fast_gelu"),
    "gelu_tanh": ("bridge.models.activations", "gelu_tanh"),  # HF gelu_pytorch_tanh (Gemma's GeGLU)
}

# Layer variants bridge's local spec builds (bridge.models.layer_variant): where the norms sit, and the
# scope of the q/k norms.
LAYERNORM_PLACEMENTS = ("pre", "post", "sandwich")
QK_LAYERNORM_SCOPES = ("head", "projection")

# GPTModel position embeddings the provider can build ("yarn" and "mrope" need settings
# TransformerConfig does not carry in this release).
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "none")

# Megatron-Core's RotaryEmbedding applies llama3 scaling with these fixed values; other values are
# applied by the provider after the model is built.
MCORE_ROPE_SCALING_DEFAULTS = {
    "rope_scaling_low_freq_factor": 1.0,
    "rope_scaling_high_freq_factor": 4.0,
    "rope_scaling_original_max_position_embeddings": 8192,
}

# Where the provider's default deliberately differs from TransformerConfig's (tested).
DEFAULTS_DIFFERING_FROM_MCORE = {
    "expert_tensor_parallel_size": (
        "1, not None: Megatron-Core's None means 'same as tensor_model_parallel_size', but bridge's "
        "layouts (and Megatron-Bridge's recipes) keep expert weights unsplit (ETP=1) unless asked"
    ),
}


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def transformer_field_names() -> tuple[str, ...]:
    """The provider fields that are passed to TransformerConfig (in TransformerConfig's order)."""
    return AVAILABLE_FIELDS


@functools.cache
def _warn_untested_release() -> None:
    logger.warning(
        "megatron-core %s is outside the tested releases (%s); using the field snapshot of %s",
        INSTALLED_RELEASE,
        ", ".join(TESTED_RELEASES),
        SNAPSHOT.RELEASE,
    )


def _no_init(tensor):
    return tensor


@functools.cache
def _has_mla_qk_norm_resolver() -> bool:
    """The installed Megatron-Core has megatron/core/transformer/mla_qk_norm_config.py (0.19.x), looked up
    on disk: importing a submodule to find it would import Megatron-Core and torch (the dry run has neither)."""
    spec = importlib.util.find_spec("megatron")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(loc) / "core" / "transformer" / "mla_qk_norm_config.py").is_file() for loc in locations)


def _fail(field: str, value: Any, rule: str, fix: str) -> ConfigError:
    return ConfigError(f"model.{field}={value!r}: {rule}. Fix: {fix}.")


@dataclass
class GPTModelProvider(TransformerFields):
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
    position_embedding_type: str = "learned_absolute"
    rotary_base: int = 10000
    rotary_percent: float = 1.0
    seq_len_interpolation_factor: float | None = None
    # llama3-style RoPE scaling (Llama 3.1 / 3.2), as HF's rope_scaling {"rope_type": "llama3", ...}.
    rope_scaling: bool = False
    rope_scaling_factor: float = 8.0
    rope_scaling_low_freq_factor: float = 1.0
    rope_scaling_high_freq_factor: float = 4.0
    rope_scaling_original_max_position_embeddings: int = 8192
    share_embeddings_and_output_weights: bool = False
    fp16_lm_cross_entropy: bool = False
    parallel_output: bool = True
    scatter_embedding_sequence_parallel: bool = True

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

    def __setattr__(self, name: str, value: Any) -> None:
        # A typo (provider.num_layer = 4) must fail, not create a new attribute nobody reads.
        if not name.startswith("_") and name not in _field_names(type(self)):
            import difflib

            close = difflib.get_close_matches(name, _field_names(type(self)), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see GPTModelProvider's fields"
            raise ConfigError(f"model.{name}: unknown GPTModelProvider field. Fix: {hint}")
        object.__setattr__(self, name, value)

    # ---- pure-data checks and views -------------------------------------------------------------

    def finalize(self) -> None:
        """Check the model fields (layout rules are checked by `layout()`); raise ConfigError."""
        for name in UNAVAILABLE_FIELDS:
            value = getattr(self, name)
            if value != field_default(name):
                raise ConfigError(unavailable_field_error(name, value))
        for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"):
            if getattr(self, name) <= 0:
                raise _fail(name, getattr(self, name), "must be a positive integer", f"set model.{name}")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise _fail(
                "hidden_size",
                self.hidden_size,
                f"must be divisible by num_attention_heads={self.num_attention_heads} when kv_channels is unset",
                "change hidden_size or num_attention_heads, or set kv_channels (the head dimension)",
            )
        groups = self.num_query_groups
        if groups is not None and (groups <= 0 or self.num_attention_heads % groups):
            raise _fail(
                "num_query_groups",
                groups,
                f"must be a positive divisor of num_attention_heads={self.num_attention_heads}",
                "set the number of key/value heads (HF num_key_value_heads), or None for MHA",
            )
        for name, choices in FIELD_CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise _fail(name, value, f"must be one of {list(choices)}", "pick one of those")
        for name, kind in BY_NAME_FIELDS.items():
            value = getattr(self, name)
            if kind == "dtype" and value is not None and value not in DTYPES:
                raise _fail(name, value, f"must be one of {list(DTYPES)}", "give the dtype by name")
        checks = (
            ("activation_func", ACTIVATIONS),
            ("position_embedding_type", POSITION_EMBEDDINGS),
        )
        for name, known in checks:
            if getattr(self, name) not in known:
                raise _fail(name, getattr(self, name), f"must be one of {list(known)}", "pick one of those")
        self._check_layer_variant()
        if self.multi_latent_attention:
            self._check_multi_latent_attention()
            self._check_mla_query_norm()  # here, so that the dry run refuses it as the build would
        if self.fp16 and self.bf16:
            raise _fail("fp16", True, "fp16 and bf16 are both set", "set only one of model.fp16 / model.bf16")
        if self.vocab_size is not None and self.vocab_size <= 0:
            raise _fail("vocab_size", self.vocab_size, "must be positive", "set the tokenizer's vocab size")
        if self.make_vocab_size_divisible_by <= 0:
            raise _fail(
                "make_vocab_size_divisible_by",
                self.make_vocab_size_divisible_by,
                "must be a positive integer",
                "use 128 (Megatron's default) or 1 for no padding",
            )
        if self.rope_scaling:
            if self.position_embedding_type != "rope":
                raise _fail(
                    "rope_scaling",
                    True,
                    f"needs position_embedding_type='rope', got {self.position_embedding_type!r}",
                    "set model.position_embedding_type=rope or model.rope_scaling=False",
                )
            if self.rope_scaling_factor <= 0:
                raise _fail(
                    "rope_scaling_factor", self.rope_scaling_factor, "must be positive", "use e.g. 8.0"
                )
            if not 0 < self.rope_scaling_low_freq_factor < self.rope_scaling_high_freq_factor:
                raise _fail(
                    "rope_scaling_low_freq_factor",
                    self.rope_scaling_low_freq_factor,
                    f"must be positive and below rope_scaling_high_freq_factor={self.rope_scaling_high_freq_factor}",
                    "use the values of the HF config's rope_scaling (llama3: 1.0 and 4.0)",
                )
        if self.num_moe_experts is not None:
            if self.num_moe_experts <= 0:
                raise _fail(
                    "num_moe_experts", self.num_moe_experts, "must be positive", "use None for a dense model"
                )
            freq = self.moe_layer_freq
            if isinstance(freq, (list, tuple)) and (
                len(freq) != self.num_layers or any(v not in (0, 1) for v in freq)
            ):
                raise _fail(
                    "moe_layer_freq",
                    list(freq),
                    f"a per-layer pattern must hold num_layers={self.num_layers} values of 1 (MoE layer) "
                    "or 0 (dense MLP of ffn_hidden_size)",
                    "give one 0/1 per layer, or an integer N (a MoE layer every N layers)",
                )
            if not 1 <= self.moe_router_topk <= self.num_moe_experts:
                raise _fail(
                    "moe_router_topk",
                    self.moe_router_topk,
                    f"must be between 1 and num_moe_experts={self.num_moe_experts}",
                    "set the number of experts each token is routed to",
                )

    def _check_layer_variant(self) -> None:
        for name, known in (
            ("layernorm_placement", LAYERNORM_PLACEMENTS),
            ("qk_layernorm_scope", QK_LAYERNORM_SCOPES),
        ):
            if getattr(self, name) not in known:
                raise _fail(name, getattr(self, name), f"must be one of {list(known)}", "pick one of those")
        if self.qk_layernorm_scope == "projection" and not self.qk_layernorm:
            raise _fail(
                "qk_layernorm_scope",
                "projection",
                "scopes the q/k norms, which qk_layernorm=False does not build",
                "set model.qk_layernorm=True or model.qk_layernorm_scope=head",
            )
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise _fail(
                    name, value, "must be positive or None (no soft-capping)", "use e.g. 50.0 or None"
                )
        self._check_local_rotary_base()

    def _check_local_rotary_base(self) -> None:
        value = self.local_rotary_base
        if value is None:
            return
        if not value > 0:
            raise _fail("local_rotary_base", value, "must be positive or None", "use e.g. 10000.0 or None")
        if self.position_embedding_type != "rope" or self.rotary_percent != 1.0 or self.rope_scaling:
            raise _fail(
                "local_rotary_base",
                value,
                "needs position_embedding_type='rope', rotary_percent=1.0 and rope_scaling=False "
                "(the per-layer RoPE of bridge.models.local_rope_attention rotates whole heads)",
                "set those fields or model.local_rotary_base=None",
            )
        if self.window_size is None:
            raise _fail(
                "local_rotary_base",
                value,
                "is the RoPE base of the sliding-window layers, and window_size=None makes none",
                "set model.window_size (and window_attn_skip_freq) or model.local_rotary_base=None",
            )

    def layer_variant(self):
        """The layer variant bridge's spec builds for this model (pure data)."""
        from bridge.models.layer_variant import LayerVariant

        return LayerVariant(
            layernorm_placement=self.layernorm_placement,
            qk_layernorm_scope=self.qk_layernorm_scope,
            attn_logit_softcapping=self.attn_logit_softcapping,
            local_rotary_base=self.local_rotary_base,
        )

    def _check_multi_latent_attention(self) -> None:
        # Megatron-Core's MLA (MLATransformerConfig) carries its own RoPE: rope_type "rope" or "yarn" on
        # the qk_pos_emb_head_dim slice of each head; GPTModel builds no rotary embedding of its own.
        if self.position_embedding_type != "rope":
            raise _fail(
                "position_embedding_type",
                self.position_embedding_type,
                "multi-latent attention applies its own rotary embedding (rope_type), so it needs 'rope'",
                "set model.position_embedding_type=rope",
            )
        if self.rope_type not in ("rope", "yarn"):
            raise _fail(
                "rope_type", self.rope_type, "must be 'rope' or 'yarn' (MLA's RoPE)", "pick one of those"
            )
        if self.rope_scaling:
            raise _fail(
                "rope_scaling",
                True,
                "llama3 RoPE scaling is GPTModel's rotary embedding, which multi-latent attention does not use",
                "set model.rope_scaling=False (MLA scales its RoPE with rope_type=yarn)",
            )
        if self.q_lora_rank is not None and self.q_lora_rank <= 0:
            raise _fail(
                "q_lora_rank", self.q_lora_rank, "must be positive or None", "use None for no q compression"
            )
        for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if getattr(self, name) <= 0:
                raise _fail(name, getattr(self, name), "must be a positive integer", f"set model.{name}")

    def _check_mla_query_norm(self) -> None:
        # megatron-core 0.19.2's MLA resolves its q/kv norms (mla_qk_norm_config.QKNormConfigResolver):
        # with qk_layernorm and q_lora_rank None it builds linear_q_proj as a fused norm+linear, a norm on
        # the query input that DeepSeek-V2-Lite does not have (0.16.1 builds no q norm then).
        if self.q_lora_rank is not None or not self.qk_layernorm:
            return
        if not _has_mla_qk_norm_resolver():
            return
        raise _fail(
            "q_lora_rank",
            None,
            f"megatron-core {INSTALLED_RELEASE}'s multi-latent attention (QKNormConfigResolver) builds "
            "linear_q_proj as a fused norm+linear whenever qk_layernorm is set and q_lora_rank is None: a norm "
            "on the query input that DeepSeek-V2-Lite does not have (its one latent norm is kv_a_layernorm, "
            "which needs qk_layernorm), and the local spec has no fused norm+linear",
            "use megatron-core 0.16.1 for a model without query compression, or a model with q_lora_rank set",
        )

    def model_shape(self) -> ModelShape:
        """The model facts the layout rules and the planner need."""
        from bridge.parallel.layout import ModelShape

        return ModelShape(
            num_layers=self.num_layers,
            num_attention_heads=self.num_attention_heads,
            num_query_groups=self.num_query_groups,
            ffn_hidden_size=self.effective_ffn_hidden_size(),
            num_moe_experts=self.num_moe_experts,
            seq_length=self.seq_length,
            hidden_size=self.hidden_size,
            vocab_size=self.vocab_size,
            kv_channels=self.kv_channels,
            gated_linear_unit=self.gated_linear_unit,
            share_embeddings_and_output_weights=self.share_embeddings_and_output_weights,
            add_qkv_bias=self.add_qkv_bias,
            qk_layernorm=self.qk_layernorm,
            moe_router_topk=self.moe_router_topk,
            moe_ffn_hidden_size=self.moe_ffn_hidden_size,
            moe_shared_expert_intermediate_size=self.moe_shared_expert_intermediate_size,
            moe_shared_expert_gate=bool(self.moe_shared_expert_gate),
            moe_layer_freq=(
                tuple(self.moe_layer_freq) if isinstance(self.moe_layer_freq, list) else self.moe_layer_freq
            ),
            layer_norms=4 if self.layernorm_placement == "sandwich" else 2,
            qk_layernorm_per_projection=self.qk_layernorm and self.qk_layernorm_scope == "projection",
            **self._mla_shape(),
        )

    def _mla_shape(self) -> dict:
        if not self.multi_latent_attention:
            return {}
        names = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
        return {"multi_latent_attention": True} | {name: getattr(self, name) for name in names}

    def layout(
        self,
        world_size: int,
        strategy: str = "megatron",
        dp_replicate_size: int | None = None,
        packed_sequence_size: int | None = None,
        gpus_per_node: int = 8,
    ) -> ParallelLayout:
        """The validated parallel layout of this model on `world_size` ranks (raises ConfigError)."""
        from bridge.parallel.layout import ParallelLayout

        return ParallelLayout(
            world_size=world_size,
            tp=self.tensor_model_parallel_size,
            pp=self.pipeline_model_parallel_size,
            vpp=self.virtual_pipeline_model_parallel_size,
            cp=self.context_parallel_size,
            ep=self.expert_model_parallel_size,
            etp=self.effective_expert_tensor_parallel_size(),
            sequence_parallel=self.sequence_parallel,
            strategy=strategy,
            dp_replicate_size=dp_replicate_size,
            packed_sequence_size=packed_sequence_size,
            gpus_per_node=gpus_per_node,
            model=self.model_shape(),
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
        """vocab_size rounded up to a multiple of make_vocab_size_divisible_by * tp (Megatron's rule)."""
        if self.vocab_size is None:
            raise _fail("vocab_size", None, "is needed to build the model", "set the tokenizer's vocab size")
        from bridge.parallel.param_count import padded_vocab_size

        return padded_vocab_size(
            self.vocab_size, self.tensor_model_parallel_size, self.make_vocab_size_divisible_by
        )

    # ---- Megatron-Core objects (import torch / megatron.core) ------------------------------------

    def megatron_value(self, name: str) -> Any:
        """The value TransformerConfig gets for field `name` (names mapped to dtypes/callables)."""
        value = getattr(self, name)
        kind = BY_NAME_FIELDS.get(name)
        if kind == "dtype":
            if name == "pipeline_dtype" and value is None:
                value = "bf16" if self.bf16 else "fp16" if self.fp16 else self.params_dtype
            return None if value is None else torch_dtype(value)
        if kind == "activation":
            module, attr = ACTIVATIONS[value]
            return getattr(importlib.import_module(module), attr)
        if kind is not None and value is not None:  # "enum:<module>.<class>"
            module, _, cls = kind.removeprefix("enum:").rpartition(".")
            return getattr(importlib.import_module(module), cls)[value]
        if name == "window_size" and value is not None:
            return tuple(value)
        if isinstance(value, list):
            return list(value)
        return value

    def transformer_config(self):
        """Build megatron.core's TransformerConfig from this provider (raises ConfigError)."""
        import torch
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        self.finalize()
        declared = {f.name for f in fields(TransformerConfig)}
        if SNAPSHOT.RELEASE.split(".")[:2] != (INSTALLED_RELEASE or "").split(".")[:2]:
            _warn_untested_release()
        # Only what the live TransformerConfig declares (a patch release may differ from its snapshot).
        kwargs = {name: self.megatron_value(name) for name in transformer_field_names() if name in declared}
        config_class = TransformerConfig
        if self.multi_latent_attention:
            # MLATransformerConfig's own fields, and the RoPE base / percent the provider holds for GPTModel.
            config_class = MLATransformerConfig
            mla_declared = {f.name for f in fields(MLATransformerConfig)}
            kwargs |= {name: self.megatron_value(name) for name in MLA_FIELDS if name in mla_declared}
            kwargs |= dict(rotary_base=self.rotary_base, rotary_percent=self.rotary_percent)
        if not torch.cuda.is_available():
            # Without CUDA there is no other device to initialize weights on.
            kwargs["use_cpu_initialization"] = True
        try:
            return config_class(**kwargs)
        except (ValueError, AssertionError, NotImplementedError) as err:
            from bridge.models.performance_settings import SETTINGS

            asked = [s.field for s in SETTINGS if s.requested(getattr(self, s.field))]
            hint = (
                f" This model asks for GPU performance settings ({', '.join(asked)}): build the run's model "
                "from the plan (cfg.validate(world_size).provider), which turns off the ones this machine "
                "cannot run and reports them."
                if asked
                else ""
            )
            raise ConfigError(
                f"Megatron-Core's TransformerConfig rejects the model section: {err}. "
                f"Fix: change the model.* field it names.{hint}"
            ) from err

    def provide(
        self, pre_process: bool | None = None, post_process: bool | None = None, vp_stage: int | None = None
    ):
        """Build one GPTModel stage for this rank; pre/post default to this rank's pipeline position."""
        return self._build_stage(self.transformer_config(), pre_process, post_process, vp_stage)

    def _build_stage(self, config, pre_process: bool | None, post_process: bool | None, vp_stage: int | None):
        from megatron.core import parallel_state
        from megatron.core.models.gpt import GPTModel

        from bridge.models.specs import gpt_block_spec, local_core_attention, uses_te_spec

        variant = self.layer_variant()
        if self.context_parallel_size > 1 and variant.attn_logit_softcapping is not None:
            raise _fail(
                "context_parallel_size",
                self.context_parallel_size,
                "attention logit soft-capping runs through bridge's explicit softcap attention "
                "(bridge.models.softcap_attention), which has no context-parallel path",
                "set model.context_parallel_size=1",
            )
        if self.context_parallel_size > 1 and variant.local_rotary_base is not None:
            raise _fail(
                "context_parallel_size",
                self.context_parallel_size,
                "per-layer RoPE (local_rotary_base, bridge.models.local_rope_attention) and the per-layer "
                "windows of bridge's explicit attention have no context-parallel path",
                "set model.context_parallel_size=1",
            )
        if self.context_parallel_size > 1 and not uses_te_spec(variant):
            # Without TE, CP runs through the local spec's SDPAttention (K/V all-gathered over the CP group);
            # Megatron-Core's DotProductAttention refuses CP.
            from bridge.models.attention import SDPAttention, unsupported_reason

            if self.multi_latent_attention:
                raise _fail(
                    "context_parallel_size",
                    self.context_parallel_size,
                    "multi-latent attention with context parallelism on the local spec (sdpa attention, no "
                    "Transformer Engine) is not verified against a CP=1 run in this bridge",
                    "set model.context_parallel_size=1, or run on CUDA with transformer-engine",
                )
            if local_core_attention(config) is not SDPAttention:
                reason = (
                    unsupported_reason(config) or f"model.attention_backend={config.attention_backend.name}"
                )
                raise _fail(
                    "context_parallel_size",
                    self.context_parallel_size,
                    "context parallelism without Transformer Engine runs through bridge's sdpa attention "
                    f"(attention_backend auto, flash or fused), which this config cannot use ({reason}); "
                    "Megatron-Core's local DotProductAttention refuses CP",
                    "use attention_backend=auto without that setting, install transformer-engine on a CUDA "
                    "machine, or set model.context_parallel_size=1",
                )
        if vp_stage is None and parallel_state.get_virtual_pipeline_model_parallel_world_size() is not None:
            raise ValueError(
                "provide(): vp_stage (0 .. virtual_pipeline_model_parallel_size-1) is required with virtual "
                "pipeline parallelism; provide_distributed_model() builds every chunk of this rank"
            )
        if pre_process is None:
            pre_process = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        if post_process is None:
            post_process = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        model = GPTModel(
            config=config,
            transformer_layer_spec=gpt_block_spec(config, vp_stage=vp_stage, variant=variant),
            vocab_size=self.padded_vocab_size(),
            max_sequence_length=self.seq_length,
            pre_process=pre_process,
            post_process=post_process,
            fp16_lm_cross_entropy=self.fp16_lm_cross_entropy,
            parallel_output=self.parallel_output,
            share_embeddings_and_output_weights=self.share_embeddings_and_output_weights,
            position_embedding_type=self.position_embedding_type,
            rotary_percent=self.rotary_percent,
            rotary_base=self.rotary_base,
            rope_scaling=self.rope_scaling,
            rope_scaling_factor=self.rope_scaling_factor,
            scatter_embedding_sequence_parallel=self.scatter_embedding_sequence_parallel,
            seq_len_interpolation_factor=self.seq_len_interpolation_factor,
            vp_stage=vp_stage,
        )
        self._apply_rope_scaling_factors(model)
        from bridge.models.output_hooks import apply_output_hooks

        apply_output_hooks(model, self)
        return model

    def _apply_rope_scaling_factors(self, model) -> None:
        # GPTModel passes only the factor; other llama3 frequency bounds are applied here.
        rope = getattr(model, "rotary_pos_emb", None)
        if not self.rope_scaling or rope is None:
            return
        if all(getattr(self, k) == v for k, v in MCORE_ROPE_SCALING_DEFAULTS.items()):
            return
        import torch

        dim = self.effective_kv_channels()
        if self.rotary_percent < 1.0:
            dim = int(dim * self.rotary_percent)
        exponent = torch.arange(0, dim, 2, dtype=torch.float32, device=rope.inv_freq.device) / dim
        rope.inv_freq = rope._apply_scaling(
            1.0 / (self.rotary_base**exponent),
            factor=self.rope_scaling_factor,
            low_freq_factor=self.rope_scaling_low_freq_factor,
            high_freq_factor=self.rope_scaling_high_freq_factor,
            original_max_position_embeddings=self.rope_scaling_original_max_position_embeddings,
        )

    def register_post_build_hook(
        self, hook: Callable[[list], None], *, replaces_weights: bool = False
    ) -> None:
        """Run `hook(chunks)` in provide_distributed_model() on the built GPTModel chunks, before the
        Float16Module / DDP wrappers (e.g. AutoBridge loading HF weights). Hooks run in order; they are
        not fields (not serialised, not copied by dataclasses.replace). `replaces_weights=True` says the
        hook overwrites every parameter, so random initialisation is skipped by default."""
        self.__dict__.setdefault("_post_build_hooks", []).append((hook, replaces_weights))

    def post_build_hooks(self) -> tuple:
        return tuple(hook for hook, _ in self.__dict__.get("_post_build_hooks", ()))

    def _hooks_replace_weights(self) -> bool:
        return any(replaces for _, replaces in self.__dict__.get("_post_build_hooks", ()))

    def provide_distributed_model(
        self,
        wrap_with_ddp: bool = True,
        ddp_config: Any = None,
        mixed_precision_wrapper: bool = True,
        data_parallel_random_init: bool = False,
        seed: int = 1234,
        random_init: bool | None = None,
        meta_device: bool = False,
    ) -> list:
        """The model chunks of this rank (one per virtual pipeline stage), ready for training.

        Initializes torch.distributed and the model-parallel groups for this provider's layout when
        they are not initialized yet (one process when not under torchrun). `ddp_config` is a
        megatron.core DistributedDataParallelConfig or a dict of its fields. `data_parallel_random_init`
        broadcasts data-parallel rank 0's weights to the other replicas (as Megatron-LM's flag does).
        `random_init=False` (default: False when a hook replaces the weights, else True) skips random initialisation because every weight will be overwritten (by
        a post-build hook or a checkpoint load): Megatron-Core gets no-op init methods on its in-place
        path, so the tensor-parallel attributes stay marked (perform_initialization=False would drop
        them). Post-build hooks (register_post_build_hook) run on the bare chunks before any wrapper.
        `meta_device=True`: every parameter on the meta device (shapes, dtypes and sharding only, no
        memory), for conversions that stream the weights (bridge.conversion.streaming); no DDP wrapper.
        """
        import torch
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.transformer.module import Float16Module

        if not parallel_state.model_parallel_is_initialized():
            from bridge.parallel import ranks, runtime

            runtime.initialize_distributed(self.layout(ranks.env_world_size()), seed=seed)
        self._check_parallel_state(parallel_state)

        # One TransformerConfig shared by all chunks, as Megatron-LM does: the training loop sets its
        # hooks (no_sync_func, finalize_model_grads_func, ...) once and every chunk sees them.
        config = self.transformer_config()
        if random_init is None:
            random_init = not self._hooks_replace_weights()
        if not random_init:
            # The in-place path allocates each local shard directly; the CPU path would first build
            # every full weight in fp32 (a model-sized transient) only to overwrite it.
            config.use_cpu_initialization = False
            for name in ("init_method", "output_layer_init_method", "embedding_init_method"):
                if hasattr(config, name):
                    setattr(config, name, _no_init)
        if meta_device:
            if wrap_with_ddp:
                raise ConfigError(
                    "provide_distributed_model(meta_device=True, wrap_with_ddp=True): a meta-device model "
                    "holds no data to train or wrap; pass wrap_with_ddp=False"
                )
            # The CPU-initialization path allocates without an explicit device, so the meta context
            # applies (the in-place path names the accelerator); TE layers take the config flag.
            config.use_cpu_initialization = True
            config.init_model_with_meta_device = True
        vpp = self.virtual_pipeline_model_parallel_size
        with torch.device("meta") if meta_device else contextlib.nullcontext():
            if self.pipeline_model_parallel_size > 1 and vpp is not None:
                chunks = [self._build_stage(config, None, None, stage) for stage in range(vpp)]
            else:
                chunks = [self._build_stage(config, None, None, None)]
        for chunk in chunks:
            for param in chunk.parameters():
                tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
            if torch.cuda.is_available() and not meta_device:
                chunk.cuda(torch.cuda.current_device())
        for hook in self.post_build_hooks():
            hook(chunks)
        if mixed_precision_wrapper and (self.fp16 or self.bf16):
            chunks = [Float16Module(config, chunk) for chunk in chunks]
        if wrap_with_ddp:
            if ddp_config is None:
                ddp_config = DistributedDataParallelConfig()
            elif isinstance(ddp_config, dict):
                ddp_config = DistributedDataParallelConfig(**ddp_config)
            chunks = [
                # As Megatron-LM: no buckets after the first chunk (their comms overlap with compute anyway).
                DistributedDataParallel(
                    config=config, ddp_config=ddp_config, module=chunk, disable_bucketing=i > 0
                )
                for i, chunk in enumerate(chunks)
            ]
            if data_parallel_random_init:
                for chunk in chunks:
                    chunk.broadcast_params()
        return chunks

    def _check_parallel_state(self, parallel_state) -> None:
        # Groups built for another layout would silently shard the model wrongly.
        live = {
            "tensor_model_parallel_size": parallel_state.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": parallel_state.get_pipeline_model_parallel_world_size(),
            "virtual_pipeline_model_parallel_size": parallel_state.get_virtual_pipeline_model_parallel_world_size(),
            "context_parallel_size": parallel_state.get_context_parallel_world_size(),
            "expert_model_parallel_size": parallel_state.get_expert_model_parallel_world_size(),
            "expert_tensor_parallel_size": parallel_state.get_expert_tensor_parallel_world_size(),
        }
        wanted = {name: getattr(self, name) for name in live}
        wanted["expert_tensor_parallel_size"] = self.effective_expert_tensor_parallel_size()
        if self.pipeline_model_parallel_size == 1:
            live["virtual_pipeline_model_parallel_size"] = wanted["virtual_pipeline_model_parallel_size"]
        for name, size in live.items():
            if size != wanted[name]:
                raise _fail(
                    name,
                    wanted[name],
                    f"the model-parallel groups of this process were initialized with {size}",
                    "build the model with the provider whose layout initialized the groups, or "
                    "destroy them (bridge.parallel.runtime.destroy_distributed) first",
                )
