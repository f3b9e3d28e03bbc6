"""bridge.checkpoint.direct_load: torch_dist records read straight into their destination give what torch
DCP's own reader gives (the reference), for every kind of request, and only whole, plain tensors take the
direct path. That a conversion's export (Megatron-Core's loader) reads every weight directly, and equals the
export through torch DCP's own reader, is checked in test_conversion_streaming.py."""

from __future__ import annotations

import io

import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.utils.serialization

pytest.importorskip("megatron.core")

from bridge.checkpoint import direct_load  # noqa: E402


def _state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(6, 4, generator=g).to(torch.bfloat16),  # read directly
        "t": torch.randn(4, 3, generator=g),  # into a transposed (non-contiguous) destination
        "f": torch.randn(5, generator=g),  # into a float64 destination
        "view": torch.randn(8, 4, generator=g)[2:5],  # a view: DCP saves a copy of just its elements
        "obj": {"step": 7},  # bytes
    }


def _destinations() -> dict:
    return {
        "w": torch.empty(6, 4, dtype=torch.bfloat16),
        "t": torch.empty(3, 4).t(),
        "f": torch.empty(5, dtype=torch.float64),
        "view": torch.empty(3, 4),
        "obj": {"step": 0},
    }


@pytest.mark.parametrize("crc32", [True, False])  # bridge's saves write no zip CRC-32 (direct_save)
def test_reads_equal_torch_dcp_reader(tmp_path, monkeypatch, crc32):
    with torch.utils.serialization.config.patch({"save.compute_crc32": crc32}):
        dcp.save(_state(), storage_writer=dcp.FileSystemWriter(str(tmp_path)), no_dist=True)
    reference, ours = _destinations(), _destinations()
    dcp.load(reference, storage_reader=dcp.FileSystemReader(str(tmp_path)), no_dist=True)

    outcomes = {}
    real = direct_load._offset_in_record

    def spy(record, length, req, target):
        outcomes[req.storage_index.fqn] = offset = real(record, length, req, target)
        return offset

    monkeypatch.setattr(direct_load, "_offset_in_record", spy)
    reader = direct_load.read_directly(dcp.FileSystemReader(str(tmp_path)))
    dcp.load(ours, storage_reader=reader, no_dist=True)

    for name in ("w", "t", "f", "view"):
        assert ours[name].dtype == reference[name].dtype and torch.equal(ours[name], reference[name]), name
    assert torch.equal(ours["w"].float(), _state()["w"].float())
    assert ours["obj"] == reference["obj"] == {"step": 7}
    direct = {name for name, offset in outcomes.items() if offset is not None}
    assert direct == {"w", "view"} and set(outcomes) == {"w", "t", "f", "view"}


def test_only_a_whole_saved_tensor_is_read_directly():
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

    saved = torch.arange(24, dtype=torch.float32).view(6, 4)
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    record = direct_load._RecordView(buffer, 0, len(buffer.getvalue()))

    def request(offsets, lengths):
        index = MetadataIndex("w")
        return ReadItem(
            LoadItemType.TENSOR, index, torch.Size([0, 0]), index, torch.Size(offsets), torch.Size(lengths)
        )

    length = len(buffer.getvalue())
    whole = direct_load._offset_in_record(record, length, request((0, 0), (6, 4)), saved)
    assert whole is not None
    data = buffer.getvalue()[whole : whole + saved.numel() * 4]
    assert torch.equal(torch.frombuffer(bytearray(data), dtype=torch.float32).view(6, 4), saved)
    rows = torch.empty(5, 4)
    assert direct_load._offset_in_record(record, length, request((1, 0), (5, 4)), rows) is None
    # the record is cut short of its bytes (its stated length): not read directly
    assert direct_load._offset_in_record(record, whole + 8, request((0, 0), (6, 4)), saved) is None


def test_a_load_of_plain_tensors_only_waits_on_a_torch_future(tmp_path):
    """Every request read directly (no bytes, nothing resharded): torch DCP then waits on the returned
    future itself (its `.wait()`, a torch.futures.Future), as a multi-rank load of model weights does."""
    state = {k: v for k, v in _state().items() if k in ("w", "view")}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path)), no_dist=True)
    ours = {k: v for k, v in _destinations().items() if k in state}
    dcp.load(
        ours, storage_reader=direct_load.read_directly(dcp.FileSystemReader(str(tmp_path))), no_dist=True
    )
    assert all(torch.equal(ours[k], state[k]) for k in state)
