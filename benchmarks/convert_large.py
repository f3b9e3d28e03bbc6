"""Low-memory conversion (convert_checkpoint.py --low-memory) of a checkpoint larger than this machine's RAM.

    python benchmarks/convert_large.py [--size-gb 26] [--workdir /tmp] [--keep]

Makes a synthetic Llama-shaped bf16 checkpoint (default: 1.1x MemTotal of /proc/meminfo; 5 GB shards),
written one tensor at a time through bridge.conversion.hf_io.ShardedWriter from a per-tensor seeded
generator, recording each tensor's sha256. Then, each in a fresh subprocess: HF -> torch_dist
(streaming.stream_import) and torch_dist -> HF (streaming.stream_export). When the disk cannot hold
three copies the HF source is deleted before the export. Every exported tensor's sha256 is checked
against the source's. Prints wall time, peak RSS (the child's VmHWM, reset after its imports so the
libraries are included but not the import phase's transients) and GB/s per direction. Everything it
wrote is deleted at the end (unless --keep). Not run in CI: at full size it takes many minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARD_BYTES = 5 * 10**9
GB = 10**9


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def llama_config(size_bytes: int) -> dict:
    """Llama-3-8B widths with as many layers as make `size_bytes` (a smaller vocab below 8 GB)."""
    h, f, heads, kv_heads, d = 4096, 14336, 32, 8, 128
    vocab = 128256 if size_bytes >= 8 * GB else 32000
    layer = 2 * (2 * h * heads * d + 2 * h * kv_heads * d + 3 * h * f + 2 * h)
    layers = max(1, round((size_bytes - 2 * 2 * vocab * h) / layer))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": f,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": d,
        "vocab_size": vocab,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "mlp_bias": False,
    }


def hf_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    h, f, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.mlp.gate_proj.weight": (f, h),
            f"{p}.mlp.up_proj.weight": (f, h),
            f"{p}.mlp.down_proj.weight": (h, f),
        }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (c["vocab_size"], h)}
    return shapes


def _sha256(t) -> str:
    return hashlib.sha256(
        t.contiguous().reshape(-1).view(dtype=__import__("torch").uint8).numpy()
    ).hexdigest()


def make_checkpoint(folder: Path, size_bytes: int) -> tuple[dict[str, str], int]:
    """Write the synthetic checkpoint; returns (name -> sha256, bytes of weights)."""
    import torch

    from bridge.conversion.hf_io import OutTensor, ShardedWriter

    config = llama_config(size_bytes)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shapes = hf_shapes(config)
    planned = [OutTensor(n, s, torch.bfloat16) for n, s in shapes.items()]
    writer = ShardedWriter(folder, planned, SHARD_BYTES)
    hashes = {}
    for seed, t in enumerate(planned):  # file order: the writer's direct I/O path
        g = torch.Generator().manual_seed(seed)
        if len(t.shape) == 1:
            tensor = 1 + 0.1 * torch.randn(t.shape, generator=g, dtype=torch.bfloat16)
        else:
            tensor = torch.randn(t.shape, generator=g, dtype=torch.bfloat16).mul_(0.02)
        hashes[t.name] = _sha256(tensor)
        writer.write(t.name, tensor)
        del tensor
    writer.close()
    return hashes, sum(t.nbytes for t in planned)


def child(work: str, src: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    from bridge.conversion import streaming  # noqa: F401 - imports (torch, Megatron-Core) apart from the work

    result = {"import_s": time.perf_counter() - t0, "rss_after_imports": _status("VmRSS")}
    _reset_peak()
    t = time.perf_counter()
    if work == "import":
        streaming.stream_import(src, out)
    else:
        streaming.stream_export(src, out)
    result["work_s"] = time.perf_counter() - t
    result["peak_rss"] = _status("VmHWM")
    return result


def run_child(work: str, src: Path, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    t = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", work, "--src", str(src), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{work} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - t
    return result


def check_export(out: Path, hashes: dict[str, str]) -> None:
    """Every exported tensor's sha256 equals the source's (one tensor in memory at a time)."""
    from safetensors import safe_open

    from bridge.conversion.hf_io import HFCheckpoint

    ckpt = HFCheckpoint(out)
    if set(ckpt.tensors) != set(hashes):
        raise SystemExit(f"exported tensors differ: {sorted(set(ckpt.tensors) ^ set(hashes))[:5]}")
    by_file: dict[str, list[str]] = {}
    for name, info in ckpt.tensors.items():
        by_file.setdefault(info.file, []).append(name)
    for file, names in sorted(by_file.items()):
        for name in names:  # a handle per tensor: the parent's mapped pages stay one tensor
            with safe_open(str(out / file), framework="pt") as f:
                if _sha256(f.get_tensor(name)) != hashes[name]:
                    raise SystemExit(f"tensor {name} in {file}: sha256 differs from the source's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=None, help="checkpoint size (default 1.1x MemTotal)")
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--keep", action="store_true", help="keep the files (for a look afterwards)")
    parser.add_argument("--child", choices=("import", "export"))
    parser.add_argument("--src", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.src, args.out)), flush=True)
        return
    mem_total = _meminfo("MemTotal")
    size = int(args.size_gb * GB) if args.size_gb else int(1.1 * mem_total)
    work = Path(tempfile.mkdtemp(prefix="convert_large.", dir=args.workdir))
    hf, megatron, out = work / "hf", work / "megatron", work / "out"
    try:
        t = time.perf_counter()
        sys.path.insert(0, str(REPO))
        hashes, nbytes = make_checkpoint(hf, size)
        made = time.perf_counter() - t
        print(f"made {nbytes / GB:.2f} GB ({len(hashes)} tensors) in {made:.0f} s", flush=True)
        runs = {"import": run_child("import", hf, megatron)}
        print(f"import done in {runs['import']['wall_s']:.0f} s", flush=True)
        deleted = shutil.disk_usage(work).free < 1.1 * nbytes
        if deleted:  # three copies do not fit: the hashes stand in for the source
            shutil.rmtree(hf)
        runs["export"] = run_child("export", megatron, out)
        print(f"export done in {runs['export']['wall_s']:.0f} s", flush=True)
        check_export(out, hashes)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"\ncheckpoint {nbytes / GB:.2f} GB = {nbytes / mem_total:.2f}x MemTotal ({mem_total / GB:.2f} GB); "
        f"{len(hashes)} tensors, every exported sha256 equal to the source's"
        + ("; HF source deleted before the export (disk)" if deleted else "")
    )
    print("\n| direction | wall (child) | work | imports | peak RSS (VmHWM) | RSS after imports | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        print(
            f"| {name} | {r['wall_s']:.1f} s | {r['work_s']:.1f} s | {r['import_s']:.1f} s | "
            f"{r['peak_rss'] / GB:.2f} GB | {r['rss_after_imports'] / GB:.2f} GB | {nbytes / GB / r['work_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
