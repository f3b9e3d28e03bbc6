"""Safetensors reading (validation, slices) and streamed sharded writing."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bridge.checkpoint.atomic import atomic_dir
from bridge.conversion.hf_io import HFCheckpoint, OutTensor, ShardedWriter, read_header
from bridge.errors import ConfigError


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "b.weight": torch.randn(3, 4, 2, generator=g),
        "c.bias": torch.randn(11, generator=g).to(torch.float16),
        "d.ids": torch.arange(6, dtype=torch.int64),
    }


def test_sharded_writer_round_trip_in_any_order(tmp_path):
    tensors = _tensors()
    plan = [OutTensor(n, tuple(t.shape), t.dtype) for n, t in tensors.items()]
    writer = ShardedWriter(tmp_path, plan, max_shard_bytes=100)
    for name in reversed(list(tensors)):
        writer.write(name, tensors[name])
    writer.close()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    assert len(set(index["weight_map"].values())) > 1
    for name, file in index["weight_map"].items():
        with safe_open(str(tmp_path / file), "pt") as f:  # safetensors itself accepts our files
            t = f.get_tensor(name)
        assert t.dtype == tensors[name].dtype and torch.equal(t, tensors[name])
    ckpt = HFCheckpoint(tmp_path)
    assert ckpt.shape("b.weight") == (3, 4, 2) and ckpt.dtype("a.weight") == torch.bfloat16
    assert torch.equal(
        ckpt.read("b.weight", (slice(1, 3), slice(None), slice(1, 2))), tensors["b.weight"][1:3, :, 1:2]
    )


def test_single_shard_has_no_index(tmp_path):
    t = {"x": torch.ones(2)}
    writer = ShardedWriter(tmp_path, [OutTensor("x", (2,), torch.float32)])
    writer.write("x", t["x"])
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_writer_refuses_wrong_shape_and_missing_tensors(tmp_path):
    writer = ShardedWriter(
        tmp_path, [OutTensor("x", (2,), torch.float32), OutTensor("y", (1,), torch.float32)]
    )
    with pytest.raises(ConfigError, match=r"got torch.float32\[3\], planned torch.float32\[2\]"):
        writer.write("x", torch.ones(3))
    writer.write("x", torch.ones(2))
    with pytest.raises(ConfigError, match=r"without writing \['y'\]"):
        writer.close()


def test_atomic_dir_leaves_nothing_on_failure_and_refuses_non_empty(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as staging:
            (staging / "half.bin").write_bytes(b"x")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_dir(target) as staging:
        (staging / "done.bin").write_bytes(b"x")
    assert [p.name for p in target.iterdir()] == ["done.bin"]
    with pytest.raises(ConfigError, match="path=.*exists and is not an empty folder"):
        with atomic_dir(target):
            pass


def test_reopening_the_map_keeps_reads_correct(tmp_path):
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ckpt = HFCheckpoint(tmp_path, remap_bytes=8)  # reopen after every read
    for _ in range(2):
        for name, t in tensors.items():
            assert torch.equal(ckpt.read(name, ()), t)
    ckpt.close()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-3], "ends at byte 236 of a 233-byte data section"),
        (lambda b: b + b"\0" * 8, "data section is 244 bytes but the tensors cover 236"),
        (lambda b: b[:5], "shorter than the 8-byte header length"),
        (lambda b: b[:8] + b"not json" + b[16:], "header is not valid JSON"),
        (lambda b: (10**9).to_bytes(8, "little") + b[8:], "does not fit"),
    ],
)
def test_damaged_files_are_refused(tmp_path, damage, message):
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), str(path))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ConfigError, match=message):
        HFCheckpoint(tmp_path)


def test_index_problems_are_refused(tmp_path):
    save_file({"x": torch.ones(2)}, str(tmp_path / "part1.safetensors"))
    index = {"weight_map": {"x": "part1.safetensors", "y": "part2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="shard part2.safetensors listed in the index is missing"):
        HFCheckpoint(tmp_path)
    index["weight_map"]["y"] = "part1.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="tensor 'y' listed in the index is not in the file"):
        HFCheckpoint(tmp_path)
    with pytest.raises(ConfigError, match="holds neither"):
        HFCheckpoint(tmp_path / "nowhere")


def test_header_is_read_without_torch_data(tmp_path):
    save_file({"x": torch.ones(2, 3, dtype=torch.bfloat16)}, str(tmp_path / "m.safetensors"))
    info = read_header(tmp_path / "m.safetensors")["x"]
    assert (info.dtype, info.shape) == ("BF16", (2, 3))


@pytest.mark.parametrize("in_order", [True, False])
def test_direct_writes_equal_buffered_writes(tmp_path, monkeypatch, in_order):
    """Direct I/O (forced on these small shards, through a staging block smaller than a tensor so the
    bytes wrap around it) writes the same files as buffered writes; safetensors reads them back."""
    from bridge.checkpoint import direct_io
    from bridge.conversion import hf_io

    monkeypatch.setattr(hf_io, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(direct_io, "STAGE_BYTES", 3 * direct_io.ALIGN)
    g = torch.Generator().manual_seed(1)
    tensors = {
        "big.weight": torch.randn(50, 301, generator=g),  # 60,200 bytes: spans several staging blocks
        "odd.bias": torch.randn(13, generator=g).to(torch.bfloat16),  # ends off a block boundary
        "ids": torch.arange(7, dtype=torch.int64),
    }
    plan = [OutTensor(n, tuple(t.shape), t.dtype) for n, t in tensors.items()]
    order = list(tensors) if in_order else list(reversed(tensors))
    files = {}
    for direct in (True, False):
        folder = tmp_path / str(direct)
        folder.mkdir()
        writer = ShardedWriter(folder, plan, direct=direct)
        assert all(f.direct == direct for f in writer._files.values()) or direct_io._O_DIRECT == 0
        for name in order:
            writer.write(name, tensors[name])
        writer.close()
        files[direct] = (folder / "model.safetensors").read_bytes()
    assert files[True] == files[False]
    with safe_open(str(tmp_path / "True" / "model.safetensors"), "pt") as f:
        for name, t in tensors.items():
            assert torch.equal(f.get_tensor(name), t)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64])
def test_copy_into_reads_runs_of_bytes_into_the_tensor_and_maps_the_rest(tmp_path, dtype):
    """copy_into equals the mapped read's copy for every block; the blocks that are one run of bytes in
    the file (whole tensor, rows, one row's columns, a scalar) are read straight into the tensor."""
    full = (torch.arange(6 * 4 * 3) - 30).reshape(6, 4, 3).to(dtype)
    save_file(
        {"pad": torch.ones(3, dtype=torch.int8), "t": full, "s": full[0, 0, 0].clone()},
        str(tmp_path / "model.safetensors"),
    )
    ckpt = HFCheckpoint(tmp_path)
    direct = [
        (),
        (slice(None),) * 3,
        (slice(2, 5), slice(None), slice(None)),
        (slice(1, 2), slice(1, 3), slice(None)),
    ]
    mapped = [(slice(None), slice(0, 2), slice(None)), (slice(0, 6, 2), slice(None), slice(None))]
    for index in direct + mapped:
        want = full[index] if index else full
        dst = torch.full_like(want, 7)
        assert (ckpt._span_start("t", index, dst) is not None) == (index in direct), index
        ckpt.copy_into("t", index, dst)
        assert torch.equal(dst, want), index
    scalar = torch.zeros((), dtype=dtype)
    ckpt.copy_into("s", (), scalar)
    assert scalar.item() == full[0, 0, 0].item()
    # another dtype or a non-contiguous target: the mapped read, converted by copy_
    other = torch.zeros(6, 4, 3, dtype=torch.float64)
    assert ckpt._span_start("t", (), other) is None
    ckpt.copy_into("t", (), other)
    assert torch.equal(other, full.double())
    strided = torch.zeros(4, 3, 6, dtype=dtype).permute(2, 0, 1)
    ckpt.copy_into("t", (), strided)
    assert torch.equal(strided, full)
    # the filled tensor is an ordinary one: its storage can still be freed (streaming.py's writer does)
    dst = torch.empty(6, 4, 3, dtype=dtype)
    ckpt.copy_into("t", (), dst)
    dst.untyped_storage().resize_(0)
    ckpt.close()
