"""SDPAttention with context parallelism against the CP=1 attention, one process simulating the CP ranks.

Each simulated CP rank r holds chunks r and 2*cp-1-r of q, k, v (Megatron's load-balanced order); the
CP group's K/V all-gather is replaced by the concatenation of every simulated rank's local K/V, all cut
from the same leaf tensors, so autograd sums every rank's gradient into each chunk: what the real
gather's backward (a reduce-scatter) gives each rank. The outputs put back in global order, and the
gradients of q, k, v, must equal the CP=1 attention's on the whole sequence. The real collective runs in
tests/functional/test_context_parallel.py.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.core.transformer.enums import AttnMaskType  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

from bridge.models import attention as attention_module  # noqa: E402
from bridge.models.attention import SDPAttention, cp_chunk_ranks, cp_local_positions  # noqa: E402

SEQ, BATCH, HEAD_DIM = 16, 2, 8


class _Group:
    def __init__(self, size: int, rank: int = 0):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _config(heads, groups, cp) -> TransformerConfig:
    return TransformerConfig(
        num_layers=2, hidden_size=heads * HEAD_DIM, num_attention_heads=heads, num_query_groups=groups,
        kv_channels=HEAD_DIM, attention_dropout=0.0, hidden_dropout=0.0, use_cpu_initialization=True,
        context_parallel_size=cp,
    )  # fmt: skip


def _attention(heads, groups, cp, rank=0, tp=1, mask_type=AttnMaskType.causal) -> SDPAttention:
    pgs = ProcessGroupCollection()
    pgs.tp = _Group(tp)
    pgs.cp = _Group(cp, rank)
    return SDPAttention(_config(heads * tp, groups * tp, cp), 2, mask_type, "self", pg_collection=pgs)


def _document_mask() -> torch.Tensor:
    """True = masked out: causal within documents of lengths 5, 7, 4 (what reset_attention_mask builds)."""
    doc = torch.repeat_interleave(torch.arange(3), torch.tensor([5, 7, 4]))
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
    return (causal | (doc[:, None] != doc[None, :]))[None, None].expand(BATCH, 1, SEQ, SEQ)


def test_chunk_order_is_the_data_paths_split(monkeypatch):
    # bridge's forward step splits the batch through Megatron-Core's get_batch_on_this_cp_rank, which
    # asks the group's size and rank (get_pg_size/get_pg_rank in 0.16.1, torch.distributed in 0.19.2):
    # without a process group, let the fake group answer.
    from megatron.core import utils

    from bridge.training.forward_step import split_batch_for_cp

    monkeypatch.setattr(utils, "get_pg_size", lambda group=None: group.size())
    monkeypatch.setattr(utils, "get_pg_rank", lambda group=None: group.rank())
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: group.size())
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: group.rank())
    for cp in (2, 4):
        for rank in range(cp):
            tokens = torch.arange(SEQ)[None].expand(BATCH, SEQ)
            mask = torch.arange(SEQ * SEQ).view(1, 1, SEQ, SEQ)
            batch = split_batch_for_cp({"tokens": tokens, "attention_mask": mask}, _Group(cp, rank))
            positions = cp_local_positions(SEQ, cp, rank)
            assert torch.equal(batch["tokens"], tokens[:, positions])
            assert torch.equal(batch["attention_mask"], mask[:, :, positions, :])  # query rows, global keys
        held = {(r, h): [] for r in range(cp) for h in (0, 1)}
        for chunk, where in enumerate(cp_chunk_ranks(cp)):
            held[where].append(chunk)
        assert all(len(chunks) == 1 for chunks in held.values())


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("heads,groups,tp", [(4, 4, 1), (4, 2, 1), (2, 1, 2)], ids=["mha", "gqa", "gqa_tp2"])
@pytest.mark.parametrize("mask", ["none", "document"])
def test_cp_matches_cp1(monkeypatch, cp, heads, groups, tp, mask):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(SEQ, BATCH, heads, HEAD_DIM, generator=gen)
    k = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
    v = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
    weights = torch.randn(SEQ, BATCH, heads * HEAD_DIM, generator=gen)
    full_mask = _document_mask() if mask == "document" else None

    # CP=1: the whole sequence.
    ref_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out = _attention(heads, groups, 1, tp=tp)(*ref_inputs, attention_mask=full_mask)
    (ref_out * weights).sum().backward()

    # CP=cp: each simulated rank's chunks, cut from shared leaves.
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    positions = [cp_local_positions(SEQ, cp, r) for r in range(cp)]
    local = [[leaf.index_select(0, positions[r]) for leaf in leaves] for r in range(cp)]

    def fake_gather(x, tensor_parallel_output_grad=True, group=None):
        assert tensor_parallel_output_grad and group.size() == cp
        for which in (1, 2):  # k or v of some rank: every rank's, rank-major, as the all-gather returns
            if any(x is local[r][which] for r in range(cp)):
                return torch.cat([local[r][which] for r in range(cp)])
        raise AssertionError("only K and V are gathered")

    monkeypatch.setattr(attention_module.tensor_parallel, "gather_from_sequence_parallel_region", fake_gather)
    out = torch.empty_like(ref_out)
    total = 0
    for r in range(cp):
        rank_mask = None if full_mask is None else full_mask[:, :, positions[r], :]  # rows, as get_batch does
        rank_out = _attention(heads, groups, cp, rank=r, tp=tp)(*local[r], attention_mask=rank_mask)
        assert rank_out.shape == (SEQ // cp, BATCH, heads * HEAD_DIM)
        out = out.index_copy(0, positions[r], rank_out)
        total = total + (rank_out * weights.index_select(0, positions[r])).sum()
    total.backward()

    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for name, leaf, ref in zip("qkv", leaves, ref_inputs, strict=True):
        torch.testing.assert_close(
            leaf.grad, ref.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"d{n}: {m}"
        )


def test_cp_mask_shape_is_checked():
    att = _attention(4, 2, 2, rank=0)
    q, kv = torch.randn(8, 1, 4, HEAD_DIM), torch.randn(8, 1, 2, HEAD_DIM)
    wrong = torch.zeros(1, 1, 8, 8, dtype=torch.bool)  # local keys: not what get_batch_on_this_cp_rank leaves
    monkey = attention_module.tensor_parallel.gather_from_sequence_parallel_region
    try:
        attention_module.tensor_parallel.gather_from_sequence_parallel_region = lambda x, **_: torch.cat(
            [x, x]
        )
        with pytest.raises(ValueError, match="local sq, global sk"):
            att(q, kv, kv, attention_mask=wrong)
    finally:
        attention_module.tensor_parallel.gather_from_sequence_parallel_region = monkey


def test_cp_group_size_must_match_the_config():
    pgs = ProcessGroupCollection()
    pgs.tp, pgs.cp = _Group(1), _Group(4)
    with pytest.raises(ValueError, match="context_parallel_size=2 but the CP group has 4 ranks"):
        SDPAttention(_config(4, 2, 2), 1, AttnMaskType.causal, "self", pg_collection=pgs)
