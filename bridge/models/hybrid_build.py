"""The Megatron-Core build of a MambaModelProvider: the hybrid stack spec and one MambaModel stage
(megatron.core.models.mamba.MambaModel on 0.16; on 0.19 its HybridModel, which MambaModel only wraps).

Megatron-Core's own hybrid specs (`mamba_stack_spec` in 0.16.1, `hybrid_stack_spec` in 0.19.2) are
Transformer Engine specs only (their norms are fused into TE linears, the final norm is `TENorm`).
Without TE (CPU, or CUDA without transformer-engine) this module builds the local equivalent from
Megatron-Core's local GPT layer spec: each layer kind of the pattern with its pre-norm
(bridge.models.norms.SequenceParallelNorm), Mamba layers with the mixer's in/out projections as
Column/RowParallelLinear, and the stack's final norm. The parameter names are then the local spec's
(`decoder.layers.N.norm.weight`, `...input_layernorm.weight`, `...pre_mlp_layernorm.weight`,
`decoder.final_norm.weight`); the converter maps TE's fused names onto them.
torch / megatron.core are imported inside functions only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from bridge.models.latent_moe import with_latent_moe_layer
from bridge.models.specs import expert_column_parallel_linear, local_core_attention, use_transformer_engine
from bridge.parallel.ssm_backend import ensure_ssm_kernels

# The provider is a bridge.models.hybrid_provider.MambaModelProvider (not imported: it imports this module).
MambaModelProvider = Any


@functools.cache
def _stack_classes() -> tuple[type, type]:
    """(the stack module, its submodules dataclass) of the installed release."""
    try:  # 0.19: megatron.core.models.hybrid
        from megatron.core.models.hybrid.hybrid_block import HybridStack, HybridStackSubmodules

        return HybridStack, HybridStackSubmodules
    except ImportError:  # 0.16
        from megatron.core.ssm.mamba_block import MambaStack, MambaStackSubmodules

        return MambaStack, MambaStackSubmodules


@functools.cache
def local_stack_class() -> type:
    """The release's stack with bridge's norm as its final norm (its own is TENorm, TE only)."""
    from bridge.models.norms import SequenceParallelNorm

    stack, _ = _stack_classes()

    class LocalHybridStack(stack):
        def __init__(self, config, submodules, *args, post_layer_norm: bool = True, **kwargs):
            super().__init__(config, submodules, *args, post_layer_norm=False, **kwargs)
            self.post_layer_norm = post_layer_norm
            if self.post_process and post_layer_norm:
                self.final_norm = SequenceParallelNorm(
                    config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon
                )

    LocalHybridStack.__module__ = __name__
    LocalHybridStack.__qualname__ = "LocalHybridStack"
    return LocalHybridStack


def _mixer_params(p: MambaModelProvider) -> dict:
    return {"d_conv": p.mamba_d_conv, "chunk_size": p.mamba_chunk_size}


def _local_stack_spec(p: MambaModelProvider, config):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
    from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer import transformer_layer
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

    from bridge.models.norms import SequenceParallelNorm

    _, submodules_class = _stack_classes()
    dense = get_gpt_layer_local_spec(normalization=config.normalization).submodules
    attention = dense.self_attention
    core = local_core_attention(config)
    if core is not None:
        attention = dataclasses.replace(
            attention, submodules=dataclasses.replace(attention.submodules, core_attention=core)
        )
    layers = dict(
        mamba_layer=ModuleSpec(
            module=MambaLayer,
            submodules=MambaLayerSubmodules(
                norm=SequenceParallelNorm,
                mixer=ModuleSpec(
                    module=MambaMixer,
                    params=_mixer_params(p),
                    submodules=MambaMixerSubmodules(in_proj=ColumnParallelLinear, out_proj=RowParallelLinear),
                ),
                mamba_bda=dense.self_attn_bda,
            ),
        ),
        attention_layer=ModuleSpec(
            module=TransformerLayer,
            submodules=TransformerLayerSubmodules(
                input_layernorm=SequenceParallelNorm,
                self_attention=attention,
                self_attn_bda=dense.self_attn_bda,
            ),
        ),
        mlp_layer=ModuleSpec(
            module=MLPLayer,
            submodules=TransformerLayerSubmodules(
                pre_mlp_layernorm=SequenceParallelNorm, mlp=dense.mlp, mlp_bda=dense.mlp_bda
            ),
        ),
    )
    if p.num_moe_experts:
        moe = get_gpt_layer_local_spec(
            num_experts=p.num_moe_experts, moe_grouped_gemm=False, normalization=config.normalization
        ).submodules
        moe_layer = getattr(transformer_layer, "MoETransformerLayer", TransformerLayer)
        mlp = _swap_expert_fc1(moe.mlp, ColumnParallelLinear, expert_column_parallel_linear())
        # MoELayer builds its latent projections with TE only (bridge.models.latent_moe)
        if p.moe_latent_size:
            mlp = with_latent_moe_layer(mlp)
        layers["moe_layer"] = ModuleSpec(
            module=moe_layer,
            submodules=TransformerLayerSubmodules(
                pre_mlp_layernorm=SequenceParallelNorm, mlp=mlp, mlp_bda=moe.mlp_bda
            ),
        )
    return ModuleSpec(module=local_stack_class(), submodules=submodules_class(**layers))


def _swap_expert_fc1(spec, old, new):
    """The MoE spec with its experts' linear_fc1 `old` -> `new` (bridge.models.specs explains why)."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        if getattr(spec, "linear_fc1", None) is old:
            return dataclasses.replace(spec, linear_fc1=new)
        changes = {
            f.name: _swap_expert_fc1(getattr(spec, f.name), old, new)
            for f in dataclasses.fields(spec)
            if dataclasses.is_dataclass(getattr(spec, f.name))
            or isinstance(getattr(spec, f.name), functools.partial)
        }
        return dataclasses.replace(spec, **changes) if changes else spec
    if isinstance(spec, functools.partial) and "submodules" in spec.keywords:
        subs = _swap_expert_fc1(spec.keywords["submodules"], old, new)
        return functools.partial(spec.func, *spec.args, **{**spec.keywords, "submodules": subs})
    return spec


def _te_stack_spec(p: MambaModelProvider):
    """Megatron-Core's Transformer Engine hybrid spec with the provider's conv width and chunk size."""
    try:
        from megatron.core.models.hybrid.hybrid_layer_specs import hybrid_stack_spec as spec
    except ImportError:
        from megatron.core.models.mamba.mamba_layer_specs import mamba_stack_spec as spec
    mamba = spec.submodules.mamba_layer
    mixer = dataclasses.replace(mamba.submodules.mixer, params=_mixer_params(p))
    mamba = dataclasses.replace(mamba, submodules=dataclasses.replace(mamba.submodules, mixer=mixer))
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, mamba_layer=mamba))


def stack_spec(p: MambaModelProvider, config):
    return _te_stack_spec(p) if use_transformer_engine() else _local_stack_spec(p, config)


def build_stage(
    p: MambaModelProvider, config, pre_process: bool | None, post_process: bool | None, vp_stage: int | None
):
    """One MambaModel stage of this rank; pre/post default to this rank's pipeline position."""
    from megatron.core import parallel_state

    from bridge.models.output_hooks import apply_output_hooks

    ensure_ssm_kernels()
    if pre_process is None:
        pre_process = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    if post_process is None:
        post_process = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    kwargs = dict(
        config=config,
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
        scatter_embedding_sequence_parallel=p.scatter_embedding_sequence_parallel,
        seq_len_interpolation_factor=p.seq_len_interpolation_factor,
    )
    model_class, names = _model_class()
    kwargs[names[0]] = stack_spec(p, config)
    kwargs[names[1]] = p.hybrid_override_pattern
    if names[0] == "hybrid_stack_spec":
        kwargs["vp_stage"] = vp_stage
    model = model_class(**kwargs)
    apply_output_hooks(model, p)
    return model


def _model_class() -> tuple[type, tuple[str, str]]:
    """The release's model class and its (stack spec, pattern) argument names: 0.16's MambaModel; on 0.19
    MambaModel is a deprecated wrapper (it logs so on every build) of HybridModel, built directly."""
    try:
        from megatron.core.models.hybrid.hybrid_model import HybridModel

        return HybridModel, ("hybrid_stack_spec", "hybrid_layer_pattern")
    except ImportError:
        from megatron.core.models.mamba.mamba_model import MambaModel

        return MambaModel, ("mamba_stack_spec", "hybrid_override_pattern")
