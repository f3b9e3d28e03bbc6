"""bridge.checkpoint.direct_save writes what torch DCP's own FileSystemWriter writes (the reference): the
same `.distcp` bytes, from views handed to the writer without a copy, and checksums equal to zlib's
CRC-32 of the files on disk."""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.utils.serialization

pytest.importorskip("megatron.core")

from bridge.checkpoint import direct_save  # noqa: E402


def _state() -> dict:
    g = torch.Generator().manual_seed(0)
    fc1 = torch.randn(16, 8, generator=g).to(torch.bfloat16)  # a gated MLP's fused weight
    return {
        "gate": fc1[:8],  # its halves: views into a larger storage
        "up": fc1[8:],
        "w": torch.randn(6, 4, generator=g),
        "t": torch.randn(4, 3, generator=g).t(),  # a non-contiguous view: the writer copies it
    }


def test_exact_storage_shares_the_memory_and_saves_as_a_copy_does():
    fc1 = torch.randn(16, 8).to(torch.bfloat16)
    half = fc1[8:]
    exact = direct_save.exact_storage(half)
    assert exact.data_ptr() == half.data_ptr() and torch.equal(exact, half)
    assert exact.untyped_storage().nbytes() == half.nbytes
    fc1[8, 0] = 3.0  # the same memory, not a copy
    assert exact[0, 0] == 3.0
    whole = torch.randn(4, 4)
    assert direct_save.exact_storage(whole) is whole
    strided = whole.t()
    assert direct_save.exact_storage(strided) is strided


@pytest.mark.parametrize("threads", [1, 2])
def test_direct_writer_writes_torchs_bytes_and_their_checksums(tmp_path, threads):
    written: dict = {}
    with torch.utils.serialization.config.patch({"save.compute_crc32": False}):
        dcp.save(
            _state(),
            storage_writer=dcp.FileSystemWriter(str(tmp_path / "torch"), thread_count=threads),
            no_dist=True,
        )
        dcp.save(
            _state(),
            storage_writer=direct_save._DirectFileSystemWriter(
                str(tmp_path / "ours"), written, thread_count=threads
            ),
            planner=direct_save.DirectSavePlanner(flatten_state_dict=False),
            no_dist=True,
        )
    data = sorted(p.name for p in (tmp_path / "torch").glob("*.distcp"))
    assert len(data) == threads and sorted(written) == data
    for name in data:
        ours = (tmp_path / "ours" / name).read_bytes()
        assert ours == (tmp_path / "torch" / name).read_bytes(), name
        assert written[name] == (len(ours), f"{zlib.crc32(ours):08x}"), name
    loaded = {k: torch.empty_like(v) for k, v in _state().items()}
    dcp.load(loaded, storage_reader=dcp.FileSystemReader(str(tmp_path / "ours")), no_dist=True)
    for key, value in _state().items():
        assert torch.equal(loaded[key], value), key
