"""A torch_dist load that reads each tensor record straight into its destination.

torch DCP's `FileSystemReader.read_data` reads every tensor record with `torch.load` into a new tensor and
then copies it into the tensor the planner resolves (a parameter, or a view of one: bridge.checkpoint.
in_place_merge). For a model that is two passes over the weights, and the first one faults in fresh memory
for every record: `convert_checkpoint.py export` of Llama-3.2-1B's 2.47 GB in bf16 took 8.6 CPU-seconds that
way on a 2-core machine and 6.5 reading straight into the parameters (benchmarks/convert.py).

A record is a `torch.save` zip of one tensor; its bytes are stored uncompressed. `torch.load` with
`map_location="meta"` reads only the record's pickle and gives the tensor's dtype, shape, strides and the
offset of its bytes in the record (`UntypedStorage._checkpoint_offset`, as torch sets it for meta loads).
When the request is the whole saved tensor, the saved tensor is its whole storage, contiguous and in this
machine's byte order, and the destination is a contiguous CPU tensor of that dtype and shape, the bytes
are read from the file into the destination's memory. Every other request (a resharded slice, a
transformed record, bytes entries, a storage that is not a local file system) goes through torch DCP's own
code, unchanged. What is read is the same bytes either way; the checkpoint's integrity manifest is checked
before the load as before (bridge.checkpoint.integrity).

With `checksum` (a load by one process), each file holding such records is read once, front to back,
with direct I/O (bridge.checkpoint.direct_io.read_file): its records' bytes go into their destinations
and its CRC-32 is computed on the way, for the integrity manifest (manifest.verify_data), instead of a
checksum pass before the load and then reads through the page cache (a 2.47 GB checkpoint no longer in
the page cache: 8.5 s and 7.8 CPU-seconds to export before, on the 2-core VM).

`DirectLoadStrategy` is Megatron-Core's `TorchDistLoadShardedStrategy` whose file-system reader reads that
way: Megatron-Core builds the reader inside its `load` (`_get_filesystem_reader`, in 0.16 and 0.19), so
the strategy gives that call's reader this `read_data` for the duration of its own `load`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import io
import struct
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem

from bridge.checkpoint.direct_io import read_file
from bridge.errors import ConfigError
from bridge.parallel.megatron_import import import_megatron

import_megatron()  # Megatron-Core with torch.compile deferred (see there), before its modules below

from megatron.core.dist_checkpointing.strategies import torch as mcore_torch  # noqa: E402
from megatron.core.dist_checkpointing.strategies.torch import TorchDistLoadShardedStrategy  # noqa: E402


class _RecordView(io.RawIOBase):
    """Bytes [start, start + length) of an open file, as a file of its own (what torch.load reads)."""

    def __init__(self, raw: io.RawIOBase, start: int, length: int):
        super().__init__()
        self._raw, self._start, self._length, self._pos = raw, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._length - self._pos))
        self._raw.seek(self._start + self._pos)
        got = self._raw.readinto(view[:n]) or 0
        self._pos += got
        return got


def _memory(t: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes as a writable buffer (not through .numpy(), which would make its
    storage unresizable)."""
    nbytes = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")


def _byte_order(record: io.RawIOBase) -> str | None:
    """The byte order a record was saved in (torch.save writes it beside the data), None if unrecorded.
    Read from the entry's local header on: bridge's records carry no zip CRC-32, which zipfile checks."""
    with zipfile.ZipFile(record) as z:
        entry = next((i for i in z.infolist() if i.filename.rpartition("/")[2] == "byteorder"), None)
        if entry is None or entry.compress_type != zipfile.ZIP_STORED:
            return None
        record.seek(entry.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", record.read(4))
        record.seek(entry.header_offset + 30 + name_length + extra_length)
        return record.read(entry.file_size).decode()


def _offset_in_record(record: io.RawIOBase, length: int, req: ReadItem, target: torch.Tensor) -> int | None:
    """Where the requested tensor's bytes start in the record when they can be read straight into
    `target` (see the module docstring), else None."""
    if target.device.type != "cpu" or not target.is_contiguous() or target.numel() == 0:
        return None
    record.seek(0)
    saved = torch.load(record, map_location="meta", weights_only=True)
    if not isinstance(saved, torch.Tensor):
        return None
    storage = saved.untyped_storage()
    offset = getattr(storage, "_checkpoint_offset", None)
    nbytes = saved.numel() * saved.element_size()
    if (
        offset is None
        or saved.dtype != target.dtype
        or not saved.is_contiguous()
        or saved.storage_offset() != 0
        or storage.nbytes() != nbytes
        or tuple(saved.shape) != tuple(target.shape)
        or any(req.storage_offsets)
        or tuple(req.lengths) != tuple(saved.shape)
        or offset + nbytes > length
    ):
        return None
    record.seek(0)
    if _byte_order(record) not in (None, sys.byteorder):
        return None
    return offset


def _ends_early(path: Path, req: ReadItem) -> ConfigError:
    return ConfigError(
        f"checkpoint file {path} ends inside the tensor {req.storage_index.fqn!r}: it changed after its "
        "integrity check; restore the checkpoint's files and load again"
    )


def _resolve(
    file: io.RawIOBase, start: int, length: int, req: ReadItem, planner
) -> tuple[torch.Tensor, int | None]:
    """The planner's tensor for a request (its record: bytes [start, start + length) of `file`) and where
    in the file its bytes start when they can be read straight into it (else None)."""
    target = planner.resolve_tensor(req).detach()
    offset = _offset_in_record(_RecordView(file, start, length), length, req, target)
    return target, None if offset is None else start + offset


def _read_by_torch(file: io.RawIOBase, start: int, length: int, req: ReadItem, target: torch.Tensor) -> None:
    """torch DCP's read (FileSystemReader.read_data) of one record into `target`."""
    tensor = torch.load(_RecordView(file, start, length), map_location="cpu", weights_only=True)
    tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
    if target.size() != tensor.size():
        raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs {tensor.size()}")
    target.copy_(tensor)


def _read_file(
    path: Path, name: str, reqs: list[ReadItem], reader: FileSystemReader, planner, checksums
) -> None:
    """The requests of one file: whole records straight into their tensors, the rest as torch reads them.
    `checksums` (a dict): the file is read in one direct pass, its (size, crc32) recorded there as `name`
    (its path in the checkpoint folder, as the manifest names it)."""
    pieces, direct = [], []
    with open(path, "rb", buffering=0) as file:
        for req in sorted(reqs, key=lambda r: reader.storage_data[r.storage_index].offset):
            info = reader.storage_data[req.storage_index]
            target, at = _resolve(file, info.offset, info.length, req, planner)
            if at is None:
                _read_by_torch(file, info.offset, info.length, req, target)
                planner.commit_tensor(req, target)
            elif checksums is not None:  # read below, in the file's one pass
                pieces.append((at, _memory(target)))
                direct.append((req, target))
            else:
                view = _memory(target)
                file.seek(at)
                done = 0
                while done < len(view):
                    got = file.readinto(view[done:])
                    if not got:
                        raise _ends_early(path, req)
                    done += got
                planner.commit_tensor(req, target)
    if checksums is None:
        return
    try:
        checksums[name] = read_file(path, pieces)  # pieces in offset order: an EOFError's piece is direct's
    except EOFError as err:
        raise _ends_early(path, direct[err.piece][0]) from None
    for req, target in direct:
        planner.commit_tensor(req, target)


def _direct_items(reader: FileSystemReader, plan: LoadPlan) -> tuple[list[ReadItem], list[ReadItem]]:
    """The plan's tensor requests this module reads, and the rest (for torch DCP's reader)."""
    if type(reader.fs) is not FileSystem:
        return [], list(plan.items)
    ours, rest = [], []
    for req in plan.items:
        info = reader.storage_data[req.storage_index]
        plain = req.type == LoadItemType.TENSOR and not getattr(info, "transform_descriptors", None)
        (ours if plain else rest).append(req)
    return ours, rest


def read_data(
    reader: FileSystemReader,
    plan: LoadPlan,
    planner: LoadPlanner,
    checksums: dict[str, tuple[int, int]] | None = None,
) -> torch.futures.Future:
    """`FileSystemReader.read_data` for `reader`, reading whole saved tensors straight into place;
    `checksums`: (size, crc32) of each file read, by name (see the module docstring)."""
    ours, rest = _direct_items(reader, plan)
    by_file: dict[str, list[ReadItem]] = {}
    for req in ours:
        by_file.setdefault(reader.storage_data[req.storage_index].relative_path, []).append(req)
    for relative_path, reqs in by_file.items():
        path = Path(reader.fs.concat_path(reader.path, relative_path))
        _read_file(path, Path(relative_path).as_posix(), reqs, reader, planner, checksums)
    if rest:
        return type(reader).read_data(reader, dataclasses.replace(plan, items=rest), planner)
    done: torch.futures.Future = torch.futures.Future()  # what torch DCP waits on (its reader's kind)
    done.set_result(None)
    return done


def read_directly(reader: FileSystemReader, checksums: dict | None = None) -> FileSystemReader:
    """`reader`, its `read_data` replaced by the one above (for this instance only)."""
    reader.read_data = lambda plan, planner: read_data(reader, plan, planner, checksums)
    return reader


@contextlib.contextmanager
def _readers_read_directly(checksums: dict | None) -> Iterator[None]:
    """While open, the readers Megatron-Core's torch_dist load makes read with `read_data` above."""
    make = getattr(mcore_torch, "_get_filesystem_reader", None)
    if make is None:  # a release that builds its readers elsewhere: torch DCP's reads, as before
        yield
        return

    def direct_reader(*args: Any, **kwargs: Any):
        reader = make(*args, **kwargs)
        return read_directly(reader, checksums) if isinstance(reader, FileSystemReader) else reader

    mcore_torch._get_filesystem_reader = direct_reader
    try:
        yield
    finally:
        mcore_torch._get_filesystem_reader = make


class DirectLoadStrategy(TorchDistLoadShardedStrategy):
    """Megatron-Core's torch_dist load, each whole saved tensor read straight into its destination.
    `checksum`: the files holding such tensors are read in one direct pass each and their (size,
    crc32) left in `checksums` by file name (the others are not read in full: not there)."""

    def __init__(self, checksum: bool = False) -> None:
        super().__init__()
        self.checksum = checksum
        self.checksums: dict[str, tuple[int, int]] = {}

    def load(self, *args: Any, **kwargs: Any):
        with _readers_read_directly(self.checksums if self.checksum else None):
            return super().load(*args, **kwargs)
