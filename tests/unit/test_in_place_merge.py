"""bridge.checkpoint.in_place_merge: a factory's pieces that are views tiling the parameter give the parameter
itself (what Megatron-Core's merge would rebuild, without the copy); other pieces go through its merge."""

from __future__ import annotations

import pytest
import torch

from bridge.checkpoint.in_place_merge import merge_in_place, tiles

pytest.importorskip("megatron.core")


def test_tiles_needs_views_covering_the_whole_tensor_once():
    w = torch.arange(24.0).view(6, 4)
    a, b = torch.chunk(w, 2, dim=0)
    assert tiles(w, [a, b]) and tiles(w, [b, a])  # order of the pieces does not matter, coverage does
    assert not tiles(w, [a])  # a gap
    assert not tiles(w, [a, a, b])  # an overlap (and a gap is not hidden by it)
    assert not tiles(w, [a.clone(), b])  # a copy, not the parameter's memory
    assert not tiles(w, list(torch.chunk(w, 2, dim=1)))  # non-contiguous column halves
    assert not tiles(w, [a.to(torch.float64), b])


def test_megatron_swiglu_factory_returns_the_loaded_parameter():
    """Megatron-Core's gated-MLP factory (apply_swiglu_sharded_factory): the halves it builds are views of
    the weight, so after a load into them the merge returns the weight itself, equal to Megatron-Core's
    own merge (a torch.cat of the halves)."""
    from megatron.core.dist_checkpointing.mapping import ShardedTensor
    from megatron.core.transformer.mlp import apply_swiglu_sharded_factory

    weight = torch.zeros(8, 3)
    factory = apply_swiglu_sharded_factory(ShardedTensor.from_rank_offsets("fc1", weight), ())
    reference = factory.merge_fn
    sharded = {"layer": {"fc1": factory}}
    merge_in_place(sharded)
    built = factory.build()
    pieces = [v.data for v in (built.values() if isinstance(built, dict) else built)]
    for i, piece in enumerate(pieces):  # a load writes into the pieces
        piece.copy_(torch.full_like(piece, float(i + 1)))
    loaded = {k: v.data for k, v in built.items()} if isinstance(built, dict) else [p for p in pieces]
    merged = factory.merge_fn(loaded)
    assert merged is weight
    assert torch.equal(merged, reference(loaded))
    copied = (
        {k: v.clone() for k, v in loaded.items()} if isinstance(loaded, dict) else [p.clone() for p in loaded]
    )
    other = factory.merge_fn(copied)  # pieces that are not the weight's memory: Megatron-Core's merge
    assert other is not weight and torch.equal(other, weight)
