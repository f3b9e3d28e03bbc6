"""The Megatron-Core build of a GPTModelProvider: TransformerConfig, one GPTModel stage, RoPE factors.

The only provider module that touches torch / megatron.core, always inside functions, so that the
provider itself stays pure data (`import bridge` and the dry run import neither).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigError
from bridge.models.dtypes import torch_dtype
from bridge.models.performance_settings import SETTINGS
from bridge.models.provider_checks import ACTIVATIONS, model_error
from bridge.models.specs import gpt_block_spec, gpt_mtp_block_spec, local_core_attention, uses_te_spec
from bridge.models.transformer_fields import (
    AVAILABLE_FIELDS,
    BY_NAME_FIELDS,
    INSTALLED_RELEASE,
    MLA_FIELDS,
    SNAPSHOT,
    TESTED_RELEASES,
)

if TYPE_CHECKING:
    from bridge.models.layer_variant import LayerVariant
    from bridge.models.provider_fields import GPTFields

logger = logging.getLogger(__name__)

YARN_FIELDS = (
    "yarn_rotary_scaling_factor",
    "yarn_original_max_position_embeddings",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_correction_range_round_to_int",
    "yarn_mscale",
    "yarn_mscale_all_dim",
)

# Megatron-Core's RotaryEmbedding applies llama3 scaling with these fixed values; other values are
# applied by the provider after the model is built.
MCORE_ROPE_SCALING_DEFAULTS = {
    "rope_scaling_low_freq_factor": 1.0,
    "rope_scaling_high_freq_factor": 4.0,
    "rope_scaling_original_max_position_embeddings": 8192,
}


@functools.cache
def _warn_untested_release() -> None:
    logger.warning(
        "megatron-core %s is outside the tested releases (%s); using the field snapshot of %s",
        INSTALLED_RELEASE,
        ", ".join(TESTED_RELEASES),
        SNAPSHOT.RELEASE,
    )


def megatron_value(p: GPTFields, name: str) -> Any:
    """The value TransformerConfig gets for field `name` (names mapped to dtypes/callables)."""
    value = getattr(p, name)
    kind = BY_NAME_FIELDS.get(name)
    if kind == "dtype":
        if name == "pipeline_dtype" and value is None:
            value = "bf16" if p.bf16 else "fp16" if p.fp16 else p.params_dtype
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


def transformer_config(p: GPTFields):
    """Build megatron.core's TransformerConfig from the provider (raises ConfigError)."""
    import torch
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    p.finalize()
    declared = {f.name for f in fields(TransformerConfig)}
    if SNAPSHOT.RELEASE.split(".")[:2] != (INSTALLED_RELEASE or "").split(".")[:2]:
        _warn_untested_release()
    # Only what the live TransformerConfig declares (a patch release may differ from its snapshot).
    kwargs = {name: megatron_value(p, name) for name in AVAILABLE_FIELDS if name in declared}
    config_class = TransformerConfig
    if p.multi_latent_attention:
        # MLATransformerConfig's own fields, and the RoPE base / percent the provider holds for GPTModel.
        config_class = MLATransformerConfig
        mla_declared = {f.name for f in fields(MLATransformerConfig)}
        kwargs |= {name: megatron_value(p, name) for name in MLA_FIELDS if name in mla_declared}
        kwargs |= dict(rotary_base=p.rotary_base, rotary_percent=p.rotary_percent)
    if not torch.cuda.is_available():
        # Without CUDA there is no other device to initialize weights on.
        kwargs["use_cpu_initialization"] = True
    try:
        config = config_class(**kwargs)
    except (ValueError, AssertionError, NotImplementedError) as err:
        asked = [s.field for s in SETTINGS if s.requested(getattr(p, s.field))]
        hint = (
            f" This model asks for GPU performance settings ({', '.join(asked)}): build the run's model "
            "from the plan (build_plan(cfg, world_size).provider), which turns off the ones this machine "
            "cannot run and reports them."
            if asked
            else ""
        )
        raise ConfigError(
            f"Megatron-Core's TransformerConfig rejects the model section: {err}. "
            f"Fix: change the model.* field it names.{hint}"
        ) from err
    if p.position_embedding_type == "yarn":
        _set_yarn_attributes(p, config)
    return config


def _set_yarn_attributes(p: GPTFields, config) -> None:
    """GPTModel's YaRN (and its attention's cos / sin scaling) reads yarn_* attributes TransformerConfig
    does not declare (0.16.1, 0.19.2)."""
    for name in YARN_FIELDS:
        setattr(config, name, getattr(p, name))


def _check_context_parallel_attention(p: GPTFields, config, variant: LayerVariant) -> None:
    """Refuse the attention variants that have no context-parallel path (the build would be wrong)."""
    if p.context_parallel_size > 1 and variant.attn_logit_softcapping is not None:
        raise model_error(
            "context_parallel_size",
            p.context_parallel_size,
            "attention logit soft-capping runs through bridge's explicit softcap attention "
            "(bridge.models.softcap_attention), which has no context-parallel path",
            "set model.context_parallel_size=1",
        )
    if p.context_parallel_size > 1 and variant.local_rotary_base is not None:
        raise model_error(
            "context_parallel_size",
            p.context_parallel_size,
            "per-layer RoPE (local_rotary_base, bridge.models.local_rope_attention) and the per-layer "
            "windows of bridge's explicit attention have no context-parallel path",
            "set model.context_parallel_size=1",
        )
    if p.context_parallel_size > 1 and not uses_te_spec(variant):
        # Without TE, CP runs through the local spec's SDPAttention (K/V all-gathered over the CP group);
        # Megatron-Core's DotProductAttention refuses CP.
        from bridge.models.attention import SDPAttention, unsupported_reason

        if p.multi_latent_attention:
            raise model_error(
                "context_parallel_size",
                p.context_parallel_size,
                "multi-latent attention with context parallelism on the local spec (sdpa attention, no "
                "Transformer Engine) is not verified against a CP=1 run in this bridge",
                "set model.context_parallel_size=1, or run on CUDA with transformer-engine",
            )
        if local_core_attention(config) is not SDPAttention:
            reason = unsupported_reason(config) or f"model.attention_backend={config.attention_backend.name}"
            raise model_error(
                "context_parallel_size",
                p.context_parallel_size,
                "context parallelism without Transformer Engine runs through bridge's sdpa attention "
                f"(attention_backend auto, flash or fused), which this config cannot use ({reason}); "
                "Megatron-Core's local DotProductAttention refuses CP",
                "use attention_backend=auto without that setting, install transformer-engine on a CUDA "
                "machine, or set model.context_parallel_size=1",
            )


def build_stage(
    p: GPTFields,
    config,
    pre_process: bool | None,
    post_process: bool | None,
    vp_stage: int | None,
    stage_model: Callable[[bool], tuple[type, dict[str, Any]]],
):
    """One model stage of this rank on `config`, of the class `stage_model(pre_process)` names (GPTModel
    or a subclass) with its extra arguments; pre/post default to this rank's pipeline position."""
    from megatron.core import parallel_state

    variant = p.layer_variant()
    _check_context_parallel_attention(p, config, variant)
    if vp_stage is None and parallel_state.get_virtual_pipeline_model_parallel_world_size() is not None:
        raise ValueError(
            "provide(): vp_stage (0 .. virtual_pipeline_model_parallel_size-1) is required with virtual "
            "pipeline parallelism; provide_distributed_model() builds every chunk of this rank"
        )
    if pre_process is None:
        pre_process = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    if post_process is None:
        post_process = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    block = gpt_block_spec(config, vp_stage=vp_stage, variant=variant)
    mtp = gpt_mtp_block_spec(config, block, vp_stage=vp_stage, variant=variant)
    model_class, extra = stage_model(pre_process)
    arguments = dict(
        config=config,
        transformer_layer_spec=block,
        mtp_block_spec=mtp,
        vocab_size=p.padded_vocab_size(),
        max_sequence_length=p.seq_length,
        pre_process=pre_process,
        post_process=post_process,
        fp16_lm_cross_entropy=p.fp16_lm_cross_entropy,
        parallel_output=p.parallel_output,
        share_embeddings_and_output_weights=p.share_embeddings_and_output_weights,
        position_embedding_type=p.position_embedding_type,
        rotary_percent=p.rotary_percent,
        rotary_base=p.rotary_base,
        rope_scaling=p.rope_scaling,
        rope_scaling_factor=p.rope_scaling_factor,
        scatter_embedding_sequence_parallel=p.scatter_embedding_sequence_parallel,
        seq_len_interpolation_factor=p.seq_len_interpolation_factor,
        vp_stage=vp_stage,
    )
    model = model_class(**(arguments | extra))  # the stage model's own arguments win
    _apply_rope_scaling_factors(p, model)
    _apply_yarn(p, model)
    _apply_interleaved_mrope(p, model)
    from bridge.models.output_hooks import apply_output_hooks

    apply_output_hooks(model, p)
    if p.multi_latent_attention and p.tensor_model_parallel_size > 1:
        from bridge.models.mla_rope_grad import whole_rope_key_gradient

        whole_rope_key_gradient(model)
    _mark_head_split_softmax_offsets(model)
    if p.experimental_attention_variant == "gated_delta_net":
        from bridge.models.linear_attention import mark_gated_delta_net_partitions

        mark_gated_delta_net_partitions(model)
    return model


def _apply_yarn(p: GPTFields, model) -> None:
    """GPTModel's RoPE with YaRN's inverse frequencies (its attention factor: the layer variant's)."""
    rope = getattr(model, "rotary_pos_emb", None)
    if p.yarn_rope_factor is None or rope is None:
        return
    from bridge.models.yarn_rope import yarn_inv_freq

    dim = p.effective_kv_channels()
    if p.rotary_percent < 1.0:
        dim = int(dim * p.rotary_percent)
    rope.inv_freq = yarn_inv_freq(
        dim,
        p.rotary_base,
        p.yarn_rope_factor,
        p.yarn_rope_original_max_position_embeddings,
        p.yarn_rope_beta_fast,
        p.yarn_rope_beta_slow,
        device=rope.inv_freq.device,
    )


def _apply_interleaved_mrope(p: GPTFields, model) -> None:
    """GPTModel's M-RoPE with interleaved frequency sections (after YaRN, whose frequencies it keeps)."""
    rope = getattr(model, "rotary_pos_emb", None)
    if not p.mrope_interleaved or rope is None:
        return
    from bridge.models.interleaved_mrope import InterleavedMultimodalRotaryEmbedding

    model.rotary_pos_emb = InterleavedMultimodalRotaryEmbedding(rope)


def _mark_head_split_softmax_offsets(model) -> None:
    """Megatron-Core's learnable softmax_offset (attention sinks) holds this TP rank's heads and its
    checkpoint shards it along dim 0, but the parameter carries no tensor-parallel attributes (0.16.1,
    0.19.2): set them, so that the gradient norm and the conversion see it split by heads like q."""
    from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

    for name, param in model.named_parameters():
        if name.endswith("core_attention.softmax_offset") and not hasattr(param, "tensor_model_parallel"):
            set_tensor_model_parallel_attributes(param, is_parallel=True, dim=0, stride=1)


def _apply_rope_scaling_factors(p: GPTFields, model) -> None:
    # GPTModel passes only the factor; other llama3 frequency bounds are applied here.
    rope = getattr(model, "rotary_pos_emb", None)
    if not p.rope_scaling or rope is None:
        return
    if all(getattr(p, k) == v for k, v in MCORE_ROPE_SCALING_DEFAULTS.items()):
        return
    import torch

    dim = p.effective_kv_channels()
    if p.rotary_percent < 1.0:
        dim = int(dim * p.rotary_percent)
    exponent = torch.arange(0, dim, 2, dtype=torch.float32, device=rope.inv_freq.device) / dim
    rope.inv_freq = rope._apply_scaling(
        1.0 / (p.rotary_base**exponent),
        factor=p.rope_scaling_factor,
        low_freq_factor=p.rope_scaling_low_freq_factor,
        high_freq_factor=p.rope_scaling_high_freq_factor,
        original_max_position_embeddings=p.rope_scaling_original_max_position_embeddings,
    )
