"""Mapping kinds: how one Megatron parameter is cut out of (and put back into) Hugging Face tensors.

Every kind answers one question, `pieces(rank, size)`: which block of which HF tensor fills which block
of the local (tensor-parallel rank `rank` of `size`) Megatron parameter. Import copies each piece from the
memory-mapped safetensors file straight into the parameter; export gathers the local parameters of all
ranks and copies each piece back. Using the same plan both ways makes the round trip exact by
construction. Pure Python: slices only, no torch.

`StackedView` (a family's STACKED_EXPERTS rows) names a per-expert tensor cut out of a checkpoint
tensor that stacks a layer's experts; bridge.conversion.stacked_experts serves and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import ConfigError

Shape = tuple[int, ...]
Index = tuple[slice | None, ...]  # None: a new unit dimension (ReplicatedUnsqueezed)


@dataclass(frozen=True)
class Piece:
    """Copy `hf[src]` into `local[dst]`. `hf_name=None` means: fill `local[dst]` with zeros (vocab padding)."""

    hf_name: str | None
    src: Index
    dst: Index


@dataclass(frozen=True)
class ModelDims:
    """The model facts the kinds need; taken from the Megatron model's TransformerConfig and the HF config."""

    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int  # the HF vocabulary (unpadded)
    padded_vocab_size: int  # rows of the Megatron embedding / output layer over all TP ranks
    # Mamba mixers (hybrid models; 0 elsewhere): the inner size (heads x head dim), the B / C size
    # (groups x state) and the heads, the blocks of its packed in_proj and conv1d
    mamba_d_inner: int = 0
    mamba_groups_state: int = 0
    mamba_num_heads: int = 0
    # Gated DeltaNet layers: (key heads, value heads, key head dim, value head dim); None without them
    linear_heads: tuple[int, int, int, int] | None = None


def _rows(start: int, stop: int, ndim: int) -> Index:
    return (slice(start, stop),) + (slice(None),) * (ndim - 1)


def _full(ndim: int) -> Index:
    return (slice(None),) * ndim


def _split(total: int, size: int, what: str) -> int:
    if total % size:
        raise ConfigError(
            f"{what}={total} is not divisible by the tensor-parallel size {size}; "
            f"choose a tensor-parallel size that divides {total}"
        )
    return total // size


@dataclass(frozen=True)
class Mapping:
    """One row of a family's mapping table, after resolution of {layer}/{expert} to numbers."""

    megatron: str
    hf: tuple[str, ...]

    kind = "abstract"

    def hf_shapes(self, local: Shape, size: int, dims: ModelDims) -> dict[str, Shape]:
        """The full HF shapes this parameter implies (used to reject mismatching checkpoints)."""
        raise NotImplementedError

    def pieces(self, local: Shape, rank: int, size: int, dims: ModelDims) -> list[Piece]:
        raise NotImplementedError


@dataclass(frozen=True)
class Replicated(Mapping):
    """Same tensor on every TP rank (norm weights, the MoE router)."""

    kind = "replicated"

    def hf_shapes(self, local, size, dims):
        return {self.hf[0]: tuple(local)}

    def pieces(self, local, rank, size, dims):
        return [Piece(self.hf[0], _full(len(local)), _full(len(local)))]


@dataclass(frozen=True)
class ReplicatedUnsqueezed(Replicated):
    """A replicated tensor the HF checkpoint holds with a leading dimension of 1 ([1, *shape], e.g. a
    router bias kept per expert group with one group)."""

    kind = "replicated_unsqueezed"

    def hf_shapes(self, local, size, dims):
        return {self.hf[0]: (1, *local)}

    def pieces(self, local, rank, size, dims):
        return [Piece(self.hf[0], _full(len(local) + 1), (None, *_full(len(local))))]


@dataclass(frozen=True)
class ColumnParallel(Mapping):
    """Split along dim 0 (output features)."""

    kind = "column"

    def hf_shapes(self, local, size, dims):
        return {self.hf[0]: (local[0] * size, *local[1:])}

    def pieces(self, local, rank, size, dims):
        n = local[0]
        return [Piece(self.hf[0], _rows(rank * n, (rank + 1) * n, len(local)), _full(len(local)))]


@dataclass(frozen=True)
class RowParallel(Mapping):
    """Split along dim 1 (input features)."""

    kind = "row"

    def hf_shapes(self, local, size, dims):
        return {self.hf[0]: (local[0], local[1] * size, *local[2:])}

    def pieces(self, local, rank, size, dims):
        n = local[1]
        src = (slice(None), slice(rank * n, (rank + 1) * n)) + (slice(None),) * (len(local) - 2)
        return [Piece(self.hf[0], src, _full(len(local)))]


@dataclass(frozen=True)
class VocabParallel(Mapping):
    """Embedding / output layer: rows split over TP after padding the vocabulary.

    Rows past the HF vocabulary are padding: zeros on import, never exported.
    """

    kind = "vocab"

    def hf_shapes(self, local, size, dims):
        if local[0] * size != dims.padded_vocab_size:
            raise ConfigError(
                f"{self.megatron}: {local[0]} rows x tensor-parallel {size} != padded vocab "
                f"{dims.padded_vocab_size}; the model was built for another vocabulary"
            )
        return {self.hf[0]: (dims.vocab_size, *local[1:])}

    def pieces(self, local, rank, size, dims):
        n = local[0]
        start, stop = rank * n, (rank + 1) * n
        real = max(0, min(stop, dims.vocab_size) - start)
        out = []
        if real:
            out.append(Piece(self.hf[0], _rows(start, start + real, len(local)), _rows(0, real, len(local))))
        if real < n:
            out.append(Piece(None, (), _rows(real, n, len(local))))
        return out


@dataclass(frozen=True)
class FusedQKV(Mapping):
    """q, k, v projections (weight or bias) fused in Megatron's grouped layout.

    Per query group: the group's q heads, then its k head, then its v head. TP ranks own whole groups.
    """

    kind = "qkv"

    def _layout(self, size: int, dims: ModelDims) -> tuple[int, int]:
        groups = _split(dims.num_query_groups, size, "num_query_groups")
        heads_per_group = dims.num_attention_heads // dims.num_query_groups
        return groups, heads_per_group

    def hf_shapes(self, local, size, dims):
        d = dims.kv_channels
        rest = tuple(local[1:])
        return {
            self.hf[0]: (dims.num_attention_heads * d, *rest),
            self.hf[1]: (dims.num_query_groups * d, *rest),
            self.hf[2]: (dims.num_query_groups * d, *rest),
        }

    def pieces(self, local, rank, size, dims):
        return self._grouped(local, rank, size, dims, self.hf, (0, 0, 0))

    def _grouped(self, local, rank, size, dims, names, offsets):
        # q, k, v rows of each of this rank's groups, from tensors `names` (starting at `offsets`)
        groups, hpg = self._layout(size, dims)
        d, nd = dims.kv_channels, len(local)
        nq, nk, nv = names
        oq, ok, ov = offsets
        block = (hpg + 2) * d
        if local[0] != groups * block:
            raise ConfigError(
                f"{self.megatron}: local rows {local[0]} != {groups} groups x {block}; "
                "num_attention_heads / num_query_groups / kv_channels do not match the model"
            )
        out = []
        for lg in range(groups):
            g = rank * groups + lg
            at = lg * block
            q = _rows(oq + g * hpg * d, oq + (g + 1) * hpg * d, nd)
            out.append(Piece(nq, q, _rows(at, at + hpg * d, nd)))
            at += hpg * d
            out.append(Piece(nk, _rows(ok + g * d, ok + (g + 1) * d, nd), _rows(at, at + d, nd)))
            at += d
            out.append(Piece(nv, _rows(ov + g * d, ov + (g + 1) * d, nd), _rows(at, at + d, nd)))
        return out


@dataclass(frozen=True)
class FusedGatedMLP(Mapping):
    """gate and up projections fused as linear_fc1: each TP rank holds [its gate rows; its up rows]."""

    kind = "gated_mlp"

    def hf_shapes(self, local, size, dims):
        if local[0] % 2:
            raise ConfigError(f"{self.megatron}: {local[0]} rows cannot hold gate and up halves")
        full = (local[0] // 2 * size, *local[1:])
        return {self.hf[0]: full, self.hf[1]: full}

    def pieces(self, local, rank, size, dims):
        n, nd = local[0] // 2, len(local)
        src = _rows(rank * n, (rank + 1) * n, nd)
        return [Piece(self.hf[0], src, _rows(0, n, nd)), Piece(self.hf[1], src, _rows(n, 2 * n, nd))]


@dataclass(frozen=True)
class PackedQKV(FusedQKV):
    """One HF tensor holding [all q heads; all k heads; all v heads] (a fused qkv_proj), cut into
    Megatron's grouped layout: per query group its q heads, its k head, its v head."""

    kind = "qkv_packed"

    def hf_shapes(self, local, size, dims):
        d = dims.kv_channels
        rows = (dims.num_attention_heads + 2 * dims.num_query_groups) * d
        return {self.hf[0]: (rows, *local[1:])}

    def pieces(self, local, rank, size, dims):
        q_rows = dims.num_attention_heads * dims.kv_channels
        kv_rows = dims.num_query_groups * dims.kv_channels
        offsets = (0, q_rows, q_rows + kv_rows)  # where q, k and v start in the packed tensor
        return self._grouped(local, rank, size, dims, (self.hf[0],) * 3, offsets)


@dataclass(frozen=True)
class PackedGatedMLP(FusedGatedMLP):
    """One HF tensor holding [gate rows; up rows] (a fused gate_up_proj): each TP rank holds
    [its gate rows; its up rows]."""

    kind = "gated_mlp_packed"

    def hf_shapes(self, local, size, dims):
        if local[0] % 2:
            raise ConfigError(f"{self.megatron}: {local[0]} rows cannot hold gate and up halves")
        return {self.hf[0]: (local[0] * size, *local[1:])}

    def pieces(self, local, rank, size, dims):
        n, nd = local[0] // 2, len(local)
        up = n * size  # the up rows start after all gate rows
        return [
            Piece(self.hf[0], _rows(rank * n, (rank + 1) * n, nd), _rows(0, n, nd)),
            Piece(self.hf[0], _rows(up + rank * n, up + (rank + 1) * n, nd), _rows(n, 2 * n, nd)),
        ]


@dataclass(frozen=True)
class ColumnBlocks(Mapping):
    """One HF tensor of consecutive blocks along dim 0, each split over TP on its own: TP rank r holds
    [block 0 rows of r; block 1 rows of r; ...]. The blocks come from the model dims (`_blocks`)."""

    kind = "abstract_blocks"

    def _blocks(self, dims: ModelDims) -> tuple[int, ...]:
        raise NotImplementedError

    def hf_shapes(self, local, size, dims):
        blocks = self._blocks(dims)
        if local[0] * size != sum(blocks):
            raise ConfigError(
                f"{self.megatron}: {local[0]} rows x tensor-parallel {size} != {sum(blocks)} (blocks {blocks}); "
                "the Mamba sizes do not match the model"
            )
        return {self.hf[0]: (sum(blocks), *local[1:])}

    def pieces(self, local, rank, size, dims):
        nd, out, src_at, dst_at = len(local), [], 0, 0
        for block in self._blocks(dims):
            n = _split(block, size, f"{self.megatron} block")
            out.append(
                Piece(
                    self.hf[0],
                    _rows(src_at + rank * n, src_at + (rank + 1) * n, nd),
                    _rows(dst_at, dst_at + n, nd),
                )
            )
            src_at, dst_at = src_at + block, dst_at + n
        return out


@dataclass(frozen=True)
class MambaInProj(ColumnBlocks):
    """A Mamba mixer's in_proj: [z; x; B; C; dt] (inner, inner, groups x state twice, heads)."""

    kind = "mamba_in_proj"

    def _blocks(self, dims):
        d, gs = dims.mamba_d_inner, dims.mamba_groups_state
        return (d, d, gs, gs, dims.mamba_num_heads)


@dataclass(frozen=True)
class MambaConv1d(ColumnBlocks):
    """A Mamba mixer's depthwise conv1d weight or bias: channels [x; B; C]."""

    kind = "mamba_conv1d"

    def _blocks(self, dims):
        gs = dims.mamba_groups_state
        return (dims.mamba_d_inner, gs, gs)


class GatedQKV(FusedQKV):
    """q (with its output gate), k, v in Megatron's gated grouped layout (attention_output_gate): per
    query group its q heads, their gate rows, its k head, its v head. The HF q projection holds per
    head [q rows; gate rows] (q_proj of 2 x heads x head_dim rows)."""

    kind = "qkv_gated"

    def hf_shapes(self, local, size, dims):
        d, rest = dims.kv_channels, tuple(local[1:])
        return {
            self.hf[0]: (2 * dims.num_attention_heads * d, *rest),
            self.hf[1]: (dims.num_query_groups * d, *rest),
            self.hf[2]: (dims.num_query_groups * d, *rest),
        }

    def pieces(self, local, rank, size, dims):
        groups, hpg = self._layout(size, dims)
        d, nd = dims.kv_channels, len(local)
        block = (2 * hpg + 2) * d
        if local[0] != groups * block:
            raise ConfigError(
                f"{self.megatron}: local rows {local[0]} != {groups} groups x {block}; the heads / "
                "head size / output gate do not match the model"
            )
        nq, nk, nv = self.hf
        out = []
        for lg in range(groups):
            g, at = rank * groups + lg, lg * block
            for j in range(hpg):  # q rows of each head, then (after the group's q) its gate rows
                h = g * hpg + j
                out.append(
                    Piece(nq, _rows(2 * h * d, 2 * h * d + d, nd), _rows(at + j * d, at + (j + 1) * d, nd))
                )
                gate_at = at + (hpg + j) * d
                out.append(
                    Piece(nq, _rows(2 * h * d + d, 2 * (h + 1) * d, nd), _rows(gate_at, gate_at + d, nd))
                )
            at += 2 * hpg * d
            out.append(Piece(nk, _rows(g * d, (g + 1) * d, nd), _rows(at, at + d, nd)))
            out.append(Piece(nv, _rows(g * d, (g + 1) * d, nd), _rows(at + d, at + 2 * d, nd)))
        return out


def _linear_heads(dims: ModelDims, size: int, what: str) -> tuple[int, int, int, int]:
    """This TP rank's (key heads, value heads) and the head dims of the Gated DeltaNet layers."""
    if dims.linear_heads is None:
        raise ConfigError(f"{what}: a Gated DeltaNet mapping row for a model without Gated DeltaNet layers")
    nk, nv, dk, dv = dims.linear_heads
    return _split(nk, size, "linear_num_key_heads"), _split(nv, size, "linear_num_value_heads"), dk, dv


@dataclass(frozen=True)
class GDNInProj(Mapping):
    """Gated DeltaNet's in_proj: per TP rank [q; k; v; z; beta; alpha] of its heads (Megatron-Core's
    layout), from HF's separate in_proj_qkv ([all q; all k; all v]), in_proj_z, in_proj_b, in_proj_a."""

    kind = "gdn_in_proj"

    def hf_shapes(self, local, size, dims):
        nk, nv, dk, dv = dims.linear_heads or (0, 0, 0, 0)
        rest = tuple(local[1:])
        return {
            self.hf[0]: ((2 * nk * dk + nv * dv), *rest),
            self.hf[1]: (nv * dv, *rest),
            self.hf[2]: (nv, *rest),
            self.hf[3]: (nv, *rest),
        }

    def pieces(self, local, rank, size, dims):
        lk, lv, dk, dv = _linear_heads(dims, size, self.megatron)
        nk = lk * size
        qkv, z, b, a = self.hf
        # (hf tensor, hf start of this rank's rows, rows)
        sections = (
            (qkv, rank * lk * dk, lk * dk),
            (qkv, nk * dk + rank * lk * dk, lk * dk),
            (qkv, 2 * nk * dk + rank * lv * dv, lv * dv),
            (z, rank * lv * dv, lv * dv),
            (b, rank * lv, lv),
            (a, rank * lv, lv),
        )
        return _sections(self.megatron, local, sections)


@dataclass(frozen=True)
class GDNInProjGrouped(Mapping):
    """Gated DeltaNet's in_proj from HF's in_proj_qkvz and in_proj_ba grouped by key head (Qwen3-Next):
    per key head g, qkvz holds [q_g; k_g; v_g; z_g] (the value and gate rows of its value heads) and ba
    holds [b_g; a_g]. Megatron-Core's layout: per TP rank [q; k; v; z; beta; alpha] of its heads."""

    kind = "gdn_in_proj_grouped"

    def hf_shapes(self, local, size, dims):
        nk, nv, dk, dv = dims.linear_heads or (0, 0, 0, 0)
        rest = tuple(local[1:])
        return {self.hf[0]: (2 * nk * dk + 2 * nv * dv, *rest), self.hf[1]: (2 * nv, *rest)}

    def pieces(self, local, rank, size, dims):
        lk, lv, dk, dv = _linear_heads(dims, size, self.megatron)
        r = lv // lk  # value heads per key head
        qkvz, ba = self.hf
        group, ba_group = 2 * dk + 2 * r * dv, 2 * r
        sections = []
        for offset, rows in ((0, dk), (dk, dk), (2 * dk, r * dv), (2 * dk + r * dv, r * dv)):
            sections += [(qkvz, g * group + offset, rows) for g in range(rank * lk, (rank + 1) * lk)]
        for offset in (0, r):
            sections += [(ba, g * ba_group + offset, r) for g in range(rank * lk, (rank + 1) * lk)]
        return _sections(self.megatron, local, sections)


@dataclass(frozen=True)
class GDNConv(Mapping):
    """Gated DeltaNet's depthwise conv1d weight [channels, 1, kernel]: per TP rank [q; k; v] channels of
    its heads (Megatron-Core's layout), from HF's [all q; all k; all v]."""

    kind = "gdn_conv"

    def hf_shapes(self, local, size, dims):
        nk, nv, dk, dv = dims.linear_heads or (0, 0, 0, 0)
        return {self.hf[0]: (2 * nk * dk + nv * dv, *local[1:])}

    def pieces(self, local, rank, size, dims):
        lk, lv, dk, dv = _linear_heads(dims, size, self.megatron)
        nk = lk * size
        w = self.hf[0]
        sections = (
            (w, rank * lk * dk, lk * dk),
            (w, nk * dk + rank * lk * dk, lk * dk),
            (w, 2 * nk * dk + rank * lv * dv, lv * dv),
        )
        return _sections(self.megatron, local, sections)


def _sections(megatron: str, local: Shape, sections) -> list[Piece]:
    """Pieces filling `local`'s rows in order from (hf name, hf first row, rows) sections."""
    nd, at, out = len(local), 0, []
    for name, start, rows in sections:
        out.append(Piece(name, _rows(start, start + rows, nd), _rows(at, at + rows, nd)))
        at += rows
    if at != local[0]:
        raise ConfigError(
            f"{megatron}: local rows {local[0]} != {at} (the Gated DeltaNet head counts and sizes do not "
            "match the model)"
        )
    return out


@dataclass(frozen=True)
class StackedView:
    """Per-expert tensor `virtual` ({layer}, {expert}) cut out of `stacked`({layer})[expert]'s last dim:
    its columns start::step (interleaved parts, GPT-OSS), or with `blocks` > 0 contiguous block `start` of
    `blocks` equal ones (halves, Qwen3-VL-MoE); transposed (last two dims) when `transpose`."""

    virtual: str
    stacked: str
    start: int = 0
    step: int = 1
    transpose: bool = False
    blocks: int = 0

    def columns(self, width: int) -> slice:
        """The slice of a `stacked[expert]` last dim of `width` that this view takes."""
        if not self.blocks:
            return slice(self.start, None, self.step)
        size = width // self.blocks
        return slice(self.start * size, (self.start + 1) * size)

    def cut(self, expert_tensor):
        """The per-expert tensor from `stacked[expert]` (a view)."""
        t = expert_tensor[..., self.columns(expert_tensor.shape[-1])]
        return t.transpose(-1, -2) if self.transpose else t

    def virtual_shape(self, expert_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the per-expert tensor cut out of a `stacked[expert]` of `expert_shape`."""
        shape = list(expert_shape)
        shape[-1] = len(range(shape[-1])[self.columns(shape[-1])])
        if self.transpose:
            shape[-1], shape[-2] = shape[-2], shape[-1]
        return tuple(shape)

    def expert_shape(self, virtual_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of `stacked[expert]` that a per-expert tensor of `virtual_shape` comes from."""
        shape = list(virtual_shape)
        if self.transpose:
            shape[-1], shape[-2] = shape[-2], shape[-1]
        shape[-1] *= self.blocks or self.step
        return tuple(shape)


KINDS: dict[str, type[Mapping]] = {
    k.kind: k
    for k in (
        Replicated,
        ReplicatedUnsqueezed,
        ColumnParallel,
        RowParallel,
        VocabParallel,
        FusedQKV,
        FusedGatedMLP,
        PackedQKV,
        PackedGatedMLP,
        MambaInProj,
        MambaConv1d,
        GatedQKV,
        GDNInProj,
        GDNInProjGrouped,
        GDNConv,
    )
}
# How many HF tensors each kind takes (the family tables are checked against it at load).
HF_ARITY = {
    "replicated": 1,
    "replicated_unsqueezed": 1,
    "column": 1,
    "row": 1,
    "vocab": 1,
    "qkv": 3,
    "gated_mlp": 2,
    "qkv_packed": 1,
    "gated_mlp_packed": 1,
    "mamba_in_proj": 1,
    "mamba_conv1d": 1,
    "qkv_gated": 3,
    "gdn_in_proj": 4,
    "gdn_in_proj_grouped": 2,
    "gdn_conv": 1,
}


def make_mapping(kind: str, megatron: str, hf: tuple[str, ...]) -> Mapping:
    if kind not in KINDS:
        raise ConfigError(f"mapping kind {kind!r} for {megatron} is unknown; use one of {sorted(KINDS)}")
    if len(hf) != HF_ARITY[kind]:
        raise ConfigError(
            f"mapping kind {kind!r} for {megatron} takes {HF_ARITY[kind]} HF names, got {len(hf)}"
        )
    return KINDS[kind](megatron, tuple(hf))
