"""MambaModelProvider: a hybrid Mamba / attention / MLP / MoE model described as data, built as
Megatron-Core's MambaModel on demand (Megatron-Bridge's name for the kind).

The second provider kind. It is GPTModelProvider's data (every TransformerConfig field, the same
parallel sizes, the same layout derivation, distributed build, post-build hooks and plan) plus the
hybrid layer pattern and the SSM sizes; what differs is the model class it builds
(bridge.models.hybrid_build) and the checks of the pattern (below). Pure data: no torch, no
megatron.core until a model is built.

The pattern is Megatron-Core's `hybrid_override_pattern`: one character per decoder layer,
`M` a Mamba-2 layer, `*` a self-attention layer, `-` an MLP layer, `E` a MoE layer; each layer is
pre-norm + mixer + residual. The SSM sizes are TransformerConfig's (`mamba_state_dim`,
`mamba_head_dim`, `mamba_num_groups`, `mamba_num_heads`) and the mixer's (`mamba_d_conv`,
`mamba_chunk_size`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.models import hybrid_build
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.provider_fields import model_error
from bridge.models.provider_layout import stage_split
from bridge.parallel.stages import layer_ids, stage_layers

# Megatron-Core's layer symbols (megatron.core.ssm.mamba_hybrid_layer_allocation.Symbols).
MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
LAYER_SYMBOLS = {MAMBA: "Mamba-2", ATTENTION: "self-attention", MLP: "MLP", MOE: "MoE"}


@dataclass
class MambaModelProvider(GPTModelProvider):
    """A hybrid model by Megatron-Core's field names; builds MambaModel (see the module docstring)."""

    hybrid_override_pattern: str | None = None
    mamba_d_conv: int = 4  # the causal conv1d's width (MambaMixer's d_conv)
    mamba_chunk_size: int = 128  # the SSD scan's chunk length (MambaMixer's chunk_size)
    # MambaModel's defaults where GPTModel's differ: no position embedding (attention layers of the
    # published hybrids use none), and Megatron-Core's hybrid flag (its FLOPs / init rules).
    position_embedding_type: str = "none"
    is_hybrid_model: bool = True

    def finalize(self) -> None:
        super().finalize()
        check_hybrid(self)

    def provide_stage(
        self, config, pre_process: bool | None, post_process: bool | None, vp_stage: int | None
    ):
        return hybrid_build.build_stage(self, config, pre_process, post_process, vp_stage)

    # ---- views computed from the fields alone ------------------------------------------------------

    def effective_mamba_num_heads(self) -> int:
        """MambaMixer's rule: mamba_num_heads, else d_inner (2 * hidden_size) / mamba_head_dim."""
        if self.mamba_num_heads is not None:
            return self.mamba_num_heads
        return 2 * self.hidden_size // self.mamba_head_dim

    def layer_counts(self) -> dict[str, int]:
        pattern = self.hybrid_override_pattern or ""
        return {symbol: pattern.count(symbol) for symbol in LAYER_SYMBOLS}

    def stage_patterns(self) -> list[str]:
        """The pattern each pipeline stage builds (MambaStack's split: even, or the first / last stage
        sizes), in stage order."""
        pattern = self.hybrid_override_pattern or ""
        split = stage_split(self)
        layers = stage_layers(self.num_layers, self.pipeline_model_parallel_size, None, split)
        return [
            "".join(pattern[i] for i in layer_ids(layers, stage))
            for stage in range(self.pipeline_model_parallel_size)
        ]


def check_hybrid(p: MambaModelProvider) -> None:
    """The hybrid rules, before any process starts (raise ConfigError naming the field)."""
    pattern = p.hybrid_override_pattern
    if not pattern:
        raise model_error(
            "hybrid_override_pattern",
            pattern,
            "a hybrid model needs its layer pattern (one of M * - E per layer)",
            "set model.hybrid_override_pattern, e.g. 'M-M*-'",
        )
    bad = sorted(set(pattern) - set(LAYER_SYMBOLS))
    if bad:
        reason = (
            "pipeline-stage separators ('|') and multi-token-prediction patterns ('/') are not built by "
            "bridge's hybrid provider"
            if set(bad) & {"|", "/"}
            else "each character is one layer: M (Mamba-2), * (attention), - (MLP), E (MoE)"
        )
        raise model_error(
            "hybrid_override_pattern",
            pattern,
            f"holds {''.join(bad)!r}: {reason}",
            "write the pattern with M, *, - and E only; split stages with "
            "model.num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage",
        )
    if p.num_layers != len(pattern):
        raise model_error(
            "num_layers",
            p.num_layers,
            f"the hybrid pattern has {len(pattern)} layers (one per character)",
            f"set model.num_layers={len(pattern)}, or change model.hybrid_override_pattern",
        )
    if (MOE in pattern) != bool(p.num_moe_experts):
        raise model_error(
            "num_moe_experts",
            p.num_moe_experts,
            "MoE layers (E) in the pattern need experts, and experts need E layers"
            if MOE in pattern
            else "the pattern has no MoE layer (E) to hold the experts",
            "set model.num_moe_experts for the E layers, or drop E from the pattern",
        )
    _check_ssm_sizes(p)
    _check_parallel(p)


def _check_ssm_sizes(p: MambaModelProvider) -> None:
    for name in ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_d_conv", "mamba_chunk_size"):
        value = getattr(p, name)
        if not isinstance(value, int) or value <= 0:
            raise model_error(name, value, "must be a positive integer", f"set model.{name} > 0")
    if p.mamba_num_heads is None and (2 * p.hidden_size) % p.mamba_head_dim:
        raise model_error(
            "mamba_head_dim",
            p.mamba_head_dim,
            f"without mamba_num_heads the Mamba inner size 2 * hidden_size = {2 * p.hidden_size} must divide "
            "by it",
            "set model.mamba_num_heads",
        )
    heads = p.effective_mamba_num_heads()
    if heads <= 0 or heads % p.mamba_num_groups:
        raise model_error(
            "mamba_num_groups",
            p.mamba_num_groups,
            f"the {heads} Mamba heads must split evenly into the groups (MambaMixer)",
            "choose mamba_num_groups dividing mamba_num_heads",
        )


def _check_parallel(p: MambaModelProvider) -> None:
    tp = p.tensor_model_parallel_size
    if MAMBA in p.hybrid_override_pattern:
        heads = p.effective_mamba_num_heads()
        for name, value in (("mamba_num_heads", heads), ("mamba_num_groups", p.mamba_num_groups)):
            if value % tp:
                raise model_error(
                    "tensor_model_parallel_size",
                    tp,
                    f"each tensor-parallel rank holds whole Mamba heads and groups: {name}={value} does not "
                    "divide by it",
                    f"choose a tensor-parallel size dividing {name}",
                )
    if p.virtual_pipeline_model_parallel_size is not None:
        raise model_error(
            "virtual_pipeline_model_parallel_size",
            p.virtual_pipeline_model_parallel_size,
            "Megatron-Core's MambaStack builds no virtual pipeline stages (0.16.1 asserts it; 0.19 needs "
            "'|' stage marks in the pattern, which bridge does not build)",
            "set model.virtual_pipeline_model_parallel_size=None",
        )
    if p.context_parallel_size > 1 and MAMBA in p.hybrid_override_pattern:
        raise model_error(
            "context_parallel_size",
            p.context_parallel_size,
            "Mamba layers under context parallelism (Megatron-Core's MambaContextParallel) are not "
            "verified against a CP=1 run in this bridge",
            "set model.context_parallel_size=1",
        )
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(p, name):
            raise model_error(
                name,
                True,
                "MambaStack splits its pattern by layer counts only (it does not count the embedding or loss)",
                f"set model.{name}=False; place layers with model.num_layers_in_first/last_pipeline_stage",
            )
    if p.pipeline_model_parallel_layout is not None:
        raise model_error(
            "pipeline_model_parallel_layout",
            p.pipeline_model_parallel_layout,
            "MambaStack splits its pattern by num_layers_in_first/last_pipeline_stage, not by a layout string",
            "unset it and use model.num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage",
        )
