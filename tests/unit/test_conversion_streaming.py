"""The low-memory conversion (bridge.conversion.streaming) against AutoBridge's in-memory one."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import bit_identical, read_tensors, save_hf_model

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """A tiny Llama in bf16, sharded in two files, and its import by import_ckpt and by stream_import."""
    from bridge import AutoBridge
    from bridge.conversion.streaming import stream_import

    root = tmp_path_factory.mktemp("stream")
    hf = root / "hf"
    save_hf_model("llama", hf, dtype=torch.bfloat16)
    _reshard(hf)
    AutoBridge.import_ckpt(hf, root / "in_memory")
    stream_import(hf, root / "streamed")
    return hf, root / "in_memory", root / "streamed"


def _reshard(folder: Path) -> None:
    """Two safetensors files plus an index: the export must keep the source's layout."""
    from bridge.conversion.hf_io import OutTensor, ShardedWriter

    tensors = read_tensors(folder)
    (folder / "model.safetensors").unlink()
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    planned = [OutTensor(n, tuple(t.shape), t.dtype) for n, t in tensors.items()]
    writer = ShardedWriter(folder, planned, max_shard_bytes=total // 2 + 1)
    for name, t in tensors.items():
        writer.write(name, t)
    writer.close()
    assert (folder / "model.safetensors.index.json").is_file()


def _loaded(path: Path, hf: Path) -> dict[str, torch.Tensor]:
    from bridge import AutoBridge
    from bridge.checkpoint import load_checkpoint

    provider = AutoBridge.from_hf_pretrained(hf).to_megatron_provider(load_weights=False)
    chunks = provider.provide_distributed_model(
        wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False
    )
    load_checkpoint(path, chunks, load_rng=False, strict=True)
    return {k: v.clone() for k, v in chunks[0].state_dict().items() if isinstance(v, torch.Tensor)}


def test_stream_import_loads_into_the_model_import_ckpt_gives(ckpts):
    hf, in_memory, streamed = ckpts
    want, got = _loaded(in_memory, hf), _loaded(streamed, hf)
    assert sorted(got) == sorted(want) and len(want) > 10
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    # the same published layout: tracker, manifest, HF assets
    for rel in ("latest_checkpointed_iteration.txt", "iter_0000000/manifest.json", "hf_assets/config.json"):
        assert (streamed / rel).is_file(), rel
    assert (streamed / "hf_assets/source_tensors.json").read_bytes() == (
        in_memory / "hf_assets/source_tensors.json"
    ).read_bytes()


def test_stream_export_is_byte_identical_to_export_ckpt(ckpts, tmp_path, monkeypatch):
    """export_ckpt reads the weights through Megatron-Core's loader, each record straight into its parameter
    (bridge.checkpoint.direct_load: every one of them here); stream_export through torch DCP's reader."""
    from bridge import AutoBridge
    from bridge.checkpoint import direct_load
    from bridge.conversion.streaming import stream_export

    _, in_memory, _ = ckpts
    direct, real = [], direct_load._offset_in_record
    monkeypatch.setattr(direct_load, "_offset_in_record", lambda *a: direct.append(real(*a)) or direct[-1])
    AutoBridge.from_megatron_checkpoint(in_memory).export_ckpt(in_memory, tmp_path / "want")
    assert len(direct) > 10 and None not in direct
    monkeypatch.undo()
    stream_export(in_memory, tmp_path / "got")
    want = sorted(p.name for p in (tmp_path / "want").iterdir())
    assert want == sorted(p.name for p in (tmp_path / "got").iterdir())
    assert "model.safetensors.index.json" in want
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "want", tmp_path / "got", want, shallow=False)
    assert mismatch == [] and errors == []


def test_an_export_reads_each_shard_once_checksumming_it(ckpts, tmp_path, monkeypatch):
    """One process: the manifest check before the load leaves the shards' checksums to the load, which
    reads each shard in one pass (bridge.checkpoint.direct_io.read_file) and checks its CRC-32 against
    the manifest (zlib's CRC-32 of the file on disk, the reference, equals it)."""
    import zlib

    from bridge import AutoBridge
    from bridge.checkpoint import direct_io, manifest

    _, in_memory, _ = ckpts
    hashed, passes, real_crc, real_read = [], [], manifest.crc32_file, direct_io.read_file
    monkeypatch.setattr(manifest, "crc32_file", lambda path: hashed.append(Path(path).name) or real_crc(path))

    def read_file(path, pieces=()):  # (shard, how many tensors it filled)
        passes.append((Path(path).name, len(pieces)))
        return real_read(path, pieces)

    monkeypatch.setattr(direct_io, "read_file", read_file)
    monkeypatch.setattr("bridge.checkpoint.direct_load.read_file", read_file)
    AutoBridge.from_megatron_checkpoint(in_memory).export_ckpt(in_memory, tmp_path / "out")
    folder = in_memory / "iter_0000000"
    shards = sorted(p.name for p in folder.glob("*.distcp"))
    assert shards and sorted(name for name, _ in passes) == shards  # one pass per shard,
    assert all(filled > 0 for _, filled in passes), passes  # the load's, reading its tensors
    assert not set(hashed) & set(shards)  # and no checksum read before it
    recorded = json.loads((folder / "manifest.json").read_text())["files"]
    for name in shards:  # the manifest the direct writer made holds the files' real CRC-32s
        assert recorded[name]["crc32"] == f"{zlib.crc32((folder / name).read_bytes()):08x}", name
    assert bit_identical(read_tensors(ckpts[0]), read_tensors(tmp_path / "out")) is None


def test_a_changed_byte_in_a_shard_fails_the_export_naming_the_file(ckpts, tmp_path):
    """The one-pass checksum catches what the check before the load caught: a byte flipped in a tensor's
    data, after the manifest was written. Nothing is exported."""
    from bridge import AutoBridge
    from bridge.checkpoint.save_load import CheckpointDamaged

    damaged = tmp_path / "ckpt"
    shutil.copytree(ckpts[1], damaged)
    shard = max((damaged / "iter_0000000").glob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside a tensor's bytes
    shard.write_bytes(bytes(data))
    with pytest.raises(
        CheckpointDamaged, match=rf"{shard.name}'s bytes differ from the manifest \(crc32 mismatch"
    ):
        AutoBridge.from_megatron_checkpoint(damaged).export_ckpt(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_round_trip_equals_the_source(ckpts, tmp_path):
    from bridge.conversion.streaming import stream_export

    hf, _, streamed = ckpts
    stream_export(streamed, tmp_path / "out", max_shard_size=10**9)
    assert (tmp_path / "out" / "model.safetensors").is_file()  # max_shard_size: one file
    source, out = read_tensors(hf), read_tensors(tmp_path / "out")
    assert all(t.dtype == torch.bfloat16 for t in out.values())
    assert bit_identical(source, out) is None


def test_non_finite_source_is_refused_before_publishing(ckpts, tmp_path):
    from safetensors.torch import load_file, save_file

    from bridge.conversion.streaming import stream_import

    hf = tmp_path / "hf"
    shutil.copytree(ckpts[0], hf)
    name = "model.layers.1.mlp.down_proj.weight"
    file = next(f for f in hf.glob("*.safetensors") if name in load_file(str(f)))
    tensors = load_file(str(file))
    tensors[name][3, 5] = float("nan")
    save_file(tensors, str(file), metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=rf"tensor '{name}' in .*{file.name} holds 1 NaN and 0 Inf values"):
        stream_import(hf, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging folder left behind


def test_missing_tensor_is_refused_before_anything_is_written(ckpts, tmp_path):
    import json

    from bridge.conversion.streaming import stream_import

    hf = tmp_path / "hf"
    shutil.copytree(ckpts[0], hf)
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.layers.0.self_attn.k_proj.weight"]
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="is missing tensor 'model.layers.0.self_attn.k_proj.weight'"):
        stream_import(hf, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_low_memory_refuses_a_parallel_layout(ckpts, tmp_path, capsys):
    sys.path.insert(0, str(REPO / "scripts" / "conversion"))
    try:
        from convert_checkpoint import main
    finally:
        sys.path.pop(0)
    code = main(
        [
            "import",
            "--hf-path",
            str(ckpts[0]),
            "--megatron-path",
            str(tmp_path / "o"),
            "--low-memory",
            "--tp",
            "2",
        ]
    )
    assert code == 2
    assert "--tp=2 with --low-memory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_low_memory_import(ckpts, tmp_path):
    hf, in_memory, _ = ckpts
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = REPO / "scripts" / "conversion" / "convert_checkpoint.py"
    out = tmp_path / "cli"
    run = subprocess.run(
        [
            sys.executable,
            str(script),
            "import",
            "--hf-path",
            str(hf),
            "--megatron-path",
            str(out),
            "--low-memory",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"imported {out}" in run.stdout
    got, want = _loaded(out, hf), _loaded(in_memory, hf)
    assert all(torch.equal(got[k], v) for k, v in want.items())


def test_cli_process_exits_with_mains_code(ckpts, tmp_path):
    # the script's own exit path (skip_final_collections, then sys.exit) keeps main()'s exit status
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = REPO / "scripts" / "conversion" / "convert_checkpoint.py"
    args = ["import", "--hf-path", str(ckpts[0]), "--megatron-path", str(tmp_path / "o"), "--low-memory"]
    run = subprocess.run(
        [sys.executable, str(script), *args, "--tp", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "--tp=2 with --low-memory" in run.stderr and not (tmp_path / "o").exists()


WHOLE_PROCESS = """
import json, runpy, sys
sys.argv = ["convert_checkpoint.py", *sys.argv[1:]]
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as e:
    code = e.code
from megatron.core.dist_checkpointing.strategies import filesystem_async
print(json.dumps({{"code": code, "dynamo": "torch._dynamo" in sys.modules,
                  "manager": filesystem_async._results_queue is not None}}))
"""


def test_cli_conversions_run_in_one_process_without_the_compiler(ckpts, tmp_path):
    # issue 43 (conversion speed): the import writes its shards from this process's threads
    # (bridge.checkpoint.direct_save: no forked writers, no spawned results-queue Manager, which re-imports
    # the script), and neither direction imports torch.compile's machinery (import_megatron first)
    hf = ckpts[0]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    code = WHOLE_PROCESS.format(script=str(REPO / "scripts" / "conversion" / "convert_checkpoint.py"))
    mg, out = tmp_path / "mg", tmp_path / "out"
    for args in (
        ["import", "--hf-path", str(hf), "--megatron-path", str(mg)],
        ["export", "--megatron-path", str(mg), "--hf-path", str(out)],
    ):
        run = subprocess.run(
            [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"code": 0, "dynamo": False, "manager": False}, (args[0], report)
    assert bit_identical(read_tensors(hf), read_tensors(out)) is None
