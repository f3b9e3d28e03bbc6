"""A provider's parallel sizes as a ParallelLayout: the one place the provider's size fields meet the layout.

The sizes live as provider fields (what users and recipes set, by Megatron-Core's names) and as a
validated ParallelLayout (what the runtime builds process groups from). `bridge.parallel.sizes.SIZE_FIELDS` is the one
mapping between the two; `derive_layout` is the one derivation, called once per run (validation keeps its
result on the RunPlan; provide_distributed_model takes it, or derives it when it initializes the groups).
Pure Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.sizes import SIZE_FIELDS
from bridge.parallel.stages import StageSplit

if TYPE_CHECKING:
    from bridge.models.provider_fields import GPTFields


def parallel_sizes(p: GPTFields) -> dict[str, int | None]:
    """The provider's model-parallel sizes by layout name (tp, pp, vpp, cp, ep, etp), etp resolved."""
    sizes = {short: getattr(p, name) for name, short in SIZE_FIELDS.items()}
    sizes["etp"] = p.effective_expert_tensor_parallel_size()
    return sizes


def model_shape(p: GPTFields) -> ModelShape:
    """The model facts the layout rules and the planner need."""
    return ModelShape(
        num_layers=p.num_layers,
        num_attention_heads=p.num_attention_heads,
        num_query_groups=p.num_query_groups,
        ffn_hidden_size=p.effective_ffn_hidden_size(),
        num_moe_experts=p.num_moe_experts,
        seq_length=p.seq_length,
        hidden_size=p.hidden_size,
        vocab_size=p.vocab_size,
        make_vocab_size_divisible_by=p.make_vocab_size_divisible_by if p.should_pad_vocab else 1,
        kv_channels=p.kv_channels,
        gated_linear_unit=p.gated_linear_unit,
        share_embeddings_and_output_weights=p.share_embeddings_and_output_weights,
        add_qkv_bias=p.add_qkv_bias,
        qk_layernorm=p.qk_layernorm,
        moe_router_topk=p.moe_router_topk,
        moe_ffn_hidden_size=p.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=p.moe_shared_expert_intermediate_size,
        moe_shared_expert_gate=bool(p.moe_shared_expert_gate),
        moe_latent_size=p.moe_latent_size,
        moe_layer_freq=(tuple(p.moe_layer_freq) if isinstance(p.moe_layer_freq, list) else p.moe_layer_freq),
        layer_norms=4 if p.layernorm_placement == "sandwich" else 2,
        qk_layernorm_per_projection=p.qk_layernorm and p.qk_layernorm_scope == "projection",
        add_bias_linear=p.add_bias_linear,
        attention_sinks=p.softmax_type == "learnable",
        attention_output_gate=p.attention_output_gate,
        linear_attention=(
            (
                p.linear_attention_freq,
                p.linear_conv_kernel_dim,
                p.linear_num_key_heads,
                p.linear_num_value_heads,
                p.linear_key_head_dim,
                p.linear_value_head_dim,
            )
            if p.experimental_attention_variant == "gated_delta_net"
            else None
        ),
        mtp_layers=getattr(p, "mtp_num_layers", None) or 0,
        **_mla_shape(p),
        **_hybrid_shape(p),
        **_vision_shape(p),
    )


def _vision_shape(p: GPTFields) -> dict:
    """A vision-language provider's image side (VLMModelProvider.vision_sizes); nothing otherwise."""
    sizes = p.vision_sizes() if hasattr(p, "vision_sizes") else None
    if sizes is None:
        return {}
    frozen = (sizes.encoder if p.freeze_vision_model else 0) + (
        sizes.projector if p.freeze_vision_projection else 0
    )
    return {
        "vision_params": sizes.encoder + sizes.projector,
        "frozen_params": frozen,
        "image_tokens": sizes.image_tokens,
        "vision_activations": sizes.activations,
        "vision_cp_refused": p.context_parallel_refused(),
    }


def _hybrid_shape(p: GPTFields) -> dict:
    """A hybrid provider's (MambaModelProvider) pattern and Mamba-2 sizes; nothing for a GPT provider."""
    pattern = getattr(p, "hybrid_override_pattern", None)
    if pattern is None:
        return {}
    sizes = (p.mamba_state_dim, p.mamba_head_dim, p.mamba_num_groups, p.effective_mamba_num_heads())
    return {"hybrid_pattern": pattern, "mamba": (*sizes, p.mamba_d_conv, p.mamba_chunk_size)}


def stage_split(p: GPTFields) -> StageSplit:
    """The provider's pipeline split fields (Megatron-Core's names) as the layout's StageSplit."""
    return StageSplit(
        first_stage_layers=p.num_layers_in_first_pipeline_stage,
        last_stage_layers=p.num_layers_in_last_pipeline_stage,
        layout=p.pipeline_model_parallel_layout,
        embedding_in_split=p.account_for_embedding_in_pipeline_split,
        loss_in_split=p.account_for_loss_in_pipeline_split,
    )


def _mla_shape(p: GPTFields) -> dict:
    if not p.multi_latent_attention:
        return {}
    names = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
    return {"multi_latent_attention": True} | {name: getattr(p, name) for name in names}


def derive_layout(
    p: GPTFields,
    world_size: int,
    strategy: str = "megatron",
    dp_replicate_size: int | None = None,
    packed_sequence_size: int | None = None,
    gpus_per_node: int = 8,
) -> ParallelLayout:
    """The validated parallel layout of the provider's model on `world_size` ranks (raises ConfigError)."""
    return ParallelLayout(
        world_size=world_size,
        **parallel_sizes(p),
        sequence_parallel=p.sequence_parallel,
        strategy=strategy,
        dp_replicate_size=dp_replicate_size,
        packed_sequence_size=packed_sequence_size,
        gpus_per_node=gpus_per_node,
        model=model_shape(p),
        split=stage_split(p),
    )
