"""Output files written with direct I/O (O_DIRECT) where the filesystem takes it.

Why: a conversion writes gigabytes the process holds in its own (anonymous) memory. Through the page
cache, on the 2-core VM this project is measured on, such writes run at about 0.5 GB/s and cost about
0.6 CPU-seconds per GB (the kernel copies every byte into pages it first has to find); with O_DIRECT
they run at disk speed (a 2.47 GB shard: 5.0 s buffered, 2.1-2.9 s direct), the process only copies
the bytes into one staging block, and the page cache is left to the rest of the machine.

Direct I/O wants block-aligned memory, lengths and offsets: bytes are staged through a page-aligned
block (`STAGE_BYTES`, one per thread: torch DCP writes its files from several) and written in whole
blocks; each file keeps only its unwritten tail (< one block of `ALIGN` bytes) between writes, and
writes it through an ordinary descriptor when closed. A filesystem that refuses O_DIRECT (tmpfs, some
network filesystems; every macOS filesystem) gets ordinary buffered writes of the same bytes.

`OutputFile` writes at given offsets (the HF exporter's shards); `AppendStream` is a write-only file
object over one, appended front to back, that also computes the CRC-32 of what passes (torch DCP's
`.distcp` files: the integrity manifest then needs no second read of them).
"""

from __future__ import annotations

import errno
import io
import mmap
import os
import threading
import zlib

import torch

ALIGN = 4096  # covers the logical block size of every common disk
STAGE_BYTES = 8 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)

_local = threading.local()  # each writing thread stages through its own block


def _staging() -> memoryview:
    stage = getattr(_local, "stage", None)
    if stage is None or len(stage) != STAGE_BYTES:  # made on the thread's first direct write
        stage = _local.stage = memoryview(mmap.mmap(-1, STAGE_BYTES))  # page-aligned
    return stage


def _bytes_of(data: torch.Tensor | bytes | bytearray | memoryview) -> memoryview:
    """The bytes of `data` as a flat memoryview (a tensor's: any dtype, on the CPU, contiguous)."""
    if isinstance(data, torch.Tensor):
        data = data.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return memoryview(data).cast("B")


class OutputFile:
    """One output file written at given offsets: directly while the writes arrive front to back
    (each at the end of the previous one), buffered from the first write that does not."""

    def __init__(self, path: os.PathLike | str, direct: bool = True):
        self.path = os.fspath(path)
        self.position = 0  # end of the bytes written so far, while writing front to back
        self._tail = b""  # bytes past the last block written directly
        self._fd = -1
        if direct and _O_DIRECT:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_DIRECT, 0o644)
            except OSError:  # the filesystem does not take O_DIRECT
                self._fd = -1
        self._buffered = None if self.direct else open(self.path, "wb")

    @property
    def direct(self) -> bool:
        return self._fd >= 0

    def write_at(self, offset: int, data: torch.Tensor | bytes | bytearray | memoryview) -> None:
        """Write `data` (bytes, or a tensor's bytes: any dtype) at byte `offset` of the file."""
        view = _bytes_of(data)
        if self.direct and offset != self.position:
            self._leave_direct()
        if not self.direct:
            self._buffered.seek(offset)
            self._buffered.write(view)
            return
        self.position += len(view)
        self._append(view)

    def _append(self, data: memoryview) -> None:
        stage = _staging()
        filled = len(self._tail)
        stage[:filled] = self._tail
        done = 0
        while True:
            take = min(STAGE_BYTES - filled, len(data) - done)
            stage[filled : filled + take] = data[done : done + take]
            done, filled = done + take, filled + take
            whole = filled - filled % ALIGN
            written = 0
            while written < whole:
                written += os.write(self._fd, stage[written:whole])
            rest = bytes(stage[whole:filled])  # < ALIGN bytes
            if done == len(data):
                self._tail = rest
                return
            stage[: len(rest)] = rest
            filled = len(rest)

    def fileno(self) -> int:
        """The descriptor written so far (the direct one while writing directly)."""
        return self._fd if self.direct else self._buffered.fileno()

    def _leave_direct(self) -> None:
        os.close(self._fd)
        self._fd = -1
        self._buffered = open(self.path, "r+b")
        self._buffered.seek(self.position - len(self._tail))
        self._buffered.write(self._tail)
        self._tail = b""

    def close(self, fsync: bool = False) -> None:
        """Write the last partial block (through the page cache) and close; `fsync`: durably."""
        if self.direct:
            self._leave_direct()
        if fsync:
            self._buffered.flush()
            os.fsync(self._buffered.fileno())
        self._buffered.close()

    def abort(self) -> None:
        if self.direct:
            os.close(self._fd)
            self._fd = -1
        else:
            self._buffered.close()


class AppendStream(io.RawIOBase):
    """A write-only file object appending to an OutputFile, with the size and CRC-32 of what it wrote.
    Closing writes the file durably (fsync) and calls `on_close(path, size, crc32)`."""

    def __init__(self, path: os.PathLike | str, on_close=None, direct: bool = True):
        super().__init__()
        self._file = OutputFile(path, direct=direct)
        self._on_close = on_close
        self.size = 0
        self.crc32 = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = _bytes_of(data)
        self.crc32 = zlib.crc32(view, self.crc32)
        self._file.write_at(self.size, view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def fileno(self) -> int:
        # what a caller fsyncs before closing (torch DCP does): the descriptor written so far;
        # close() writes the last partial block and fsyncs again
        return self._file.fileno()

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._file.close(fsync=True)
        if self._on_close is not None:
            self._on_close(self._file.path, self.size, self.crc32 & 0xFFFFFFFF)

    def abort(self) -> None:
        """Close without the last block (the write failed; the caller removes the file)."""
        if not self.closed:
            super().close()
            self._file.abort()


def read_file(path: os.PathLike | str, pieces: list[tuple[int, memoryview]] = ()) -> tuple[int, int]:
    """Read the file at `path` once, front to back (direct I/O where the file system takes it), copying
    its bytes [offset, offset + len(view)) into each (offset, view) of `pieces`; returns the file's size
    and the CRC-32 of all its bytes. One pass instead of a checksum read and then a read of the tensors,
    and, direct, no page cache: reading a checkpoint that is not in the page cache through it cost ~1.6
    CPU-seconds per GB on the 2-core VM (the kernel inserting every page), direct reads ~0.3.
    A file that ends inside a piece is an EOFError whose `piece` is that piece's index by offset."""
    pieces = sorted(pieces, key=lambda piece: piece[0])
    direct = bool(_O_DIRECT)
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECT) if direct else os.open(path, os.O_RDONLY)
    except OSError:  # the file system does not take O_DIRECT
        direct, fd = False, os.open(path, os.O_RDONLY)
    stage = _staging()
    position, crc, first = 0, 0, 0  # pieces before `first` are filled
    try:
        while True:
            try:
                n = os.preadv(fd, [stage], position)
            except OSError as err:  # some FUSE / network file systems open with O_DIRECT, then refuse reads
                if not (direct and err.errno == errno.EINVAL):
                    raise
                os.close(fd)
                direct, fd = False, os.open(path, os.O_RDONLY)
                continue
            if not n:
                break
            chunk, end = stage[:n], position + n
            crc = zlib.crc32(chunk, crc)
            for offset, view in pieces[first:]:
                if offset >= end:
                    break
                lo, hi = max(offset, position), min(offset + len(view), end)
                if lo < hi:
                    view[lo - offset : hi - offset] = chunk[lo - position : hi - position]
            while first < len(pieces) and pieces[first][0] + len(pieces[first][1]) <= end:
                first += 1
            position = end
    finally:
        os.close(fd)
    if first < len(pieces):
        offset, view = pieces[first]
        err = EOFError(
            f"{os.fspath(path)} ends at byte {position}, inside bytes {offset}-{offset + len(view)}"
        )
        err.piece = first
        raise err
    return position, crc & 0xFFFFFFFF
