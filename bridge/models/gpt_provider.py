"""GPTModelProvider: a GPT model and its parallel sizes described as data, built on Megatron-Core on demand.

Pure data: defining, overriding, validating and serialising a provider imports neither torch nor
megatron.core. `transformer_config()`, `provide()` and `provide_distributed_model()` import them when a
model is actually built. The work lives beside this module, one job each: the field checks
(provider_checks), the layout derivation (provider_layout), the Megatron-Core build (provider_build) and
the distributed build (provider_distributed); the methods here are the provider's interface to them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigError
from bridge.models import provider_build, provider_checks, provider_distributed, provider_layout
from bridge.models.provider_build import MCORE_ROPE_SCALING_DEFAULTS
from bridge.models.provider_checks import (
    ACTIVATIONS,
    LAYERNORM_PLACEMENTS,
    POSITION_EMBEDDINGS,
    QK_LAYERNORM_SCOPES,
    model_error,
)
from bridge.models.transformer_fields import AVAILABLE_FIELDS, TransformerFields

if TYPE_CHECKING:
    from bridge.parallel.layout import ModelShape, ParallelLayout

# The provider and the vocabulary of its by-name fields (defined beside it, in provider_checks / provider_build).
__all__ = [
    "ACTIVATIONS",
    "DEFAULTS_DIFFERING_FROM_MCORE",
    "LAYERNORM_PLACEMENTS",
    "MCORE_ROPE_SCALING_DEFAULTS",
    "POSITION_EMBEDDINGS",
    "QK_LAYERNORM_SCOPES",
    "GPTModelProvider",
    "transformer_field_names",
]

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
        provider_checks.check_fields(self)

    def layer_variant(self):
        """The layer variant bridge's spec builds for this model (pure data)."""
        from bridge.models.layer_variant import LayerVariant

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
        )

    def model_shape(self) -> ModelShape:
        """The model facts the layout rules and the planner need."""
        return provider_layout.model_shape(self)

    def layout(
        self,
        world_size: int,
        strategy: str = "megatron",
        dp_replicate_size: int | None = None,
        packed_sequence_size: int | None = None,
        gpus_per_node: int = 8,
    ) -> ParallelLayout:
        """The validated parallel layout of this model on `world_size` ranks (raises ConfigError)."""
        return provider_layout.derive_layout(
            self, world_size, strategy, dp_replicate_size, packed_sequence_size, gpus_per_node
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
        from bridge.parallel.param_count import padded_vocab_size

        return padded_vocab_size(
            self.vocab_size, self.tensor_model_parallel_size, self.make_vocab_size_divisible_by
        )

    # ---- Megatron-Core objects (import torch / megatron.core) ------------------------------------

    def megatron_value(self, name: str) -> Any:
        """The value TransformerConfig gets for field `name` (names mapped to dtypes/callables)."""
        return provider_build.megatron_value(self, name)

    def transformer_config(self):
        """Build megatron.core's TransformerConfig from this provider (raises ConfigError)."""
        return provider_build.transformer_config(self)

    def provide(
        self, pre_process: bool | None = None, post_process: bool | None = None, vp_stage: int | None = None
    ):
        """Build one GPTModel stage for this rank; pre/post default to this rank's pipeline position."""
        return provider_build.build_stage(
            self, self.transformer_config(), pre_process, post_process, vp_stage
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

    def hooks_replace_weights(self) -> bool:
        """Whether a registered post-build hook overwrites every parameter."""
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
        layout: ParallelLayout | None = None,
    ) -> list:
        """The model chunks of this rank (one per virtual pipeline stage), ready for training.

        Initializes torch.distributed and the model-parallel groups for this provider's layout when
        they are not initialized yet (one process when not under torchrun). `layout`: the run's layout
        (the RunPlan's), which must agree with this provider's sizes; None derives it from them when the
        groups need initializing. `ddp_config` is a
        megatron.core DistributedDataParallelConfig or a dict of its fields. `data_parallel_random_init`
        broadcasts data-parallel rank 0's weights to the other replicas (as Megatron-LM's flag does).
        `random_init=False` (default: False when a hook replaces the weights, else True) skips random initialisation because every weight will be overwritten (by
        a post-build hook or a checkpoint load): Megatron-Core gets no-op init methods on its in-place
        path, so the tensor-parallel attributes stay marked (perform_initialization=False would drop
        them). Post-build hooks (register_post_build_hook) run on the bare chunks before any wrapper.
        `meta_device=True`: every parameter on the meta device (shapes, dtypes and sharding only, no
        memory), for conversions that stream the weights (bridge.conversion.streaming); no DDP wrapper.
        """
        return provider_distributed.provide_distributed_model(
            self,
            wrap_with_ddp=wrap_with_ddp,
            ddp_config=ddp_config,
            mixed_precision_wrapper=mixed_precision_wrapper,
            data_parallel_random_init=data_parallel_random_init,
            seed=seed,
            random_init=random_init,
            meta_device=meta_device,
            layout=layout,
        )
