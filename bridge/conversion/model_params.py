"""The parameters of this rank's Megatron model chunks, named globally and matched to the mapping table.

Megatron names are local: `decoder.layers.0` is the first layer *of this pipeline stage*, and
`local_experts.0` the first expert *of this expert-parallel rank*. Here every parameter gets its
canonical name (global layer and expert numbers, local-spec module names) and its mapping, with the
tensor-parallel rank and size that cut it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from bridge.conversion.mappings import Mapping, ModelDims, Piece
from bridge.conversion.registry import Family, Rule
from bridge.errors import ConfigError
from bridge.parallel.wrappers import unwrap
from bridge.peft.names import is_adapter_param

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
# An MTP layer's transformer layer: `transformer_layer` in megatron-core 0.16, `mtp_model_layer` in 0.19.
_MTP_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.(transformer_layer\.|mtp_model_layer\.)?")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_LOCAL_EXPERT = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.")
_TE_GROUPED_EXPERT = re.compile(r"\.mlp\.experts\.(linear_fc[12])\.(weight|bias)(\d+)$")
# Transformer Engine fuses the norms into the next linear; the tables use the local spec's names.
_TE_ALIASES = (
    (".self_attention.linear_qkv.layer_norm_weight", ".input_layernorm.weight"),
    (".mlp.linear_fc1.layer_norm_weight", ".pre_mlp_layernorm.weight"),
    # multi-latent attention: the q / kv latent norms fused into the up projections
    (".self_attention.linear_q_up_proj.layer_norm_weight", ".self_attention.q_layernorm.weight"),
    (".self_attention.linear_kv_up_proj.layer_norm_weight", ".self_attention.kv_layernorm.weight"),
    # a Mamba layer's pre-norm fused into its mixer's in_proj
    (".mixer.in_proj.layer_norm_weight", ".norm.weight"),
)
EMBEDDING = "embedding.word_embeddings.weight"
OUTPUT = "output_layer.weight"


@dataclass
class LocalParam:
    name: str  # canonical
    param: torch.nn.Parameter
    rule: Rule
    mapping: Mapping
    rank: int  # TP (or expert-TP) rank and size that cut this parameter
    size: int
    dims: ModelDims

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(self.param.shape)

    def hf_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.mapping.hf_shapes(self.local_shape, self.size, self.dims)

    def pieces(self, rank: int | None = None) -> list[Piece]:
        return self.mapping.pieces(
            self.local_shape, self.rank if rank is None else rank, self.size, self.dims
        )


@dataclass(frozen=True)
class Ranks:
    tp: int
    tp_size: int
    etp: int
    etp_size: int
    ep: int
    ep_size: int


def current_ranks() -> Ranks:
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return Ranks(0, 1, 0, 1, 0, 1)
    return Ranks(
        ps.get_tensor_model_parallel_rank(),
        ps.get_tensor_model_parallel_world_size(),
        ps.get_expert_tensor_parallel_rank(),
        ps.get_expert_tensor_parallel_world_size(),
        ps.get_expert_model_parallel_rank(),
        ps.get_expert_model_parallel_world_size(),
    )


def model_dims(model: torch.nn.Module, hf_vocab_size: int) -> ModelDims:
    cfg = model.config
    # MambaMixer's sizes: mamba_num_heads, else its inner size 2 * hidden over mamba_head_dim
    head_dim = getattr(cfg, "mamba_head_dim", 0) or 0
    heads = getattr(cfg, "mamba_num_heads", None) or (2 * cfg.hidden_size // head_dim if head_dim else 0)
    return ModelDims(
        mamba_d_inner=heads * head_dim,
        mamba_groups_state=(getattr(cfg, "mamba_num_groups", 0) or 0)
        * (getattr(cfg, "mamba_state_dim", 0) or 0),
        mamba_num_heads=heads,
        num_attention_heads=cfg.num_attention_heads,
        num_query_groups=cfg.num_query_groups or cfg.num_attention_heads,
        kv_channels=cfg.kv_channels,
        vocab_size=hf_vocab_size,
        padded_vocab_size=model.vocab_size,
        linear_heads=(
            (
                cfg.linear_num_key_heads,
                cfg.linear_num_value_heads,
                cfg.linear_key_head_dim,
                cfg.linear_value_head_dim,
            )
            if getattr(cfg, "experimental_attention_variant", None) == "gated_delta_net"
            else None
        ),
    )


def canonical_name(model: torch.nn.Module, name: str, ranks: Ranks) -> str:
    m = _LAYER.match(name)
    if m:
        layer = model.decoder.layers[int(m.group(1))].layer_number - 1  # global, 1-based in Megatron
        name = f"decoder.layers.{layer}.{name[m.end() :]}"
    m = _MTP_LAYER.match(name)
    if m:
        # MTP depth k is the checkpoint's layer num_layers + k (DeepSeek-V3's layout): its transformer layer
        # is named as a decoder layer of that number (the family's decoder rows map it), the rest mtp.layers.
        layer = model.config.num_layers + int(m.group(1))
        prefix = "decoder" if m.group(2) else "mtp"
        name = f"{prefix}.layers.{layer}.{name[m.end() :]}"
    for te, local in _TE_ALIASES:
        if name.endswith(te):
            name = name[: -len(te)] + local
    experts = model.config.num_moe_experts or 0
    local_count = experts // ranks.ep_size if experts else 0
    m = _LOCAL_EXPERT.search(name)
    if m:
        e = ranks.ep * local_count + int(m.group(1))
        name = f"{name[: m.start()]}.mlp.experts.local_experts.{e}.{name[m.end() :]}"
    m = _TE_GROUPED_EXPERT.search(name)
    if m:
        e = ranks.ep * local_count + int(m.group(3))
        name = f"{name[: m.start()]}.mlp.experts.local_experts.{e}.{m.group(1)}.{m.group(2)}"
    return name


_SPLIT_DIM = {
    "column": 0,
    "vocab": 0,
    "qkv": 0,
    "gated_mlp": 0,
    "qkv_packed": 0,
    "gated_mlp_packed": 0,
    "mamba_in_proj": 0,
    "mamba_conv1d": 0,
    "qkv_gated": 0,
    "gdn_in_proj": 0,
    "gdn_in_proj_grouped": 0,
    "gdn_conv": 0,
    "row": 1,
}


def _check_split(lp: LocalParam) -> None:
    # The table's kind must agree with how Megatron-Core actually split the parameter.
    if lp.size == 1:
        return
    split = getattr(lp.param, "tensor_model_parallel", False)
    dim = getattr(lp.param, "partition_dim", -1)
    want = _SPLIT_DIM.get(lp.mapping.kind)
    if split and want == 0 and dim == -1 and lp.param.dim() >= 1:
        # Megatron-Core 0.16.1's Mamba mixer marks its conv1d, dt_bias, A_log, D and gated-norm weight
        # split (tensor_model_parallel) without a partition_dim; it splits them along dim 0 (0.19 says so)
        return
    if (want is None and split) or (want is not None and (not split or dim != want)):
        raise ConfigError(
            f"{lp.name}: the mapping kind {lp.mapping.kind!r} does not match how Megatron-Core "
            f"splits it (tensor_model_parallel={split}, partition_dim={dim}); fix the family's mapping table"
        )


def mtp_hf_name(family: Family, name: str, num_layers: int) -> str:
    """`name` (a row's HF name) where the checkpoint keeps it: the MTP layers of a family whose checkpoints
    do not hold them as DeepSeek-V3's model.layers.<num_layers + k> are renamed by its MTP_HF_NAMES."""
    m = _HF_LAYER.match(name)
    if not family.mtp_hf_names or not m or int(m.group(1)) < num_layers:
        return name
    k, rest = int(m.group(1)) - num_layers, name[m.end() :]
    for suffix, target in family.mtp_hf_names:
        if not suffix:
            return target.format(k=k) + rest
        if rest == suffix:
            if k:
                raise ConfigError(
                    f"model.mtp_num_layers={k + 1}: a {family.name} checkpoint holds one multi-token-prediction "
                    f"layer ({target} has no depth index). Fix: set model.mtp_num_layers=1"
                )
            return target
    return name


def resolve(model: torch.nn.Module, family: Family, name: str) -> tuple[Rule, Mapping] | None:
    """The family's row for the canonical `name`, its HF names as the checkpoint spells them."""
    found = family.resolve(name)
    if found is None or not family.mtp_hf_names:
        return found
    rule, mapping = found
    hf = tuple(mtp_hf_name(family, n, model.config.num_layers) for n in mapping.hf)
    return rule, (mapping if hf == mapping.hf else dataclasses.replace(mapping, hf=hf))


def _parameters_and_mapped_buffers(model: torch.nn.Module, family: Family, ranks: Ranks):
    """The parameters, then the persistent buffers the family maps (e.g. a router's expert_bias,
    HF e_score_correction_bias); other buffers (RoPE frequencies, token counters) are not weights."""
    yield from model.named_parameters()
    persistent = set(model.state_dict(keep_vars=True))
    for raw, buffer in model.named_buffers():
        if raw in persistent and family.resolve(canonical_name(model, raw, ranks)) is not None:
            yield raw, buffer


def local_params(chunks: list[torch.nn.Module], family: Family, hf_vocab_size: int) -> Iterator[LocalParam]:
    """Every parameter of this rank's chunks with its mapping (raises ConfigError for unmapped ones)."""
    ranks = current_ranks()
    for chunk in chunks:
        model = unwrap(chunk)
        dims = model_dims(model, hf_vocab_size)
        tied = getattr(model, "share_embeddings_and_output_weights", False)
        for raw, param in _parameters_and_mapped_buffers(model, family, ranks):
            if is_adapter_param(raw):
                continue  # PEFT adapters are not HF base weights (bridge.peft exports them)
            name = canonical_name(model, raw, ranks)
            # A tied output layer (last stage when PP > 1) holds the input embedding.
            lookup = EMBEDDING if tied and name == OUTPUT else name
            found = resolve(model, family, lookup)
            if found is None:
                raise ConfigError(
                    f"Megatron parameter {raw!r} (canonical {name!r}) has no row in the {family.name} mapping "
                    "table; the model was built with modules the family does not describe (e.g. a different "
                    "layer spec or legacy grouped GEMM): build it from this bridge's provider"
                )
            rule, mapping = found
            expert = rule.is_expert
            rank, size = (ranks.etp, ranks.etp_size) if expert else (ranks.tp, ranks.tp_size)
            if mapping.kind in ("replicated", "replicated_unsqueezed"):
                rank, size = 0, 1
            if lookup != name:
                mapping = type(mapping)(name, mapping.hf)
            lp = LocalParam(name, param, rule, mapping, rank, size, dims)
            _check_split(lp)
            yield lp
