"""The step-time model: how long one training step of a layout takes on a GPU system, by part. Pure Python.

One pipeline stage's rank is modelled (the heaviest stage: uneven splits are sized by it). Per micro
batch it runs forward, backward (and with full recomputation the forward again):

- compute: the matrix products at GEMM_EFFICIENCY of the precision's peak, slower when their smallest
  dimension is small (GEMM_SMALL_DIM); causal flash attention at ATTENTION_EFFICIENCY of the bf16 peak;
  element-wise work as HBM passes over the layer's activations; a fixed cost per layer (and per MoE layer)
  and pass.
- tensor / sequence parallelism: two all-gathers and two reduce-scatters of the layer input per layer and
  pass, TP_EXPOSED of them not hidden; on NVLink when the tp group fits a node.
- context parallelism: the ring exchange of K and V (and their gradients), hidden behind attention
  compute where it is shorter.
- expert parallelism: token dispatch and combine all-to-all per MoE layer and pass, on NVLink for the
  part of the ep group inside a node and on the network for the rest, EP_EXPOSED of it not hidden.
- pipeline: the schedule's bubble (bridge.parallel.schedules.bubble_fraction, with vpp) and the
  activations sent between stages (PP_P2P_EXPOSED of them not hidden), v times with interleaving.
- data parallelism per strategy: megatron reduce-scatters fp32 gradients and all-gathers parameters once
  per step, hidden behind one micro batch's backward / forward; fsdp2 and megatron_fsdp all-gather each
  layer's parameters in forward and again in backward of every micro batch (prefetched: hidden behind
  compute), and reduce-scatter once per step; ddp all-reduces the gradients.
- the optimizer step: OPTIMIZER_BYTES_PER_PARAM per parameter of the rank's shard at HBM speed.
Every constant is in bridge.parallel.planner.systems.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from bridge.parallel import schedules
from bridge.parallel.layout import ModelShape, ParallelLayout
from bridge.parallel.memory import TrainingSetup, _act_bytes_per_token_layer
from bridge.parallel.param_count import _layer_parts, count_parameters, mamba_mixer, params_per_rank
from bridge.parallel.planner import systems as k
from bridge.parallel.planner.stages import StageSplit

TOKENS_PER_STEP_ASSUMED = 4 * 1024 * 1024  # the global batch the estimate assumes when none is given
ETHERNET_BANDWIDTH = 12.5e9  # bytes/s per GPU: 100 Gb/s Ethernet instead of the system's InfiniBand


@dataclass(frozen=True)
class StepEstimate:
    """Seconds per step by part, and what they mean per GPU."""

    step_time_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float  # model FLOPs (no recompute) per second per GPU, in TFLOP/s
    mfu: float  # tflops_per_gpu over the precision's peak
    global_batch_size: int
    breakdown: dict[
        str, float
    ]  # seconds per step: compute, recompute, tp, cp, ep, pp_bubble, pp_p2p, dp, optimizer
    system: str

    def as_dict(self) -> dict:
        return {
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1),
            "tflops_per_gpu": round(self.tflops_per_gpu, 1),
            "mfu": round(self.mfu, 4),
            "step_time_s": round(self.step_time_s, 4),
            "global_batch_size": self.global_batch_size,
            "system": self.system,
            "breakdown_s": {key: round(value, 4) for key, value in self.breakdown.items()},
        }


@functools.lru_cache(maxsize=256)
def model_flops_per_token(shape: ModelShape, seq_length: int) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward, no recompute): 6 per active matrix
    weight (the output layer, Mamba-2's and Gated DeltaNet's projections and depthwise convs included),
    plus per softmax-attention layer causal attention's 3 * seq * heads * (qk + v head dims), per Mamba-2
    layer the SSD scan's 3 * 7 * d_inner * state and per Gated DeltaNet layer the delta rule's
    3 * 2 * 4 * value_heads * value_head_dim^2 (Megatron-Core's num_floating_point_operations). An MTP
    layer is its decoder layer (softmax attention), its eh_proj and one more pass through the output layer."""
    count = count_parameters(shape)
    kinds = shape.layer_kinds()
    mamba_layers = sum(symbol == "M" for _, _, symbol in kinds)
    linear_layers = sum(linear for _, linear, _ in kinds)
    softmax_layers = sum(not linear and symbol in (None, "*") for _, linear, symbol in kinds)
    matmul = count.active - count.embedding - count.norms - count.vision  # per text token: no image side
    if shape.share_embeddings_and_output_weights:
        matmul += count.embedding  # the output product still runs with the tied weights
    scans = 0
    if mamba_layers:
        matmul -= mamba_layers * mamba_mixer(shape)[1]  # conv bias, per-head vectors, gated norm
        state, head_dim, _, heads, _, _ = shape.mamba
        scans += mamba_layers * 3 * 7 * heads * head_dim * state
    if linear_layers:
        _, _, _, nv, _, dv = shape.linear_attention
        matmul -= linear_layers * (2 * nv + dv)  # A_log, dt_bias, the output norm
        scans += linear_layers * 3 * 2 * 4 * nv * dv * dv
    if shape.mtp_layers:  # each MTP layer: its own logits through the shared output layer
        matmul += shape.mtp_layers * shape.vocab_size * shape.hidden_size
    qk, v = _head_dims(shape)
    attention = 3 * seq_length * shape.num_attention_heads * (qk + v) * (softmax_layers + shape.mtp_layers)
    return 6 * matmul + attention + scans


def _head_dims(shape: ModelShape) -> tuple[int, int]:
    if shape.multi_latent_attention:
        return shape.qk_head_dim + shape.qk_pos_emb_head_dim, shape.v_head_dim
    kv = shape.kv_channels or shape.hidden_size // shape.num_attention_heads
    return kv, kv


def _gemm_seconds(flops: float, smallest_dim: float, peak: float, efficiency: float) -> float:
    size = smallest_dim / (smallest_dim + k.GEMM_SMALL_DIM)
    return flops / (peak * efficiency * size)


class _Links:
    """Seconds for a collective's bytes per GPU on a group of `span` consecutive ranks."""

    def __init__(self, system: k.GpuSystem, gpus_per_node: int, link: str):
        self.raw_nvlink = system.nvlink_bandwidth
        self.raw_network = ETHERNET_BANDWIDTH if link == "ethernet" else system.network_bandwidth
        self.nvlink = self.raw_nvlink * k.NVLINK_EFFICIENCY
        self.network = self.raw_network * k.NETWORK_EFFICIENCY
        self.per_node = gpus_per_node

    def seconds(self, nbytes: float, span: int) -> float:
        return nbytes / (self.nvlink if span <= self.per_node else self.network)

    def all_to_all(self, nbytes: float, span: int) -> float:
        """The part of an all-to-all leaving the node crosses the network; the rest NVLink, in parallel."""
        inside = min(1.0, self.per_node / span)
        slowest = max(nbytes * inside / self.raw_nvlink, nbytes * (1 - inside) / self.raw_network)
        return slowest / k.ALL_TO_ALL_EFFICIENCY


@dataclass(frozen=True)
class _Pass:
    """One layer kind's forward on one rank for one micro batch: compute and its communications."""

    compute: float
    attention: float  # the attention-core part of compute (what hides the CP exchange)
    backward: float
    tp: float
    cp: float
    ep: float


def _layer_pass(
    shape: ModelShape, layout: ParallelLayout, setup: TrainingSetup, kind: tuple, sys_, links
) -> _Pass:
    """One layer of `kind` (ModelShape.layer_kinds: MoE, Gated DeltaNet, hybrid symbol)."""
    moe, linear, symbol = kind
    tp, cp, ep, etp = layout.tp, layout.cp, layout.ep, layout.etp
    h = shape.hidden_size
    width = 4 if setup.precision == "fp32" else 2
    peak = sys_.peak_flops[setup.precision]
    eff = k.GEMM_EFFICIENCY[setup.precision]
    tokens = setup.micro_batch_size * setup.seq_length / cp  # this rank's tokens in the dense path
    parts = _layer_parts(shape, moe, linear, symbol)
    softmax = not linear and symbol in (None, "*")
    qk, v = _head_dims(shape)
    gemm = scan_flops = 0.0
    if parts["attention"]:
        attention_w = parts["attention"] - (_attention_norms(shape) if softmax else 0)
        head_width = shape.num_attention_heads * max(qk, v) / tp
        gemm += _gemm_seconds(2 * tokens * attention_w / tp, min(tokens, h, head_width), peak, eff)
    if linear:  # the delta rule's 2 * 4 * value_heads * value_head_dim^2 per token
        _, _, _, nv, _, dv = shape.linear_attention
        scan_flops = 8 * tokens * nv * dv * dv / tp
    if parts["mamba"]:
        state, head_dim, _, heads, _, _ = shape.mamba
        matrices = mamba_mixer(shape)[0]
        gemm += _gemm_seconds(2 * tokens * matrices / tp, min(tokens, h, heads * head_dim / tp), peak, eff)
        scan_flops = 7 * tokens * heads * head_dim * state / tp  # the SSD scan (Megatron-Core's estimate)
    if moe:
        expert_ffn = shape.moe_ffn_hidden_size or shape.ffn_hidden_size
        routed = (
            tokens / tp * shape.moe_router_topk
        )  # sequence-parallel share, times the experts each token visits
        per_expert_tokens = routed * ep / shape.num_moe_experts
        routed_size = shape.moe_latent_size or h  # the routed experts' input and output size
        gemm += _gemm_seconds(
            2 * routed * parts["per_expert"] / etp,
            min(per_expert_tokens, routed_size, expert_ffn / etp),
            peak,
            eff,
        )
        if parts["latent"]:  # the two latent projections, whole on every tp rank, on its share of tokens
            gemm += _gemm_seconds(2 * tokens / tp * parts["latent"], min(tokens / tp, routed_size), peak, eff)
        if parts["shared"]:
            shared_ffn = shape.moe_shared_expert_intermediate_size
            gemm += _gemm_seconds(
                2 * tokens * parts["shared"] / tp, min(tokens, h, shared_ffn / tp), peak, eff
            )
    elif parts["mlp"]:
        gemm += _gemm_seconds(
            2 * tokens * parts["mlp"] / tp, min(tokens, h, shape.ffn_hidden_size / tp), peak, eff
        )
    # causal attention of this rank's heads over its CP share of each sequence; the scans at the same rate
    attn_flops = 0.0
    if softmax:
        attn_flops = (
            setup.micro_batch_size * setup.seq_length**2 * shape.num_attention_heads / tp * (qk + v) / cp
        )
    attention = attn_flops / (sys_.peak_flops["bf16"] * k.ATTENTION_EFFICIENCY)
    scan = scan_flops / (sys_.peak_flops["bf16"] * k.ATTENTION_EFFICIENCY)
    act_bytes = tokens * _act_bytes_per_token_layer(shape, tp, layout.sequence_parallel, width, symbol)
    elementwise = act_bytes * k.ELEMENTWISE_PASSES / sys_.hbm_bandwidth
    fixed = k.LAYER_OVERHEAD_S + (k.MOE_LAYER_OVERHEAD_S if moe else 0.0)
    forward = gemm + attention + scan + elementwise / 3 + fixed
    backward = 2 * gemm + k.ATTENTION_BACKWARD_RATIO * attention + 2 * scan + 2 * elementwise / 3 + fixed
    # an all-gather + a reduce-scatter of the layer input per block (two blocks in a GPT layer, one in a
    # hybrid's), (tp-1)/tp of it per GPU
    tp_comm = 0.0
    if tp > 1:
        blocks = 2 if symbol is None else 1
        tp_comm = k.TP_EXPOSED * links.seconds(2 * blocks * tokens * h * width * (tp - 1) / tp, tp)
    cp_comm = 0.0
    if cp > 1 and softmax:
        kv_bytes = tokens * 2 * shape.query_groups * qk / tp * width
        if shape.multi_latent_attention:
            kv_bytes = tokens * 2 * shape.num_attention_heads * qk / tp * width
        cp_comm = max(0.0, links.seconds(kv_bytes * (cp - 1), tp * cp) - attention)
    ep_comm = 0.0
    if moe and ep > 1:
        dispatched = tokens / tp * shape.moe_router_topk * h * 2 * (ep - 1) / ep  # dispatched in bf16
        ep_comm = k.EP_EXPOSED * links.all_to_all(2 * dispatched, ep * etp)  # dispatch and combine
    return _Pass(forward, attention, backward, tp_comm, cp_comm, ep_comm)


def _attention_norms(shape: ModelShape) -> int:
    """Replicated norm weights inside the attention count (not matrix products)."""
    if not shape.qk_layernorm or shape.multi_latent_attention:
        return 0
    kv = shape.kv_channels or shape.hidden_size // shape.num_attention_heads
    return 2 * kv if not shape.qk_layernorm_per_projection else 0


def _stage_layers(shape: ModelShape, heaviest: int) -> dict[tuple, int]:
    """Layers of each kind (ModelShape.layer_kinds) on the heaviest stage, in the model's proportion
    (largest remainders, so that they add up to `heaviest`)."""
    kinds = shape.layer_kinds()
    counts = {kind: kinds.count(kind) * heaviest / len(kinds) for kind in dict.fromkeys(kinds)}
    whole = {kind: int(c) for kind, c in counts.items()}
    for kind in sorted(counts, key=lambda kd: whole[kd] - counts[kd])[: heaviest - sum(whole.values())]:
        whole[kind] += 1
    return whole


def estimate_step(
    shape: ModelShape,
    layout: ParallelLayout,
    setup: TrainingSetup,
    split: StageSplit,
    system: k.GpuSystem,
    link: str,
) -> StepEstimate:
    """The step time of `layout` (checked with the sizing shape; `shape` is the real model)."""
    links = _Links(system, layout.gpus_per_node, link)
    width = 4 if setup.precision == "fp32" else 2
    gbs = setup.global_batch_size
    unit = setup.micro_batch_size * layout.dp
    if gbs is None:
        gbs = max(unit, TOKENS_PER_STEP_ASSUMED // setup.seq_length // unit * unit)
    m = gbs // unit
    parts = {"compute": 0.0, "recompute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
    fwd_passes = 2 if setup.recompute == "full" else 1
    for kind, count in _stage_layers(shape, split.heaviest).items():
        if count == 0:
            continue
        p = _layer_pass(shape, layout, setup, kind, system, links)
        parts["compute"] += count * (p.compute + p.backward)
        parts["recompute"] += count * p.compute * (fwd_passes - 1)
        passes = fwd_passes + 1
        parts["tp"] += count * p.tp * passes
        parts["cp"] += count * p.cp * passes
        parts["ep"] += count * p.ep * passes
    tokens = setup.micro_batch_size * setup.seq_length / layout.cp
    if layout.pp == 1 or split.last == split.heaviest:  # the output layer, forward and backward
        vocab_gemm = 2 * tokens * shape.hidden_size * shape.vocab_size / layout.tp
        peak = system.peak_flops[setup.precision] * k.GEMM_EFFICIENCY[setup.precision]
        parts["compute"] += (1 + shape.mtp_layers) * 3 * vocab_gemm / peak
        if shape.mtp_layers:  # the MTP layers on the last stage: a decoder layer and eh_proj each
            p = _layer_pass(shape, layout, setup, shape.mtp_kind(), system, links)
            eh_proj = 3 * 2 * tokens * 2 * shape.hidden_size**2 / layout.tp / peak
            parts["compute"] += shape.mtp_layers * (p.compute + p.backward + eh_proj)
            parts["tp"] += shape.mtp_layers * p.tp * (fwd_passes + 1)
            parts["ep"] += shape.mtp_layers * p.ep * (fwd_passes + 1)
    per_microbatch = sum(parts.values())
    vpp = layout.vpp if layout.interleaved else None
    name = schedules.effective(setup.pp_schedule, vpp)
    bubble = schedules.bubble_fraction(name, layout.pp, m, vpp)
    pipeline = {key: value * m for key, value in parts.items()}
    pipeline["pp_bubble"] = per_microbatch * m * bubble / (1 - bubble) if bubble < 1 else 0.0
    p2p = 0.0
    if layout.pp > 1:
        sent = tokens * shape.hidden_size * width / (layout.tp if layout.sequence_parallel else 1)
        # neighbouring stages are world/pp ranks apart: on one node only when the whole world is
        p2p = k.PP_P2P_EXPOSED * 2 * (vpp or 1) * links.seconds(sent, layout.world_size)
    pipeline["pp_p2p"] = p2p * m
    dp, optimizer = _data_parallel(shape, layout, setup, split, system, links, m, per_microbatch)
    pipeline["dp"] = dp
    pipeline["optimizer"] = optimizer
    step = sum(pipeline.values())
    tokens_per_gpu = gbs * setup.seq_length / step / layout.world_size
    tflops = tokens_per_gpu * model_flops_per_token(shape, setup.seq_length) / 1e12
    mfu = tflops * 1e12 / system.peak_flops[setup.precision]
    return StepEstimate(step, tokens_per_gpu, tflops, mfu, gbs, pipeline, system.name)


def _data_parallel(shape, layout, setup, split, system, links, m, per_microbatch) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) seconds per step for the layout's strategy."""
    heaviest = max(
        (params_per_rank(layout.model or shape, layout, s) for s in {0, layout.pp - 1}), key=lambda r: r.total
    )
    dense_dp, expert_dp = layout.dp * layout.cp, layout.edp
    span = layout.world_size // layout.pp  # a stage's ranks: the data-parallel ring crosses nodes beyond one
    width = 4 if setup.precision == "fp32" else 2
    strategy = layout.strategy

    def moved(bytes_per_param: float) -> float:
        return bytes_per_param * (
            heaviest.dense * (dense_dp - 1) / dense_dp + heaviest.expert * (expert_dp - 1) / max(expert_dp, 1)
        )

    backward_share = per_microbatch * 2 / 3
    forward_share = per_microbatch / 3
    if strategy == "ddp":
        comm = links.seconds(moved(2 * 4), span)
        exposed = max(k.DP_MIN_EXPOSED * comm, comm - backward_share)
        shard = heaviest.total
    elif strategy == "megatron":
        reduce = links.seconds(moved(4), span)  # fp32 gradients (grad_reduce_in_fp32)
        gather = links.seconds(moved(width), span)
        exposed = max(k.DP_MIN_EXPOSED * reduce, reduce - backward_share)
        exposed += max(k.DP_MIN_EXPOSED * gather, gather - forward_share)
        shard = heaviest.dense / dense_dp + heaviest.expert / max(expert_dp, 1)
    else:  # fsdp2, megatron_fsdp: gathered in forward and in backward of every micro batch
        gather = links.seconds(moved(width), span)
        per_mb = max(k.DP_MIN_EXPOSED * gather, gather - forward_share) + max(
            k.DP_MIN_EXPOSED * gather, gather - backward_share
        )
        reduce = links.seconds(moved(4), span)
        exposed = m * per_mb + max(k.DP_MIN_EXPOSED * reduce, reduce - backward_share)
        shard = heaviest.dense / dense_dp + heaviest.expert / max(expert_dp, 1)
    optimizer = shard * k.OPTIMIZER_BYTES_PER_PARAM / system.hbm_bandwidth
    return exposed, optimizer
