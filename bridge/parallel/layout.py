"""Parallel sizes -> one validated layout: derived sizes, mesh shapes, and every rule checked before launch.

Pure Python on purpose (no torch, no megatron.core): a layout for a 256-GPU cluster can be checked on a
laptop in milliseconds. The rules (stated with their reasons in docs/parallelism.md) are the layout
constraints of Megatron-Core and NeMo AutoModel and what Megatron-Core 0.16.1 asserts at build time;
each violation raises one ConfigError naming the field, the value, the rule and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.parallel.layout_rules import check_positive_int, fail
from bridge.parallel.stages import StageSplit, layer_ids, stage_layers
from bridge.parallel.strategy_rules import check_strategy

STRATEGIES = ("megatron", "fsdp2", "megatron_fsdp", "ddp")


@dataclass(frozen=True)
class ModelShape:
    """The model facts the layout rules and the planner need (plain numbers, no framework objects)."""

    num_layers: int
    num_attention_heads: int
    num_query_groups: int | None = None  # None = num_attention_heads (MHA)
    ffn_hidden_size: int | None = None
    num_moe_experts: int | None = None  # None or 0 = dense
    seq_length: int | None = None
    # the rest feeds the planner's parameter count and memory model
    hidden_size: int | None = None
    vocab_size: int | None = None
    # Megatron pads the vocab to a multiple of this * tp; 1 when the provider does not pad (should_pad_vocab
    # False: the vocab then divides by tp, so the model allocates exactly vocab_size rows).
    make_vocab_size_divisible_by: int = 128
    kv_channels: int | None = None  # None = hidden_size // num_attention_heads
    gated_linear_unit: bool = True
    share_embeddings_and_output_weights: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    moe_shared_expert_gate: bool = False  # a [1, hidden] sigmoid gate on the shared expert
    # Megatron-Core's moe_latent_size: the routed experts work on tokens projected from hidden_size to
    # it (fc1_latent_proj) and back (fc2_latent_proj), both whole on every tp rank; None: no projection
    moe_latent_size: int | None = None
    # Megatron-Core's moe_layer_freq: N = a MoE layer every N layers (layer % N == 0), or a per-layer
    # tuple of 1 (MoE) / 0 (dense MLP of ffn_hidden_size)
    moe_layer_freq: int | tuple[int, ...] = 1
    layer_norms: int = 2  # hidden-size norms per layer: 2 (pre or post), 4 (sandwich: pre and post)
    # q/k norms over the whole projections (heads * head_dim weights, TP-sharded by heads)
    # instead of one head_dim weight each
    qk_layernorm_per_projection: bool = False
    # Megatron-Core's add_bias_linear: a bias on every linear (qkv, output projection, MLP and expert
    # fc1 / fc2, the router); attention_sinks: softmax_type "learnable", one learned logit per head
    add_bias_linear: bool = False
    attention_sinks: bool = False
    # Multi-latent attention: q (down, norm, up, or one projection when q_lora_rank is None),
    # kv down to kv_lora_rank + qk_pos_emb_head_dim, kv norm, kv up to heads x (qk_head_dim + v_head_dim)
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    # Gated attention (a sigmoid output gate: q projection twice as wide) and Gated DeltaNet layers:
    # (linear_attention_freq, conv kernel, key heads, value heads, key head dim, value head dim), None: none
    attention_output_gate: bool = False
    linear_attention: tuple[int, int, int, int, int, int] | None = None
    # A hybrid (MambaModel): one of M (Mamba-2), * (attention), - (MLP), E (MoE) per layer, each one
    # pre-norm + that block; the Mamba-2 sizes (state dim, head dim, groups, heads, conv width, chunk)
    hybrid_pattern: str | None = None
    mamba: tuple[int, int, int, int, int, int] | None = None
    # Multi-token prediction layers (Megatron-Core's MTP block, on the last pipeline stage): each an
    # enorm, hnorm, eh_proj [2h -> h], a decoder layer of the last layer's kind and a final norm
    mtp_layers: int = 0
    # A vision-language model's image side (vision tower + projector) on the first stage, whole on every
    # tp rank; `frozen_params` of it get no gradient or optimizer state; image tokens per image (noted);
    # `vision_activations`: values one image keeps for the backward pass (one image per sample)
    vision_params: int = 0
    frozen_params: int = 0
    image_tokens: int = 0
    vision_activations: int = 0
    # why the vision-language family refuses context parallelism (its folder's CONTEXT_PARALLEL_REFUSED)
    vision_cp_refused: str | None = None

    def mtp_kind(self) -> tuple[bool, bool, str | None]:
        """The kind of the MTP block's decoder layer: the last layer's MLP, softmax attention."""
        return (self.moe_layers()[-1], False, None)

    def layer_kinds(self) -> list[tuple[bool, bool, str | None]]:
        """Per layer: (MoE, Gated DeltaNet, hybrid symbol or None for a GPT layer of attention + MLP)."""
        kinds = self.__dict__.get("_layer_kinds")  # the planner asks thousands of times per plan
        if kinds is None:
            if self.hybrid_pattern is not None:
                kinds = tuple((c == "E", False, c) for c in self.hybrid_pattern)
            else:
                kinds = tuple(
                    zip(
                        self.moe_layers(),
                        self.linear_attention_layers(),
                        [None] * self.num_layers,
                        strict=True,
                    )
                )
            object.__setattr__(self, "_layer_kinds", kinds)  # a frozen shape: computed once
        return list(kinds)

    def linear_attention_layers(self) -> list[bool]:
        """Per layer: Gated DeltaNet (True) or softmax attention (Megatron-Core's integer rule)."""
        if self.linear_attention is None:
            return [False] * self.num_layers
        freq = self.linear_attention[0]
        return [(i + 1) % freq != 0 for i in range(self.num_layers)]

    def __post_init__(self):
        for name in ("num_layers", "num_attention_heads"):
            check_positive_int(f"model.{name}", getattr(self, name))
        for name in (
            "num_query_groups",
            "ffn_hidden_size",
            "seq_length",
            "hidden_size",
            "vocab_size",
            "kv_channels",
            "moe_ffn_hidden_size",
            "moe_shared_expert_intermediate_size",
            "moe_latent_size",
        ):
            check_positive_int(f"model.{name}", getattr(self, name), allow_none=True)
        if self.num_moe_experts is not None and (
            isinstance(self.num_moe_experts, bool)
            or not isinstance(self.num_moe_experts, int)
            or self.num_moe_experts < 0
        ):
            fail(
                "model.num_moe_experts",
                self.num_moe_experts,
                "must be None, 0 (dense) or a positive integer",
                "give the number of experts, or None for a dense model",
            )
        if self.is_moe:
            check_positive_int("model.moe_router_topk", self.moe_router_topk)
            if self.moe_router_topk > self.num_moe_experts:
                fail(
                    "model.moe_router_topk",
                    self.moe_router_topk,
                    f"cannot exceed num_moe_experts ({self.num_moe_experts})",
                    "route each token to at most num_moe_experts experts",
                )
        freq = self.moe_layer_freq
        if isinstance(freq, int) and not isinstance(freq, bool):
            check_positive_int("model.moe_layer_freq", freq)
        elif not isinstance(freq, (list, tuple)):
            fail(
                "model.moe_layer_freq",
                freq,
                "must be an integer N (a MoE layer every N layers) or a per-layer list of 1 (MoE) / 0 (dense)",
                "give e.g. 1, or one 0/1 per layer",
            )
        elif len(freq) != self.num_layers or any(v not in (0, 1) for v in freq):
            fail(
                "model.moe_layer_freq",
                list(freq),
                f"a per-layer pattern must hold num_layers={self.num_layers} values of 1 (MoE) or 0 (dense)",
                "give one 0/1 per layer, or an integer N (a MoE layer every N layers)",
            )
        for name in ("mtp_layers", "vision_params", "frozen_params", "image_tokens", "vision_activations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                fail(f"model.{name}", value, "must be a non-negative integer", "give 0 or a positive count")
        if self.hybrid_pattern is not None and (
            len(self.hybrid_pattern) != self.num_layers or self.mamba is None and "M" in self.hybrid_pattern
        ):
            fail(
                "model.hybrid_pattern",
                self.hybrid_pattern,
                f"needs one symbol per layer (num_layers={self.num_layers}) and, with M layers, the Mamba sizes",
                "give the provider's hybrid_override_pattern and model.mamba",
            )
        groups = self.query_groups
        if self.num_attention_heads % groups:
            fail(
                "model.num_query_groups",
                groups,
                f"must divide num_attention_heads ({self.num_attention_heads})",
                "use a number of key/value heads that divides the number of attention heads",
            )

    @property
    def is_moe(self) -> bool:
        return bool(self.num_moe_experts)

    def moe_layers(self) -> tuple[bool, ...]:
        """Per layer: whether it is a MoE layer (all False for a dense model)."""
        cached = self.__dict__.get("_moe_layers")
        if cached is not None:
            return cached
        freq = self.moe_layer_freq
        if self.hybrid_pattern is not None:
            layers = tuple(c == "E" for c in self.hybrid_pattern)
        elif not self.is_moe:
            layers = (False,) * self.num_layers
        elif isinstance(freq, int):
            layers = tuple(i % freq == 0 for i in range(self.num_layers))
        else:
            layers = tuple(bool(v) for v in freq)
        object.__setattr__(self, "_moe_layers", layers)  # a frozen shape: computed once
        return layers

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads


@dataclass(frozen=True)
class ParallelLayout:
    """Sizes of every parallel dimension for one run; validated on construction (see module docstring)."""

    world_size: int
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    strategy: str = "megatron"  # megatron | fsdp2 | megatron_fsdp | ddp
    dp_replicate_size: int | None = None  # fsdp2 only (HSDP)
    packed_sequence_size: int | None = None  # None or 0 = no packing
    gpus_per_node: int = 8
    model: ModelShape | None = None
    # Megatron-Core's uneven split (first/last stage counts, a layout string); the default is the even split
    split: StageSplit = StageSplit()

    def __post_init__(self):
        self._check_types()
        self._check_world()
        self._check_sequence_parallel()
        check_strategy(self)
        self._check_context_parallel()
        self._check_experts()
        if self.model is not None:
            self._check_model_shape(self.model)

    # ---- derived sizes -------------------------------------------------------------------------------

    @property
    def dp(self) -> int:
        """Dense data-parallel size: world / (tp * pp * cp)."""
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        """Expert data-parallel size: world / (pp * ep * etp)."""
        return self.world_size // (self.pp * self.ep * self.etp)

    @property
    def min_gpus(self) -> int:
        """Smallest world for these sizes (DP or EDP = 1). The dense tp*cp grid and the expert ep*etp grid
        share each pipeline stage's GPUs, so only pp multiplies: pp * max(tp*cp, ep*etp)."""
        return self.pp * max(self.tp * self.cp, self.ep * self.etp)

    @property
    def interleaved(self) -> bool:
        return self.vpp is not None and self.vpp > 1

    @property
    def dense_mesh_shape(self) -> tuple[int, int, int, int, int]:
        replicate = self.dp_replicate_size or 1
        return (self.pp, replicate, self.dp // replicate, self.cp, self.tp)

    @property
    def dense_mesh_names(self) -> tuple[str, ...]:
        return ("pp", "dp_replicate", "dp_shard", "cp", "tp")

    @property
    def moe_mesh_shape(self) -> tuple[int, int, int]:
        # ep_shard = the ranks of one pipeline stage that hold the same experts: world / (pp * ep), i.e.
        # edp * etp. With etp = 1 (the usual case) it is the expert data-parallel size.
        return (self.pp, self.world_size // (self.pp * self.ep), self.ep)

    @property
    def moe_mesh_names(self) -> tuple[str, ...]:
        return ("pp", "ep_shard", "ep")

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.tp > self.gpus_per_node:
            out.append(
                f"tp={self.tp} is larger than gpus_per_node={self.gpus_per_node}: tensor parallelism across "
                "nodes destroys throughput; keep TP inside one NVLink domain and scale with PP or DP."
            )
        # A stage split the user gave (a published layout string, first/last counts) is deliberate: its
        # bubble is in the dry run's pipeline line, and vpp advice assuming an even split does not apply.
        if self.pp > 2 and not self.interleaved and not self.split.given:
            out.append(
                f"pp={self.pp} without interleaving has large pipeline bubbles; set "
                "model.virtual_pipeline_model_parallel_size (vpp) so num_layers % (pp*vpp) == 0."
            )
        return out

    def sizes_line(self) -> str:
        """The process-group sizes: what a checkpoint records as its layout (bridge.training.resume compares
        it; the per-rank RNG state follows these ranks, not the split of DP into HSDP replicas)."""
        return (
            f"TP={self.tp} PP={self.pp} CP={self.cp} EP={self.ep} ETP={self.etp} "
            f"DP={self.dp} EDP={self.edp} world={self.world_size}"
        )

    def describe(self) -> str:
        """The sizes, then what else shapes the run: virtual stages, sequence parallelism, the strategy
        (when not megatron) and fsdp2's HSDP split."""
        line = self.sizes_line()
        if self.interleaved:
            line += f" VPP={self.vpp}"
        if self.sequence_parallel:
            line += " SP"
        if self.strategy != "megatron":
            line += f" strategy={self.strategy}"
        if self.dp_replicate_size and self.dp_replicate_size > 1:
            line += f" HSDP={self.dp_replicate_size}x{self.dp // self.dp_replicate_size}"
        return line

    # ---- rules -------------------------------------------------------------------------------------

    def _check_types(self) -> None:
        for name in ("world_size", "tp", "pp", "cp", "ep", "etp", "gpus_per_node"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("vpp", self.vpp, allow_none=True)
        check_positive_int("dp_replicate_size", self.dp_replicate_size, allow_none=True)
        if self.packed_sequence_size is not None and (
            isinstance(self.packed_sequence_size, bool)
            or not isinstance(self.packed_sequence_size, int)
            or self.packed_sequence_size < 0
        ):
            fail(
                "packed_sequence_size",
                self.packed_sequence_size,
                "must be None, 0 (off) or a positive integer",
                "give the packed length in tokens, or 0 to turn packing off",
            )
        if not isinstance(self.sequence_parallel, bool):
            fail("sequence_parallel", self.sequence_parallel, "must be true or false", "give a boolean")
        if self.strategy not in STRATEGIES:
            fail(
                "strategy",
                self.strategy,
                f"must be one of {', '.join(STRATEGIES)}",
                "pick one of those (megatron is the default)",
            )
        if not isinstance(self.split, StageSplit):
            fail(
                "split",
                type(self.split).__name__,
                "must be a StageSplit",
                "pass provider_layout.stage_split(p)",
            )
        if self.model is not None and not isinstance(self.model, ModelShape):
            fail(
                "model",
                type(self.model).__name__,
                "must be a ModelShape",
                "pass provider.model_shape() or build a ModelShape",
            )

    def _check_world(self) -> None:
        w = self.world_size
        if w < self.min_gpus:
            fail(
                "world_size",
                w,
                f"these sizes need at least min_gpus = pp*max(tp*cp, ep*etp) = {self.pp}*max({self.tp}*{self.cp}, "
                f"{self.ep}*{self.etp}) = {self.min_gpus} GPUs",
                f"launch on {self.min_gpus} GPUs (or a multiple), or lower tp/pp/cp/ep/etp",
            )
        dense = self.tp * self.pp * self.cp
        if w % dense:
            fail(
                "world_size",
                w,
                f"must be divisible by tp*pp*cp = {self.tp}*{self.pp}*{self.cp} = {dense} (dp = world/(tp*pp*cp))",
                f"use a multiple of {dense} GPUs, or change tp/pp/cp so their product divides {w}",
            )
        expert = self.pp * self.ep * self.etp
        if w % expert:
            fail(
                "world_size",
                w,
                f"must be divisible by pp*ep*etp = {self.pp}*{self.ep}*{self.etp} = {expert} "
                "(edp = world/(pp*ep*etp))",
                f"use a multiple of {expert} GPUs, or change pp/ep/etp so their product divides {w}",
            )
        if self.vpp is not None and self.pp == 1:
            fail(
                "vpp",
                self.vpp,
                "virtual pipeline stages need pipeline parallelism (pp > 1)",
                "set pp > 1, or leave vpp unset (None)",
            )

    def _check_sequence_parallel(self) -> None:
        if self.sequence_parallel and self.tp == 1:
            fail(
                "sequence_parallel",
                True,
                "sequence parallelism splits activations across tensor-parallel ranks, so it needs tp > 1 "
                "(it is never turned off silently)",
                "set model.sequence_parallel=False, or raise tp above 1",
            )

    def _check_context_parallel(self) -> None:
        if self.cp == 1:
            return
        seq = self.model.seq_length if self.model is not None else None
        if seq is not None and seq % (2 * self.cp):
            # Each CP rank takes two chunks of the sequence (load balancing of causal attention).
            fail(
                "model.seq_length",
                seq,
                f"with cp={self.cp} it must be divisible by 2*cp = {2 * self.cp}",
                f"use a seq_length that is a multiple of {2 * self.cp}, or a smaller cp",
            )
        packed = self.packed_sequence_size
        if packed and self.cp > 1 and packed % (2 * self.cp):  # the packing pads each sample to 2*cp
            fail(
                "packed_sequence_size",
                packed,
                f"with cp={self.cp} each packed sample splits into 2*cp = {2 * self.cp} chunks, so it must be "
                f"divisible by 2*cp, not only divisible by cp",
                f"use a packed length that is a multiple of {2 * self.cp} "
                f"(e.g. {max(2 * self.cp, packed // (2 * self.cp) * 2 * self.cp)})",
            )

    def _check_experts(self) -> None:
        m = self.model
        if m is None:
            return
        if not m.is_moe:
            for name in ("ep", "etp"):
                value = getattr(self, name)
                if value > 1:
                    fail(
                        name,
                        value,
                        "expert parallelism is only for MoE models (model.num_moe_experts is unset)",
                        f"set {name}=1 for this dense model",
                    )
            return
        if m.num_moe_experts % self.ep:
            fail(
                "ep",
                self.ep,
                f"must divide model.num_moe_experts ({m.num_moe_experts})",
                "choose ep so every rank holds the same number of experts",
            )
        if self.tp > 1 and not self.sequence_parallel:
            fail(
                "sequence_parallel",
                False,
                f"Megatron-Core requires sequence parallelism for MoE models with tp > 1 (tp={self.tp})",
                "set model.sequence_parallel=True, or tp=1",
            )
        expert_ffn = m.moe_ffn_hidden_size or m.ffn_hidden_size
        if expert_ffn is not None and expert_ffn % self.etp:
            fail(
                "etp",
                self.etp,
                f"must divide the expert FFN size ({expert_ffn})",
                "choose etp dividing model.moe_ffn_hidden_size",
            )

    def _check_model_shape(self, m: ModelShape) -> None:
        tp = self.tp
        if m.num_attention_heads % tp:
            fail(
                "tp",
                tp,
                f"must divide model.num_attention_heads ({m.num_attention_heads})",
                "choose tp so each rank holds whole attention heads",
            )
        # Megatron-Core 0.16.1 would also accept tp a multiple of the query groups (replicated KV heads),
        # but our checkpoint mappings shard KV heads, so each rank must hold whole groups.
        if m.query_groups % tp:
            fail(
                "tp",
                tp,
                f"must divide model.num_query_groups ({m.query_groups} key/value heads)",
                "choose tp dividing the number of key/value heads",
            )
        for name in ("ffn_hidden_size", "moe_shared_expert_intermediate_size"):
            size = getattr(m, name)
            if size is not None and size % tp:
                fail("tp", tp, f"must divide model.{name} ({size})", f"choose tp dividing {size}")
        self._check_model_kind(m)
        self.chunk_layers()  # raises the split's ConfigError

    def _check_model_kind(self, m: ModelShape) -> None:
        """What the hybrid and vision-language providers refuse (bridge.models.hybrid_provider,
        vlm_provider), so that the planner never proposes it."""
        if m.mamba is not None and "M" in (m.hybrid_pattern or ""):
            for name, value in (("mamba_num_heads", m.mamba[3]), ("mamba_num_groups", m.mamba[2])):
                if value % self.tp:
                    fail("tp", self.tp, f"must divide model.{name} ({value})", f"choose tp dividing {value}")
            if self.cp > 1:
                fail("cp", self.cp, "Mamba layers are not run under context parallelism", "use cp=1")
        if m.hybrid_pattern is not None and self.vpp:
            fail("vpp", self.vpp, "a hybrid model builds no virtual pipeline stages", "use vpp=None")
        if m.vision_cp_refused is not None and self.cp > 1:
            fail("cp", self.cp, f"context parallelism is refused for this vision-language model: {m.vision_cp_refused}",
                 "use cp=1")  # fmt: skip

    # ---- pipeline stages ------------------------------------------------------------------------------

    def chunk_layers(self) -> tuple[tuple[int, ...], ...]:
        """Decoder layers per [pipeline rank][virtual stage] (bridge.parallel.stages); needs the model."""
        if self.model is None:
            raise ValueError("chunk_layers() needs the layout's model shape")
        return stage_layers(self.model.num_layers, self.pp, self.vpp, self.split)

    def stage_layer_ids(self, stage: int) -> tuple[int, ...]:
        """The global decoder layer numbers pipeline rank `stage` holds (all its virtual stages)."""
        return layer_ids(self.chunk_layers(), stage)
