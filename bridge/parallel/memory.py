"""Per-GPU training memory: parameters, gradients, optimizer state and activations, in GB (1e9 bytes).

Two accountings (pure Python; numbers from the model shape, no framework):

`seed` (the 2+2+4 bytes-per-parameter accounting, docs/parallelism.md "Memory per GPU"): every tensor
in the training dtype (2 bytes for fp16/bf16, 1 for fp8, 4 for fp32); gradients the same size as the
parameters; Adam keeps 2 states (SGD with momentum 1) in that dtype; everything is split evenly by tp*pp (routed experts by ep*etp*pp),
data parallelism shards nothing. 70B in fp16 with Adam: 140 + 140 + 280 GB; with TP=4, PP=4:
8.75 + 8.75 + 17.5 GB. Activations: one micro batch through all layers, split by tp*pp*cp.

`megatron` (Megatron-Core mixed precision with the distributed optimizer): parameters in the compute
dtype (2 bytes for bf16/fp16/fp8, whose fp8 copies are transient; 4 for fp32), gradients in an fp32
buffer (4 bytes), and the optimizer's fp32 master weights (4, not for fp32 training) plus Adam's two fp32
moments (8; SGD momentum 4), sharded over dp*cp (dense) and edp (experts): 6 + 12/dp bytes per parameter
for bf16 + Adam. Parameters per rank are counted exactly (padded vocab, replicated norms, embedding on the
first stage, output layer on the last). Activations follow the pipeline schedule (1F1B unless
`pp_schedule` says otherwise; bridge.parallel.schedules.activations_in_flight): the first stage keeps
min(pp, M) micro batches of its layers in flight (times 1 + (pp-1)/(pp*vpp) when interleaved; all M for
gpipe and looped_bfs), the last stage one micro batch plus the fp32 logits. The estimate is the larger
of the two stages; with uneven stages (ParallelLayout.split) the heaviest of all stages, stage s holding
(pp - s) / pp of the first stage's micro batches (the 1F1B warm-up; all M for gpipe and looped_bfs).

Activation bytes per token and layer (flash attention, no dropout; 2-byte activations, 4 for fp32):
norm inputs and outputs 4h (split by tp only with sequence parallelism) + Q, K, V and the attention
output 2q + 2kv (split by tp) + the MLP 3f gated / 2f plain (split by tp); for MoE the routed tokens
top_k * (2h + 3f_expert) and the router's fp32 logits, split by tp. Full recomputation keeps only each
layer's input (h) plus one layer's activations for the recompute. Sequence length is split by cp.
A hybrid's layers (one norm each: 2h) are counted by kind: attention, MLP or MoE as above; a Mamba-2
layer keeps in_proj's output, the conv output, the scan and gated-norm outputs (split by tp) and, in
fp32, the SSD scan's chunk states (heads * head_dim * state per chunk) and dt per head. MTP layers
(on the last stage) add their decoder layer's activations, the normed embedding / hidden pair (4h) and
one more set of logits each.

The `megatron` accounting depends on the layout's data-parallel strategy (ParallelLayout.strategy); the
activations do not. Per rank, with P_d its dense and P_e its expert parameters (params_per_rank: TP/EP
slices of its stage), w the compute width (2 for bf16/fp16/fp8, 4 for fp32), m = 4 bytes per optimizer
moment times the moments (8 Adam, 4 SGD) and M = 4 bytes of fp32 master weights (0 for fp32 training):

- megatron (Megatron-Core DDP + distributed optimizer): params P*w, grads P*4 (fp32 grad buffer),
  optimizer (M + m) * (P_d / (dp*cp) + P_e / edp); without the distributed optimizer
  (TrainingSetup.distributed_optimizer False) (M + m) * P.
- fsdp2 (PyTorch fully_shard per TransformerLayer + root, bridge/training/strategies.py): the sharded
  parameters are fp32 (FSDP2 keeps fp32 shards; the MixedPrecisionPolicy casts to the compute dtype at the
  all-gather), gradients are reduced and kept in fp32, Adam's moments fp32, no separate master copy:
  (4 + 4 + m) * (P_d / (dp_shard*cp) + P_e / S_e), with dp_shard = dp / dp_replicate_size (HSDP
  replicates over dp_replicate) and S_e the MoE mesh's ep_shard = world / (pp*ep) when ep > 1 (the ranks
  holding the same experts; dp*cp/ep when tp = 1), dp_shard*cp when ep = 1 (the experts shard with
  their layer). Plus `gathered`, the unsharded compute-dtype copies alive at the peak:
  w * (R + 2 * L), where R is the root unit (this stage's embedding, final norm and output layer: the
  root reshards only after its whole forward / backward) and L one transformer layer's parameters; two
  layers because FSDP2 prefetches the next layer's all-gather while the current one computes. The
  unsharded gradients of a unit before its reduce-scatter are not counted.
- megatron_fsdp (Megatron-FSDP, optim_grads_params, i.e. ZeRO-3 through the distributed optimizer):
  params w, grads 4, optimizer M + m, all sharded over dp*cp (experts over edp), plus the same
  `gathered` w * (R + 2 * L) (assumed: per-TransformerLayer units with one prefetched).
- ddp (PyTorch DDP + Megatron-Core's non-distributed optimizer): nothing sharded over dp: params P*w,
  grads P*4, optimizer (M + m) * P.
For bf16 + Adam that is 6 + 12/(dp*cp) (megatron), 16/(dp_shard*cp) + gathered (fsdp2),
18/(dp*cp) + gathered (megatron_fsdp) and 18 (ddp) bytes per parameter.
With PEFT (`TrainingSetup.trainable_params`) only the adapters train: gradients and optimizer state are
scaled by trainable / total parameters (frozen weights get neither), the weights themselves are not.
A vision-language model's image side (ModelShape.vision_params) sits whole on every tp rank of the first
stage; its frozen part (the vision tower by default) has weights only. Its activations are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bridge.errors import ConfigError
from bridge.parallel import schedules
from bridge.parallel.layout import STRATEGIES, ModelShape, ParallelLayout
from bridge.parallel.param_count import count_parameters, padded_vocab_size, params_per_rank, stage_layer_ids

GB = 1e9
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
OPTIMIZERS = ("adam", "sgd", "muon")
MEMORY_MODELS = ("megatron", "seed")
RECOMPUTE = ("none", "full")
# moments kept per parameter. muon: Muon's one momentum buffer on the hidden matrices, Adam's two on the
# embeddings, output layer, norms and biases: counted as 2 for all, an upper bound.
OPTIMIZER_STATES = {"adam": 2, "sgd": 1, "muon": 2}
GATHERED_LAYERS = 2  # FSDP units unsharded at once: the computing layer and the prefetched next one


@dataclass(frozen=True)
class TrainingSetup:
    """What besides the layout decides memory: batch shape, precision, optimizer, recomputation."""

    seq_length: int
    micro_batch_size: int = 1
    global_batch_size: int | None = None
    precision: str = "bf16"
    optimizer: str = "adam"
    recompute: str = "none"
    # the pipeline schedule (bridge.parallel.schedules); None = Megatron-Core's 1f1b / interleaved by vpp
    pp_schedule: str | None = None
    # parameters that train (PEFT adapters: param_count.adapter_parameters); None = every parameter. Frozen
    # ones have no gradient buffer and no optimizer state in Megatron-Core's DDP, the distributed
    # optimizer and FSDP2 alike.
    trainable_params: int | None = None
    # strategy megatron: Megatron-Core's distributed optimizer shards the optimizer state over dp*cp (edp for
    # experts); False (optimizer.use_distributed_optimizer=false): every rank holds its slice's whole state
    distributed_optimizer: bool = True

    def __post_init__(self):
        for name in ("seq_length", "micro_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{name} = {value!r}: must be a positive integer. Fix: give an integer >= 1."
                )
        gbs = self.global_batch_size
        if gbs is not None and (
            isinstance(gbs, bool) or not isinstance(gbs, int) or gbs % self.micro_batch_size
        ):
            raise ConfigError(
                f"global_batch_size = {gbs!r}: must be a positive multiple of micro_batch_size "
                f"({self.micro_batch_size}). Fix: give a multiple of the micro batch size."
            )
        for name, allowed in (("precision", PRECISIONS), ("optimizer", OPTIMIZERS), ("recompute", RECOMPUTE)):
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} = {getattr(self, name)!r}: must be one of {', '.join(allowed)}. Fix: pick one of those."
                )

    def num_microbatches(self, dp: int) -> int | None:
        """Micro batches per step on one data-parallel rank; None when the global batch is not given."""
        if self.global_batch_size is None:
            return None
        return self.global_batch_size // (self.micro_batch_size * dp)


@dataclass(frozen=True)
class MemoryEstimate:
    params: float  # GB
    grads: float
    optimizer: float
    activations: float
    memory_model: str
    stage: int = 0  # the pipeline stage the estimate is for (the fullest one)
    gathered: float = 0.0  # fsdp2 / megatron_fsdp: unsharded parameter copies alive at the peak
    strategy: str = "megatron"  # the layout's data-parallel strategy the estimate is for

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.gathered

    def as_dict(self) -> dict[str, float]:
        keys = ("params", "grads", "optimizer", "activations", "gathered")
        out = {k: round(getattr(self, k), 3) for k in keys}
        out["total"] = round(self.total, 3)
        return out


def seed_state_memory(
    total_params: float,
    layout: ParallelLayout,
    precision: str = "fp16",
    optimizer: str = "adam",
    expert_params: float = 0,
) -> tuple[float, float, float]:
    """The 2+2+4 bytes accounting of (params, grads, optimizer) GB per GPU: see the module docstring."""
    width = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}[precision]
    dense = (total_params - expert_params) / (layout.tp * layout.pp)
    expert = expert_params / (layout.ep * layout.etp * layout.pp)
    per_gpu = dense + expert
    params = per_gpu * width / GB
    return params, params, OPTIMIZER_STATES[optimizer] * params


def _act_bytes_per_token_layer(
    shape: ModelShape, tp: int, sequence_parallel: bool, width: int, symbol: str | None = None
) -> float:
    """Activation bytes one token leaves in one layer (a hybrid's layer of kind `symbol`: _hybrid_bytes)."""
    if symbol is not None:
        return _hybrid_bytes(shape, tp, sequence_parallel, width, symbol)
    h = shape.hidden_size
    kv = shape.kv_channels or h // shape.num_attention_heads
    q, kvs = shape.num_attention_heads * kv, shape.query_groups * kv
    mats = 3 if shape.gated_linear_unit else 2
    norms = 4 * h / (tp if sequence_parallel else 1)
    split = 2 * q + 2 * kvs
    extra_fp32 = 0.0
    if shape.is_moe:
        expert_ffn = shape.moe_ffn_hidden_size or shape.ffn_hidden_size
        routed_size = (
            shape.moe_latent_size or h
        )  # the routed tokens' size (latent: projected before dispatch)
        split += shape.moe_router_topk * (2 * routed_size + mats * expert_ffn)
        if shape.moe_latent_size:  # the latent tokens before dispatch and after combine
            split += 2 * shape.moe_latent_size
        if shape.moe_shared_expert_intermediate_size:
            split += mats * shape.moe_shared_expert_intermediate_size
        extra_fp32 = 4 * shape.num_moe_experts / tp
    else:
        split += mats * shape.ffn_hidden_size
    return (norms + split / tp) * width + extra_fp32


def _hybrid_bytes(shape: ModelShape, tp: int, sequence_parallel: bool, width: int, symbol: str) -> float:
    """A hybrid layer: its one norm's input and output 2h, and its block's (split by tp). A Mamba-2 mixer
    keeps in_proj's output (z, x, B, C, dt), the conv output (x, B, C), the scan output and the gated norm
    output, plus in fp32 the SSD scan's chunk states (heads * head_dim * state per chunk of
    chunk_size tokens) and dt / its cumulative sum per head."""
    h = shape.hidden_size
    norms = 2 * h / (tp if sequence_parallel else 1)
    if symbol == "M":
        state, head_dim, groups, heads, _, chunk = shape.mamba
        d_inner, xbc = heads * head_dim, heads * head_dim + 2 * groups * state
        split = (d_inner + xbc + heads) + xbc + 2 * d_inner
        return (norms + split / tp) * width + 4 * (heads * head_dim * state / chunk + 2 * heads) / tp
    kv = shape.kv_channels or h // shape.num_attention_heads
    attention = 2 * shape.num_attention_heads * kv + 2 * shape.query_groups * kv
    if symbol == "*":
        return (norms + attention / tp) * width
    # an MLP or MoE layer: the GPT layer's bytes of that kind less its attention and second norm pair
    gpt = replace(
        shape,
        hybrid_pattern=None,
        mamba=None,
        num_moe_experts=shape.num_moe_experts if symbol == "E" else None,
    )
    return _act_bytes_per_token_layer(gpt, tp, sequence_parallel, width) - (norms + attention / tp) * width


def activation_memory(
    shape: ModelShape, layout: ParallelLayout, setup: TrainingSetup, stage: int, *, in_flight: float
) -> float:
    """Bytes of activations on one rank of `stage` holding `in_flight` micro batches of its layers."""
    width = 4 if setup.precision == "fp32" else 2
    tokens = setup.seq_length // layout.cp * setup.micro_batch_size
    ids = stage_layer_ids(shape, layout, stage)
    kinds = shape.layer_kinds()
    per_kind = {
        kinds[i][2]: tokens
        * _act_bytes_per_token_layer(shape, layout.tp, layout.sequence_parallel, width, kinds[i][2])
        for i in ids
    }
    layers = len(ids)
    # the image side (first stage, whole on every tp rank, not recomputed): one image per sample
    vision = shape.vision_activations * setup.micro_batch_size * width if stage == 0 else 0
    if setup.recompute == "full":
        kept = tokens * shape.hidden_size * width / (layout.tp if layout.sequence_parallel else 1)
        total = layers * in_flight * kept + max(per_kind.values())
    else:
        total = in_flight * sum(per_kind[kinds[i][2]] for i in ids)
    total += in_flight * vision
    if stage == layout.pp - 1:
        vocab = padded_vocab_size(shape.vocab_size, layout.tp, shape.make_vocab_size_divisible_by)
        # logits and their fp32 copy for the loss, once for the model and once per MTP layer
        total += (1 + shape.mtp_layers) * tokens * vocab / layout.tp * (width + 4)
        if shape.mtp_layers:  # each MTP layer: its decoder layer and its [2h] input (the normed pair)
            sp = layout.tp if layout.sequence_parallel else 1
            layer = _act_bytes_per_token_layer(shape, layout.tp, layout.sequence_parallel, width)
            total += shape.mtp_layers * in_flight * tokens * (layer + 4 * shape.hidden_size * width / sp)
    return total


def _in_flight_first_stage(layout: ParallelLayout, setup: TrainingSetup) -> float:
    """Micro batches of the first stage's layers held at the schedule's peak (bridge.parallel.schedules)."""
    if layout.pp == 1:
        return 1.0
    vpp = layout.vpp if layout.interleaved else None
    name = schedules.effective(setup.pp_schedule, vpp)
    return schedules.activations_in_flight(name, layout.pp, setup.num_microbatches(layout.dp), vpp)


def _in_flight(layout: ParallelLayout, setup: TrainingSetup, stage: int) -> float:
    """Micro batches of `stage`'s layers held at the peak. Even stages: the first stage's count, one
    elsewhere (only the first and last stages are estimated). Uneven stages, every stage estimated: all
    micro batches for the fill-drain schedules (gpipe, looped_bfs), else the 1F1B warm-up count, which
    falls by one per stage: first * (pp - stage) / pp, at least one."""
    first = _in_flight_first_stage(layout, setup)
    if stage == 0:
        return first
    if not layout.split.given:
        return 1.0
    vpp = layout.vpp if layout.interleaved else None
    if schedules.effective(setup.pp_schedule, vpp) in ("gpipe", "looped_bfs"):
        return first
    return max(1.0, first * (layout.pp - stage) / layout.pp)


def estimate_memory(
    shape: ModelShape, layout: ParallelLayout, setup: TrainingSetup, memory_model: str = "megatron"
) -> MemoryEstimate:
    """Per-GPU memory of training `shape` with `layout`; see the module docstring for both accountings."""
    if memory_model not in MEMORY_MODELS:
        raise ConfigError(
            f"memory_model = {memory_model!r}: must be one of {', '.join(MEMORY_MODELS)}. Fix: pick one of those."
        )
    if memory_model == "seed":
        count = count_parameters(shape)
        params, grads, opt = seed_state_memory(
            count.total, layout, setup.precision, setup.optimizer, expert_params=count.expert_params
        )
        flat = ParallelLayout(1, model=None)
        act = activation_memory(shape, flat, setup, 0, in_flight=1.0) / (layout.tp * layout.pp * layout.cp)
        return MemoryEstimate(params, grads, opt, act / GB, "seed", strategy=layout.strategy)

    # Even stages: the first (most activations in flight) or the last (the logits) is the fullest. Uneven
    # stages: every stage, the heaviest is what must fit.
    stages = range(layout.pp) if layout.split.given else sorted({0, layout.pp - 1})
    return max((stage_memory(shape, layout, setup, stage) for stage in stages), key=lambda est: est.total)


def _root_params(shape: ModelShape, layout: ParallelLayout, stage: int) -> int:
    """Parameters of this rank outside the transformer layers (the FSDP root unit), as params_per_rank
    counts them: the embedding on the first stage; the final norm and the output layer on the last
    (with tied weights and pp = 1 the output layer is the embedding)."""
    vocab = padded_vocab_size(shape.vocab_size, layout.tp, shape.make_vocab_size_divisible_by)
    table = vocab * shape.hidden_size // layout.tp
    root = table if stage == 0 else 0
    if stage == layout.pp - 1:
        root += shape.hidden_size
        if not shape.share_embeddings_and_output_weights or layout.pp > 1:
            root += table
    return root


def gathered_params(shape: ModelShape, layout: ParallelLayout, stage: int) -> int:
    """Parameters an FSDP rank holds unsharded at the peak: the root unit and GATHERED_LAYERS layers."""
    rank = params_per_rank(shape, layout, stage)
    root = _root_params(shape, layout, stage)
    per_layer = (rank.total - root) // len(stage_layer_ids(shape, layout, stage))
    return root + GATHERED_LAYERS * per_layer


def _shards(layout: ParallelLayout) -> tuple[int, int]:
    """(dense, expert) ranks that split one rank's parameter slice: see the module docstring."""
    s = layout.strategy
    if s == "ddp":
        return 1, 1
    if s == "fsdp2":
        dense = layout.dp // (layout.dp_replicate_size or 1) * layout.cp
        return dense, (layout.moe_mesh_shape[1] if layout.ep > 1 else dense)
    return layout.dp * layout.cp, layout.edp  # megatron (distributed optimizer), megatron_fsdp


def stage_memory(
    shape: ModelShape, layout: ParallelLayout, setup: TrainingSetup, stage: int
) -> MemoryEstimate:
    """The `megatron` accounting for one rank of pipeline stage `stage`, for the layout's strategy."""
    strategy = layout.strategy
    if strategy not in STRATEGIES:  # ParallelLayout validates it; a hand-built one may not
        raise ConfigError(
            f"distributed.strategy = {strategy!r}: must be one of {', '.join(STRATEGIES)}. Fix: pick one."
        )
    mixed = setup.precision != "fp32"
    width = 2 if mixed else 4
    moments = 4 * OPTIMIZER_STATES[setup.optimizer]
    master = 4 if mixed else 0
    rank = params_per_rank(shape, layout, stage)
    dense_shards, expert_shards = _shards(layout)
    sharded = rank.dense / dense_shards + rank.expert / expert_shards  # one rank's share of its slice
    # a frozen vision tower (first stage): weights only, no gradient buffer, no optimizer state
    frozen = shape.frozen_params if stage == 0 else 0
    gathered = 0.0
    if strategy == "fsdp2":
        # fp32 shards of params, grads and moments; no master copy (the shards are the fp32 weights)
        trains = sharded - frozen / dense_shards
        params, grads, opt = sharded * 4, trains * 4, trains * moments
        gathered = gathered_params(shape, layout, stage) * width
    elif strategy == "megatron_fsdp":
        trains = sharded - frozen / dense_shards
        params, grads, opt = sharded * width, trains * 4, trains * (master + moments)
        gathered = gathered_params(shape, layout, stage) * width
    else:  # megatron: only the optimizer state is sharded (distributed optimizer); ddp: _shards is (1, 1)
        held = sharded - frozen / dense_shards if setup.distributed_optimizer else rank.total - frozen
        params, grads, opt = rank.total * width, (rank.total - frozen) * 4, held * (master + moments)
    if setup.trainable_params is not None:
        trains = min(1.0, setup.trainable_params / count_parameters(shape).total)
        grads, opt = grads * trains, opt * trains
    in_flight = _in_flight(layout, setup, stage)
    act = activation_memory(shape, layout, setup, stage, in_flight=in_flight)
    return MemoryEstimate(
        params / GB, grads / GB, opt / GB, act / GB, "megatron", stage, gathered / GB, strategy
    )
