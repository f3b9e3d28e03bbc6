"""Sequence packing: best-fit decreasing by hand, every sample in exactly one row, rows never over N, and
packed rows whose segments are the unpacked samples (tokens, labels, loss masks, restarting positions)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bridge.config.checks.data import parse_split
from bridge.config.run_plan import DataPlan
from bridge.training.data.loaders import build_datasets
from bridge.training.data.packing import PackedDataset, pack_lengths
from bridge.training.data.tokenizer import HFTokenizer
from tests.finetune_fixtures import make_tokenizer, write_chat_jsonl, write_sft_jsonl


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> HFTokenizer:
    return HFTokenizer(str(make_tokenizer(tmp_path_factory.mktemp("tok"))))


def plan(tmp, kind: str, path, counts, seq_length: int, packed: int, **kw) -> DataPlan:
    return DataPlan(kind=kind, paths=(str(path),), weights=None, split=parse_split("1"), split_text="1",
                    seq_length=seq_length, seed=5, reset_position_ids=False, reset_attention_mask=False,
                    eod_mask_loss=False, num_workers=0, cache_dir=str(tmp / "cache"), sample_counts=counts,
                    packed_sequence_size=packed, **kw)  # fmt: skip


def test_best_fit_decreasing_by_hand():
    # 6 opens row 0 (4 free), 5 opens row 1 (5 free), 4 fills row 0 (tighter than row 1),
    # 3 goes to row 1 (2 free), 2 fills row 1
    rows = pack_lengths(np.array([6, 5, 4, 3, 2]), 10)
    assert rows == [[0, 2], [1, 3, 4]]
    rows = pack_lengths(np.array([6, 5, 4, 3, 2, 7]), 10)
    # 7, 6, 5 open rows (3, 4, 5 free); 4 takes the 4 free, 3 the 3 free (first fit: the 5 free)
    assert rows == [[5, 3], [0, 2], [1, 4]]
    with pytest.raises(ValueError, match=r"0\.\.10"):
        pack_lengths(np.array([3, 11]), 10)


def test_every_sample_lands_in_exactly_one_row_and_no_row_overflows():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.0, 1.0, size=3000).astype(int), 1, 512)
    rows = pack_lengths(lengths, 512, seed=1)
    members = [i for row in rows for i in row]
    assert sorted(members) == list(range(len(lengths)))
    sums = [int(lengths[row].sum()) for row in rows]
    assert max(sums) <= 512
    # best-fit decreasing is within 11/9 OPT + 1 rows; the sum bound is the OPT floor
    assert len(rows) <= 11 / 9 * np.ceil(lengths.sum() / 512) + 1
    # at most one row is at most half full (two such rows would have been merged)
    assert sum(s <= 256 for s in sums) <= 1
    assert pack_lengths(lengths, 512, seed=1) == rows
    assert pack_lengths(lengths, 512, seed=2) != rows  # equal lengths are ordered by the seed


def unpadded(sample: dict, n: int) -> tuple:
    """(tokens, labels, loss mask) of an unpacked sample's first n positions."""
    return tuple(tuple(sample[k][:n].tolist()) for k in ("tokens", "labels", "loss_mask"))


@pytest.mark.parametrize("kind", ["sft", "chat"])
def test_packed_rows_are_the_unpacked_samples_back_to_back(tmp_path, tok, kind):
    f = tmp_path / "d.jsonl"
    (write_sft_jsonl if kind == "sft" else write_chat_jsonl)(f, 60, seed=4)
    n, pad = 48, tok.pad
    unpacked = build_datasets(plan(tmp_path, kind, f, (60, 0, 0), 64, 0), tok)[0]
    samples = [unpacked[i] for i in range(60)]
    # the fixture pad id never occurs in data: a sample's length is its count of non-pad labels
    lengths = [int((s["labels"] != pad).sum()) for s in samples]
    assert max(lengths) <= n  # no truncation here: packed segments must equal the whole samples
    want = Counter(unpadded(s, k) for s, k in zip(samples, lengths, strict=True))

    packed = build_datasets(plan(tmp_path, kind, f, (100, 0, 0), 64, n), tok)[0]
    assert isinstance(packed, PackedDataset) and len(packed) == 100
    rows = [packed.row(r) for r in range(packed.num_rows)]
    got = Counter()
    for row in rows:
        assert sorted(row) == ["cu_seqlens", "labels", "loss_mask", "position_ids", "tokens"]
        assert all(row[k].shape == (n,) for k in ("tokens", "labels", "loss_mask", "position_ids"))
        cu = row["cu_seqlens"].tolist()
        assert str(row["cu_seqlens"].dtype) == "torch.int32" and cu[0] == 0 and cu[-1] == n
        assert all(a < b for a, b in zip(cu[:-1], cu[1:], strict=True))
        real = int((row["labels"] != pad).sum())
        assert cu[-2] == real or (cu[-1] == real == n)  # padding, if any, is the last segment
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            assert row["position_ids"][a:b].tolist() == list(range(b - a))  # positions restart
            if a >= real:
                assert row["loss_mask"][a:].sum() == 0 and (row["tokens"][a:] == pad).all()
            else:
                got[tuple(tuple(row[k][a:b].tolist()) for k in ("tokens", "labels", "loss_mask"))] += 1
    assert got == want  # every sample exactly once, its tokens, labels and mask unchanged
    assert packed.num_rows < 60 and packed.num_rows >= np.ceil(sum(lengths) / n)
    # an epoch visits every row once, the next one in another order
    firsts = [tuple(packed[i]["tokens"].tolist()) for i in range(2 * packed.num_rows)]
    k = packed.num_rows
    assert sorted(firsts[:k]) == sorted(firsts[k:]) == sorted(tuple(r["tokens"].tolist()) for r in rows)
    assert firsts[:k] != firsts[k:]


def test_packing_truncates_to_the_packed_size_and_collates_cu_seqlens(tmp_path, tok):
    import torch

    f = tmp_path / "s.jsonl"
    write_sft_jsonl(f, 30, seed=7)
    packed = build_datasets(plan(tmp_path, "sft", f, (8, 0, 0), 64, 10), tok)[0]
    for r in range(packed.num_rows):
        cu = packed.row(r)["cu_seqlens"]
        assert cu[-1] == 10 and (cu[1:] - cu[:-1]).max() <= 10
    assert (packed.samples.lengths <= 11).all() and (packed.samples.lengths == 11).any()
    loader = torch.utils.data.DataLoader(packed, batch_size=1)
    batch = next(iter(loader))
    assert batch["tokens"].shape == (1, 10) and batch["cu_seqlens"].shape[0] == 1


def test_pad_multiple_pads_every_segment_with_loss_free_pads(tmp_path, tok):
    # dataset.pad_seq_to_mult = 4 (2*cp for cp = 2): each sample's segment rounded up to a multiple of 4
    f = tmp_path / "d.jsonl"
    write_sft_jsonl(f, 40, seed=6)
    n, pad, m = 48, tok.pad, 4
    plain = build_datasets(plan(tmp_path, "sft", f, (40, 0, 0), 64, 0), tok)[0]
    want = Counter()
    for i in range(40):
        s = plain[i]
        k = int((s["labels"] != pad).sum())
        want[unpadded(s, k)] += 1
    packed = build_datasets(plan(tmp_path, "sft", f, (40, 0, 0), 64, n, pad_seq_to_mult=m), tok)[0]
    assert packed.pad_multiple == m
    got = Counter()
    for r in range(packed.num_rows):
        row = packed.row(r)
        cu = row["cu_seqlens"].tolist()
        assert (
            cu[0] == 0 and cu[-1] == n and all((b - a) % m == 0 for a, b in zip(cu[:-1], cu[1:], strict=True))
        )
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            assert row["position_ids"][a:b].tolist() == list(range(b - a))
            k = int((row["labels"][a:b] != pad).sum())  # the sample, then at most m - 1 pads
            if k:
                assert b - a - k < m and row["loss_mask"][a + k : b].sum() == 0
                assert (row["tokens"][a + k : b] == pad).all()
                got[
                    tuple(tuple(row[key][a : a + k].tolist()) for key in ("tokens", "labels", "loss_mask"))
                ] += 1
    assert got == want  # every sample exactly once, unchanged
