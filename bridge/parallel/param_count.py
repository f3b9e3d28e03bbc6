"""Parameter counts from a ModelShape: the whole model (total, active per token) and one rank's share.

Assumes the GPT family bridge builds: rotary positions (no position table), RMSNorm (one weight vector),
no linear biases except the optional QKV bias, or a bias on every linear (add_bias_linear) and a learned
sink logit per head (attention_sinks); attention is grouped-query or multi-latent (q and kv
through low-rank latents). With num_moe_experts set, the layers moe_layer_freq marks hold a router,
the routed experts and the optional (gated) shared expert, and with moe_latent_size the two latent
projections (routed experts then take and give moe_latent_size, not hidden_size); the others a dense MLP
of ffn_hidden_size.
A hybrid (ModelShape.hybrid_pattern) counts each layer as its one block and one pre-norm: a Mamba-2
mixer (mamba_mixer), attention, a dense MLP or a MoE. Pure Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.stages import layer_ids, stage_layers


@dataclass(frozen=True)
class ParamCount:
    """Parameters of each part of the model (whole model, unsharded)."""

    embedding: int
    output: int  # 0 when tied to the embedding
    attention: int  # all layers: QKV, output projection, QKV bias, q/k norms
    mlp: int  # all layers, dense MLP (0 for MoE models)
    router: int  # all layers
    experts: int  # all layers, all routed experts
    shared_experts: int  # all layers
    norms: int  # the two per-layer norms and the final norm
    active_experts: int  # all layers, the top-k experts one token uses
    mamba: int = 0  # all Mamba-2 mixers of a hybrid (in/out projections, conv, per-head vectors, norm)
    mtp_proj: int = 0  # the MTP layers' eh_proj [2h -> h] (their decoder layers are in the parts above)
    vision: int = 0  # a vision-language model's vision tower and projector
    latent_proj: int = 0  # all MoE layers' fc1 / fc2 latent projections (moe_latent_size)

    @property
    def total(self) -> int:
        return (
            self.mamba
            + self.latent_proj
            + self.mtp_proj
            + self.vision
            + self.embedding
            + self.output
            + self.attention
            + self.mlp
            + self.router
            + self.experts
            + self.shared_experts
            + self.norms
        )

    @property
    def active(self) -> int:
        """Parameters one token touches: everything except the routed experts it is not sent to."""
        return self.total - self.experts + self.active_experts

    @property
    def expert_params(self) -> int:
        """Parameters sharded by ep*etp (the routed experts); the rest is sharded by tp."""
        return self.experts


def _require(shape: ModelShape, *names: str) -> None:
    missing = [n for n in names if getattr(shape, n) is None]
    if missing:
        raise ConfigError(
            f"model.{missing[0]} = None: the parameter count needs {', '.join('model.' + n for n in missing)}. "
            "Fix: give the model's full config (a preset, a recipe or a config.json)."
        )


def _qk_norm_params(shape: ModelShape) -> int:
    """q/k norm weights of one layer: one head_dim vector each, or (per projection) one per q / k entry."""
    if not shape.qk_layernorm:
        return 0
    kv = shape.kv_channels or shape.hidden_size // shape.num_attention_heads
    if shape.qk_layernorm_per_projection:
        return (shape.num_attention_heads + shape.query_groups) * kv
    return 2 * kv


def _replicated_qk_norm_params(shape: ModelShape) -> int:
    """The q/k norm weights every TP rank holds whole (per-projection ones are split by heads)."""
    return 0 if shape.qk_layernorm_per_projection else _qk_norm_params(shape)


def _mla_attention(shape: ModelShape) -> tuple[int, int]:
    """Multi-latent attention of one layer: (weights split over tp, weights replicated over tp).

    Split over tp (by heads): the q up projection (or q_proj), the kv up projection, the output
    projection. Replicated: the q / kv down projections (Transformer Engine's spec duplicates them; the
    local spec splits their rows and all-gathers the result) and the q / kv layernorms."""
    _require(shape, "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
    h, heads = shape.hidden_size, shape.num_attention_heads
    q_head = shape.qk_head_dim + shape.qk_pos_emb_head_dim
    q_in = shape.q_lora_rank or h
    split = q_in * heads * q_head + shape.kv_lora_rank * heads * (shape.qk_head_dim + shape.v_head_dim)
    split += heads * shape.v_head_dim * h
    replicated = h * (shape.kv_lora_rank + shape.qk_pos_emb_head_dim) + shape.kv_lora_rank
    if shape.q_lora_rank:
        replicated += h * shape.q_lora_rank + shape.q_lora_rank
    return split, replicated


def _gated_delta_net(shape: ModelShape) -> tuple[int, int]:
    """A Gated DeltaNet layer's attention: (parameters split over tp, replicated over tp). in_proj to
    q, k, v, z, beta, alpha; a depthwise conv over q, k, v; A_log and dt_bias per value head; out_proj;
    the output RMSNorm over one value head (replicated)."""
    _, kernel, nk, nv, dk, dv = shape.linear_attention
    h = shape.hidden_size
    conv = 2 * nk * dk + nv * dv
    split = h * (conv + nv * dv + 2 * nv) + conv * kernel + 2 * nv + nv * dv * h
    return split, dv


def mamba_mixer(shape: ModelShape) -> tuple[int, int]:
    """One Mamba-2 mixer (Megatron-Core's MambaMixer, no linear biases): (matrix weights, the rest).
    in_proj to z, x, B, C, dt (2 d_inner + 2 groups state + heads), out_proj from d_inner; the depthwise
    conv over x, B, C (weights: d_conv per channel, counted as matrix work; its bias in the rest), and
    dt_bias, A_log, D per head and the gated RMSNorm over d_inner. All of it is split over tp by heads."""
    state, head_dim, groups, heads, d_conv, _ = shape.mamba
    h, d_inner = shape.hidden_size, heads * head_dim
    conv = d_inner + 2 * groups * state
    matrices = h * (conv + d_inner + heads) + d_inner * h + conv * d_conv
    return matrices, conv + 3 * heads + d_inner


def _layer_parts(
    shape: ModelShape, moe: bool | None = None, linear: bool = False, symbol: str | None = None
) -> dict[str, int]:
    """Parameters of one transformer layer, by part: a MoE layer or a dense one (default: the model's
    first layer kind, MoE for a model whose every layer is MoE); Gated DeltaNet attention when `linear`.
    A hybrid's layer (`symbol` M, *, - or E) is one pre-norm and its one block."""
    if moe is None:
        moe = shape.is_moe and any(shape.moe_layers())
    _require(shape, "hidden_size")
    h = shape.hidden_size
    kv = shape.kv_channels or h // shape.num_attention_heads
    q_size = shape.num_attention_heads * kv
    kv_size = shape.query_groups * kv
    attention = h * (q_size + 2 * kv_size) + q_size * h
    if shape.attention_output_gate:
        attention += h * q_size  # the gate's half of the q projection
    if shape.add_qkv_bias or shape.add_bias_linear:
        attention += q_size + 2 * kv_size
    attention += _bias(shape, h)  # the output projection's
    if shape.attention_sinks:
        attention += shape.num_attention_heads
    attention += _qk_norm_params(shape)
    if shape.multi_latent_attention:
        attention = sum(_mla_attention(shape))  # its q / kv latent norms included
    if linear:
        attention = sum(_gated_delta_net(shape))
    mats = 3 if shape.gated_linear_unit else 2  # gate+up+down, or fc1+fc2
    parts = {
        "attention": attention if symbol in (None, "*") else 0,
        "mamba": sum(mamba_mixer(shape)) if symbol == "M" else 0,
        "norms": shape.layer_norms * h if symbol is None else h,  # a hybrid layer: its one pre-norm
        "mlp": 0,
        "router": 0,
        "experts": 0,
        "shared": 0,
        "active_experts": 0,
        "per_expert": 0,
        "latent": 0,
    }
    if symbol in ("M", "*"):
        pass  # a hybrid's Mamba or attention layer: no MLP
    elif moe:
        expert_ffn = shape.moe_ffn_hidden_size or shape.ffn_hidden_size
        if expert_ffn is None:
            _require(shape, "moe_ffn_hidden_size")
        latent = shape.moe_latent_size
        width = latent or h  # what the routed experts take and give
        per_expert = mats * width * expert_ffn + _bias(
            shape, expert_ffn * (2 if shape.gated_linear_unit else 1) + width
        )
        parts["per_expert"] = per_expert
        if latent:  # hidden -> latent before the experts, latent -> hidden after
            parts["latent"] = 2 * h * latent + _bias(shape, latent + h)
        parts["router"] = (h + _bias(shape, 1)) * shape.num_moe_experts
        parts["experts"] = shape.num_moe_experts * per_expert
        parts["active_experts"] = shape.moe_router_topk * per_expert
        if shape.moe_shared_expert_intermediate_size:
            ffn = shape.moe_shared_expert_intermediate_size
            parts["shared"] = mats * h * ffn + _mlp_biases(shape, ffn)
            if shape.moe_shared_expert_gate:
                parts["shared"] += h  # the gate's [1, hidden] weight
    else:
        _require(shape, "ffn_hidden_size")
        parts["mlp"] = mats * h * shape.ffn_hidden_size + _mlp_biases(shape, shape.ffn_hidden_size)
    return parts


def _bias(shape: ModelShape, size: int) -> int:
    """A linear's bias of `size` outputs, when the model has linear biases."""
    return size if shape.add_bias_linear else 0


def _mlp_biases(shape: ModelShape, ffn: int) -> int:
    """fc1 (gate and up halves when gated) and fc2 biases of an MLP of `ffn`."""
    return _bias(shape, ffn * (2 if shape.gated_linear_unit else 1) + shape.hidden_size)


def _summed_parts(shape: ModelShape, layers: range | None = None) -> dict[str, int]:
    """_layer_parts summed over `layers` (default all), each layer of its kind (ModelShape.layer_kinds)."""
    kinds = shape.layer_kinds()
    layers = range(shape.num_layers) if layers is None else layers
    cache = {kind: _layer_parts(shape, *kind) for kind in set(kinds[i] for i in layers)}
    total: dict[str, int] = {}
    for i in layers:
        for k, v in cache[kinds[i]].items():
            total[k] = total.get(k, 0) + v
    return total


def count_parameters(shape: ModelShape) -> ParamCount:
    """Whole-model parameter count (vocab unpadded, as in the Hugging Face checkpoint)."""
    _require(shape, "hidden_size", "vocab_size")
    h, v = shape.hidden_size, shape.vocab_size
    p = _summed_parts(shape)
    if shape.mtp_layers:  # each MTP layer: one decoder layer, enorm + hnorm + final norm, eh_proj
        mtp = _layer_parts(shape, *shape.mtp_kind())
        p = {k: p.get(k, 0) + shape.mtp_layers * n for k, n in mtp.items()}
        p["norms"] += shape.mtp_layers * 3 * h
    return ParamCount(
        embedding=v * h,
        output=0 if shape.share_embeddings_and_output_weights else v * h,
        attention=p["attention"],
        mlp=p["mlp"],
        router=p["router"],
        experts=p["experts"],
        shared_experts=p["shared"],
        norms=p["norms"] + h,
        active_experts=p["active_experts"],
        mamba=p["mamba"],
        mtp_proj=shape.mtp_layers * 2 * h * h,
        vision=shape.vision_params,
        latent_proj=p.get("latent", 0),
    )


def adapter_parameters(shape: ModelShape, targets: Sequence[str], dim: int, magnitude: bool = False) -> int:
    """LoRA / DoRA adapter parameters of the whole model: each adapted linear of `in` -> `out` features gets
    A [dim, in] and B [out, dim] (plus an `out` magnitude vector with DoRA). The targets are Megatron-Core's
    fused linears, where a layer holds them: the attention's linear_qkv / linear_proj (multi-latent attention
    has no linear_qkv but its own projections, _mla_adapter_features), linear_fc1 / linear_fc2 of the dense
    MLPs and of every routed expert of a MoE layer (bridge.peft.apply: one adapter pair per expert), and
    in_proj / out_proj of Mamba-2 mixers and Gated DeltaNet layers. A hybrid's layer holds its one block's."""
    _require(shape, "hidden_size")
    h = shape.hidden_size
    kv = shape.kv_channels or h // shape.num_attention_heads
    q_size = shape.num_attention_heads * kv
    proj_in = shape.num_attention_heads * shape.v_head_dim if shape.multi_latent_attention else q_size
    ffn = shape.ffn_hidden_size or 0
    q_rows = q_size * (2 if shape.attention_output_gate else 1)  # the output gate's rows
    features = {  # target -> (in, out)
        "linear_qkv": (h, q_rows + 2 * shape.query_groups * kv),
        "linear_proj": (proj_in, h),
        "linear_fc1": (h, ffn * (2 if shape.gated_linear_unit else 1)),
        "linear_fc2": (ffn, h),
        **(_mla_adapter_features(shape) if shape.multi_latent_attention else {}),
    }
    expert_ffn = shape.moe_ffn_hidden_size or ffn
    experts = {  # target -> (in, out) of one routed expert's linear
        "linear_fc1": (h, expert_ffn * (2 if shape.gated_linear_unit else 1)),
        "linear_fc2": (expert_ffn, h),
    }
    if shape.linear_attention is not None:  # Gated DeltaNet: in_proj to q, k, v, z, beta, alpha
        _, _, nk, nv, dk, dv = shape.linear_attention
        features |= {"in_proj": (h, 2 * nk * dk + 2 * nv * dv + 2 * nv), "out_proj": (nv * dv, h)}
    if shape.mamba is not None:  # Mamba-2: in_proj to z, x, B, C, dt
        state, head_dim, groups, heads, _, _ = shape.mamba
        d_inner = heads * head_dim
        features |= {"in_proj": (h, 2 * d_inner + 2 * groups * state + heads), "out_proj": (d_inner, h)}
    held = {  # hybrid symbol -> the targets its layer holds
        "M": ("in_proj", "out_proj"),
        "*": ("linear_qkv", "linear_proj"),
        "-": ("linear_fc1", "linear_fc2"),
        "E": (),
    }
    total = 0
    for moe, linear, symbol in shape.layer_kinds():
        if moe or symbol == "E":  # every routed expert's fc1 / fc2
            for target in targets:
                if target in experts:
                    fan_in, fan_out = experts[target]
                    total += shape.num_moe_experts * (
                        dim * (fan_in + fan_out) + (fan_out if magnitude else 0)
                    )
        if symbol is not None:
            here = held[symbol]
        else:
            attention = ("in_proj", "out_proj") if linear else ("linear_proj",)
            if not linear:  # softmax attention: its input projections
                inputs = (
                    tuple(_mla_adapter_features(shape)) if shape.multi_latent_attention else ("linear_qkv",)
                )
                attention = (*inputs, *attention)
            here = attention + (() if moe else ("linear_fc1", "linear_fc2"))
        for target in targets:
            if target in here:
                fan_in, fan_out = features[target]
                total += dim * (fan_in + fan_out) + (fan_out if magnitude else 0)
    return total


def _mla_adapter_features(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) of multi-latent attention's adaptable projections (Megatron-Core's MLASelfAttention)."""
    h, heads = shape.hidden_size, shape.num_attention_heads
    q_out = heads * (shape.qk_head_dim + shape.qk_pos_emb_head_dim)
    return {
        "linear_q_proj": (h, q_out),
        "linear_q_down_proj": (h, shape.q_lora_rank or 0),
        "linear_q_up_proj": (shape.q_lora_rank or 0, q_out),
        "linear_kv_down_proj": (h, shape.kv_lora_rank + shape.qk_pos_emb_head_dim),
        "linear_kv_up_proj": (shape.kv_lora_rank, heads * (shape.qk_head_dim + shape.v_head_dim)),
    }


def padded_vocab_size(vocab_size: int, tp: int, make_vocab_size_divisible_by: int = 128) -> int:
    """Megatron pads the vocab to a multiple of make_vocab_size_divisible_by * tp."""
    multiple = make_vocab_size_divisible_by * tp
    return math.ceil(vocab_size / multiple) * multiple


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank holds, split by how the distributed optimizer shards them."""

    dense: int  # sharded over dp*cp by the distributed optimizer
    expert: int  # sharded over edp

    @property
    def total(self) -> int:
        return self.dense + self.expert


def stage_layer_ids(shape: ModelShape, layout: ParallelLayout, stage: int) -> tuple[int, ...]:
    """The decoder layers pipeline rank `stage` holds, as Megatron-Core splits them (even, or the layout's
    uneven split; every virtual stage of the rank). The layout need not carry the shape."""
    return layer_ids(stage_layers(shape.num_layers, layout.pp, layout.vpp, layout.split), stage)


def params_per_rank(
    shape: ModelShape, layout: ParallelLayout, stage: int = 0, make_vocab_size_divisible_by: int | None = None
) -> RankParams:
    """Parameters a rank of pipeline stage `stage` allocates, as Megatron-Core shards them.

    Linear weights and the vocab (padded as the shape says) are split by tp, routed experts by ep (whole experts) and etp,
    norms and the router are replicated. The first stage holds the embedding; the last holds the final
    norm and the output layer, which with tied weights and pp > 1 is a second copy of the embedding.
    """
    _require(shape, "hidden_size", "vocab_size")
    if not 0 <= stage < layout.pp:
        raise ValueError(f"stage {stage} outside 0..{layout.pp - 1}")
    multiple = make_vocab_size_divisible_by or shape.make_vocab_size_divisible_by  # None: the shape's rule
    ids = tuple(stage_layer_ids(shape, layout, stage))
    return _rank_params(shape, layout.tp, layout.pp, layout.ep, layout.etp, stage, multiple, ids)


@functools.lru_cache(maxsize=4096)
def _rank_params(
    shape: ModelShape, tp: int, pp: int, ep: int, etp: int, stage: int, multiple: int, ids: tuple[int, ...]
) -> RankParams:
    """params_per_rank's count for the decoder layers `ids` of the stage, cached: the planner asks it for
    the same sizes under many layouts."""
    h = shape.hidden_size
    dense = expert = 0
    kinds = shape.layer_kinds()
    softmax_norms = _replicated_qk_norm_params(shape)  # replicated across tp
    if shape.multi_latent_attention:
        softmax_norms = _mla_attention(shape)[1]
    by_kind = {}
    last = stage == pp - 1
    for moe, linear, symbol in {kinds[i] for i in ids} | ({shape.mtp_kind()} if last else set()):
        p = _layer_parts(shape, moe, linear, symbol)
        attention_norms = _gated_delta_net(shape)[1] if linear else softmax_norms
        if not p["attention"]:  # a hybrid's Mamba, MLP or MoE layer
            attention_norms = 0
        norm_like = p["norms"] + attention_norms
        gate = h if p["shared"] and shape.moe_shared_expert_gate else 0  # replicated across tp
        # the biases after a row-parallel linear are whole on every tp rank (the router's: in "router")
        proj_b = _bias(shape, h) if p["attention"] else 0
        mlp_b = _bias(shape, h) if p["mlp"] else 0
        shared_b = _bias(shape, h) if p["shared"] else 0
        layer_dense = (
            p["mamba"] // tp  # every Mamba-2 weight is split by heads
            + (p["attention"] - attention_norms - proj_b) // tp
            + proj_b
            + norm_like
            + (p["mlp"] - mlp_b) // tp
            + mlp_b
            + p["router"]
            + (p["shared"] - gate - shared_b) // tp
            + shared_b
            + gate
            + p["latent"]  # whole on every tp rank
        )
        layer_expert = 0
        if moe:
            fc2_bias = _bias(shape, shape.moe_latent_size or h)  # replicated over etp
            per_expert = (p["per_expert"] - fc2_bias) // etp + fc2_bias
            layer_expert = (shape.num_moe_experts // ep) * per_expert
        by_kind[(moe, linear, symbol)] = (layer_dense, layer_expert)
    for i in ids:
        layer_dense, layer_expert = by_kind[kinds[i]]
        dense += layer_dense
        expert += layer_expert
    vocab = padded_vocab_size(shape.vocab_size, tp, multiple)
    table = vocab * h // tp
    if last and shape.mtp_layers:  # on the last stage; it needs the embedding (a copy when pp > 1)
        layer_dense, layer_expert = by_kind[shape.mtp_kind()]
        dense += shape.mtp_layers * (layer_dense + 2 * h * h // tp + 3 * h)
        expert += shape.mtp_layers * layer_expert
        if stage != 0:
            dense += table
    if stage == 0:
        dense += table + shape.vision_params  # the image side: whole on every tp rank
    if stage == pp - 1:
        dense += h  # final norm
        if not shape.share_embeddings_and_output_weights or pp > 1:
            dense += table
    return RankParams(dense=dense, expert=expert)
