"""The integrity manifest of a checkpoint: size and CRC-32 of every file, written last, checked on load.

    manifest.json = {"format": 1, "files": {"__0_0.distcp": {"size": 123, "crc32": "89abcdef"}, ...},
                     "summary": {"iteration": 8, "weights_finite": true, "max_abs_weight": 3.2}}

The files are hashed in parallel: each rank hashes a share (largest files first, spread over ranks)
and rank 0 writes the union. A file that is missing, has another size or other bytes (a truncated or
deleted shard, garbage metadata, flipped bytes inside a shard) is reported by name. Pure Python;
torch.distributed only when a process group of more than one rank exists.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from bridge.checkpoint.atomic import atomic_write_text
from bridge.checkpoint.paths import MANIFEST_FILENAME

FORMAT = 1
_CHUNK = 16 << 20
DATA_SUFFIX = ".distcp"


def crc32_file(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            crc = zlib.crc32(block, crc)
    return f"{crc & 0xFFFFFFFF:08x}"


def _files(folder: Path) -> dict[str, int]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST_FILENAME and not p.name.endswith(".tmp"):
            out[p.relative_to(folder).as_posix()] = p.stat().st_size
    return out


def _group():
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is always there at run time
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _my_share(names_sizes: dict[str, int], rank: int, world: int) -> list[str]:
    """Largest first, each to the least-loaded rank: every rank computes the same assignment."""
    loads = [0] * world
    mine = []
    for name, size in sorted(names_sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        r = loads.index(min(loads))
        loads[r] += size + 1
        if r == rank:
            mine.append(name)
    return mine


def _gather(local: dict) -> dict:
    dist = _group()
    if dist is None:
        return local
    parts: list = [None] * dist.get_world_size()
    dist.all_gather_object(parts, local)
    merged: dict = {}
    for part in parts:
        merged.update(part)
    return merged


def write_manifest(
    folder: str | os.PathLike, summary: dict | None = None, known: dict[str, tuple[int, str]] | None = None
) -> dict:
    """All ranks (or one process): hash the folder's files and have rank 0 write manifest.json.
    `known`: this rank's files whose (size, crc32) its writer computed from the bytes it wrote
    (bridge.checkpoint.direct_io.AppendStream); one whose size on disk differs is hashed again."""
    folder = Path(folder)
    dist = _group()
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    sizes = _files(folder) if rank == 0 else None
    if dist is not None:  # everyone hashes rank 0's listing (the folder is on a shared filesystem)
        box = [sizes]
        dist.broadcast_object_list(box, src=0)
        sizes = box[0]
    # every rank's known files, so that all ranks share out the same rest (the ranks save with the same
    # strategy: all pass `known` or none does)
    gathered = _gather(dict(known)) if known is not None else {}
    written = {
        name: {"size": size, "crc32": crc}
        for name, (size, crc) in gathered.items()
        if sizes.get(name) == size
    }
    rest = {name: size for name, size in sizes.items() if name not in written}
    local = {
        name: {"size": rest[name], "crc32": crc32_file(folder / name)}
        for name in _my_share(rest, rank, world)
    }
    files = dict(sorted((written | _gather(local)).items()))
    manifest = {"format": FORMAT, "files": files, "summary": summary or {}}
    if rank == 0:
        atomic_write_text(folder / MANIFEST_FILENAME, json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest, None when the folder has none; a ValueError when it is unreadable."""
    path = Path(folder) / MANIFEST_FILENAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{MANIFEST_FILENAME} is unreadable ({err})") from err
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ValueError(f"{MANIFEST_FILENAME} has no 'files' table")
    return data


def is_data_file(name: str) -> bool:
    """A torch_dist shard (`__<rank>_<i>.distcp`): what a load reads in full (see verify_data)."""
    return name.endswith(DATA_SUFFIX)


def verify(folder: str | os.PathLike, checksums: bool = True, data_later: bool = False) -> list[str]:
    """What is wrong with the checkpoint in `folder` ([] when it matches its manifest). All ranks call
    it together (each hashes a share) and get the same list. A folder without a manifest (written
    before it existed) is checked for its metadata.json only. `data_later`: the data files' checksums
    are left to the load that reads them (verify_data); their sizes are checked here."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder} does not exist"]
    try:
        manifest = read_manifest(folder)
    except ValueError as err:
        return [str(err)]
    if manifest is None:
        return [] if (folder / "metadata.json").is_file() else ["metadata.json is missing"]
    files: dict = manifest["files"]
    problems = []
    for name, entry in files.items():
        p = folder / name
        if not p.is_file():
            problems.append(f"{name} is missing")
        elif p.stat().st_size != entry.get("size"):
            problems.append(
                f"{name} has {p.stat().st_size} bytes, the manifest says {entry.get('size')} (truncated?)"
            )
    if problems or not checksums:
        return problems
    dist = _group()
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    sizes = {
        name: int(entry["size"]) for name, entry in files.items() if not (data_later and is_data_file(name))
    }
    local = {}
    for name in _my_share(sizes, rank, world):
        if crc32_file(folder / name) != files[name].get("crc32"):
            local[name] = (
                f"{name}'s bytes differ from the manifest (crc32 mismatch: the file was modified or is corrupt)"
            )
    return [msg for _, msg in sorted(_gather(local).items())]


def verify_data(folder: str | os.PathLike, read: dict[str, tuple[int, int]]) -> list[str]:
    """One process, after a load that verify(..., data_later=True) checked: the data files' checksums
    against the manifest. `read`: (size, crc32) of the files the load read in full as it went
    (bridge.checkpoint.direct_load); any other is read here (bridge.checkpoint.direct_io.read_file)."""
    from bridge.checkpoint.direct_io import read_file

    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = []
    for name, entry in sorted((manifest or {}).get("files", {}).items()):
        if not is_data_file(name):
            continue
        size, crc = read[name] if name in read else read_file(folder / name)
        if size != entry.get("size"):
            problems.append(f"{name} has {size} bytes, the manifest says {entry.get('size')} (truncated?)")
        elif f"{crc:08x}" != entry.get("crc32"):
            problems.append(
                f"{name}'s bytes differ from the manifest (crc32 mismatch: the file was modified or is corrupt)"
            )
    return problems


def summary(folder: str | os.PathLike) -> dict:
    try:
        manifest = read_manifest(folder)
    except ValueError:
        return {}
    return dict(manifest.get("summary") or {}) if manifest else {}
