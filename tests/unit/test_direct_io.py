"""bridge.checkpoint.direct_io: what its direct (O_DIRECT) and buffered paths write and read equals what
plain file I/O writes and reads, and its CRC-32s equal zlib's over the bytes on disk (the references).
The staging block is shrunk to a few disk blocks so that every transfer wraps around it."""

from __future__ import annotations

import os
import threading
import zlib

import pytest
import torch

from bridge.checkpoint import direct_io


@pytest.fixture(params=["direct", "buffered"])
def mode(request, monkeypatch):
    monkeypatch.setattr(direct_io, "STAGE_BYTES", 3 * direct_io.ALIGN)
    if request.param == "buffered":  # as on a file system that refuses O_DIRECT
        monkeypatch.setattr(direct_io, "_O_DIRECT", 0)
    return request.param


def _chunks(seed: int) -> list:
    """Writes of every size class: a few bytes, unaligned, several staging blocks; bytes and tensors."""
    g = torch.Generator().manual_seed(seed)
    sizes = [3, 4096, 1, 50_001, 7, 3 * 4096 + 5, 0, 12_345]
    out: list = []
    for i, n in enumerate(sizes):
        data = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
        out.append(bytes(data.numpy()) if i % 2 else data.view(torch.uint8))
    out.append(torch.randn(33, 17, generator=g).to(torch.bfloat16))  # a tensor of another dtype
    return out


def _as_bytes(chunk) -> bytes:
    return bytes(chunk.contiguous().view(torch.uint8).numpy()) if isinstance(chunk, torch.Tensor) else chunk


def test_append_stream_writes_the_bytes_and_their_crc(tmp_path, mode):
    closed = []
    stream = direct_io.AppendStream(tmp_path / "f.bin", on_close=lambda *a: closed.append(a))
    if mode == "buffered":
        assert not stream._file.direct
    want = b""
    for chunk in _chunks(0):
        assert stream.write(chunk) == len(_as_bytes(chunk))
        want += _as_bytes(chunk)
        assert stream.tell() == len(want)
    stream.close()
    stream.close()  # idempotent (torch DCP closes the stream, then its context manager does)
    got = (tmp_path / "f.bin").read_bytes()
    assert got == want
    assert closed == [(os.fspath(tmp_path / "f.bin"), len(got), zlib.crc32(got))]


def test_append_streams_in_threads_each_write_their_own_bytes(tmp_path, mode):
    """torch DCP writes its files from several threads: each stages through its own block."""
    wants = {}

    def write(i: int) -> None:
        stream = direct_io.AppendStream(tmp_path / f"{i}.bin")
        wants[i] = b"".join(_as_bytes(c) for c in _chunks(i))
        for _ in range(3):
            for chunk in _chunks(i):
                stream.write(chunk)
        stream.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, want in wants.items():
        assert (tmp_path / f"{i}.bin").read_bytes() == want * 3, i


def test_read_file_fills_the_pieces_and_checksums_the_whole_file(tmp_path, mode):
    data = os.urandom(5 * direct_io.STAGE_BYTES + 1234)
    (tmp_path / "f.bin").write_bytes(data)
    ranges = [(0, 10), (17, 3 * 4096 + 9), (direct_io.STAGE_BYTES - 5, 11), (len(data) - 7, 7)]
    pieces = [(start, memoryview(bytearray(n))) for start, n in reversed(ranges)]  # any order
    assert direct_io.read_file(tmp_path / "f.bin", pieces) == (len(data), zlib.crc32(data))
    for start, view in pieces:
        assert bytes(view) == data[start : start + len(view)], start
    assert direct_io.read_file(tmp_path / "f.bin") == (len(data), zlib.crc32(data))  # checksum only


def test_read_file_that_ends_inside_a_piece_is_an_eoferror_naming_it(tmp_path, mode):
    (tmp_path / "f.bin").write_bytes(os.urandom(10_000))
    pieces = [(9990, memoryview(bytearray(20))), (0, memoryview(bytearray(5)))]
    with pytest.raises(EOFError, match="ends at byte 10000, inside bytes 9990-10010") as err:
        direct_io.read_file(tmp_path / "f.bin", pieces)
    assert err.value.piece == 1  # by offset


def test_read_file_where_direct_reads_are_refused_reads_through_the_page_cache(tmp_path, monkeypatch):
    """Some FUSE and network file systems open a file with O_DIRECT and then refuse its reads (EINVAL)."""
    import errno

    data = os.urandom(3 * direct_io.STAGE_BYTES + 17)
    (tmp_path / "f.bin").write_bytes(data)
    real, refused = os.preadv, []

    def preadv(fd, buffers, offset):
        if os.get_blocking(fd) and fcntl_flags(fd) & direct_io._O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset)

    monkeypatch.setattr(direct_io.os, "preadv", preadv)
    piece = memoryview(bytearray(100))
    assert direct_io.read_file(tmp_path / "f.bin", [(5, piece)]) == (len(data), zlib.crc32(data))
    assert bytes(piece) == data[5:105]
    assert refused == ([0] if direct_io._O_DIRECT else [])


def fcntl_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)
