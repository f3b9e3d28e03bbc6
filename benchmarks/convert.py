"""Conversion speed and memory against the floor, on a Llama-3.2-1B-shaped random bf16 checkpoint.

    python benchmarks/convert.py [--repeats 3] [--workdir /tmp]

Makes the checkpoint locally (146 tensors, 1,235,814,400 parameters, tied embeddings, one 2.47 GB
safetensors file) in a temporary folder that is deleted at the end. Every measurement runs in a fresh
subprocess; the table gives medians over the repeats:

- floor import: `.clone()` of every tensor out of safetensors;
  bridge import: AutoBridge -> provider -> provide_distributed_model() returning a TP=1 GPTModel that
  holds the weights (after imports; includes process-group setup and building the model).
- floor export: read every tensor (`safetensors.torch.load_file`) and `save_file` them;
  bridge export: `save_hf_pretrained(model, out)` from the model in memory. A second floor row
  writes tensors already held in the process's memory (cloned before the clock starts), as a
  model's are: on this kind of machine the first large write after faulting in gigabytes of
  anonymous memory is several times slower than the same write from a memory-mapped file.
- imports (torch, safetensors; for bridge also `bridge.conversion.auto_bridge` and the Megatron-Core
  modules conversion imports, `bridge.conversion.megatron_import`) are timed apart from the work, in
  their own row. transformers is not imported: config.json is read as JSON.
- the command-line rows: `scripts/conversion/convert_checkpoint.py import` (HF folder -> Megatron
  torch_dist checkpoint) and `export` (that checkpoint -> HF folder), whole processes, against a floor
  that reads every tensor and writes them to one file with fsync (a checkpoint is published durably).
- the export command reads a checkpoint its import wrote with direct I/O, so not from the page cache,
  where the floor's source is: a second floor row reads a source evicted from the page cache first
  (`posix_fadvise(DONTNEED)`), as the export's is.
- whole process rows: from the launch to the exit of the child; every child (floor too) ends as
  `scripts/conversion/convert_checkpoint.py` does (`bridge.process_exit.skip_final_collections`).
- peak RSS: the process's high-water mark over the timed work (reset after imports, so the baseline
  of imported libraries is included but not whatever the import phase allocated before).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "attention_bias": False,
    "mlp_bias": False,
    "initializer_range": 0.02,
}


def make_checkpoint(folder: Path) -> tuple[int, int, int]:
    """Random bf16 weights with Llama-3.2-1B's names and shapes; returns (tensors, parameters, bytes)."""
    import torch
    from safetensors.torch import save_file

    c = LLAMA32_1B
    h, f, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.mlp.gate_proj.weight": (f, h),
            f"{p}.mlp.up_proj.weight": (f, h),
            f"{p}.mlp.down_proj.weight": (h, f),
        }
    torch.manual_seed(0)
    tensors = {n: torch.empty(s, dtype=torch.bfloat16).normal_(0.0, 0.02) for n, s in shapes.items()}
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(LLAMA32_1B, indent=2))
    params = sum(t.numel() for t in tensors.values())
    return len(tensors), params, (folder / "model.safetensors").stat().st_size


# ---- children: one measurement each, printed as JSON ------------------------------------------------


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def child(work: str, src: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    import torch  # noqa: F401
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    if work.startswith("bridge"):
        # imports are reported apart from the work: exactly what conversion imports (config.json is
        # read without transformers; Megatron-Core through the conversion's own import helper)
        from bridge.conversion.auto_bridge import AutoBridge
        from bridge.parallel.megatron_import import import_megatron

        import_megatron()
    t_imports = time.perf_counter() - t0
    baseline = _status("VmRSS")
    result = {"imports_s": t_imports, "baseline_rss": baseline}

    if work == "floor_import":
        _reset_peak()
        cpu0 = _cpu()
        t = time.perf_counter()
        with safe_open(str(src / "model.safetensors"), "pt") as f:
            tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
        result["work_s"] = time.perf_counter() - t
        result["peak_rss"] = _status("VmHWM")
        del tensors
    elif work == "floor_export_mem":
        # the same write from tensors already in this process's memory, as a model's are
        with safe_open(str(src / "model.safetensors"), "pt") as f:
            tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
        out.mkdir()
        _reset_peak()
        cpu0 = _cpu()
        t = time.perf_counter()
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        result["work_s"] = time.perf_counter() - t
        result["peak_rss"] = _status("VmHWM")
    elif work in ("floor_write_fsync", "floor_write_fsync_cold"):
        # the command-line conversions' floor: read, write, fsync (both publish durably)
        _reset_peak()
        cpu0 = _cpu()
        t = time.perf_counter()
        tensors = load_file(str(src / "model.safetensors"))
        out.mkdir()
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        fd = os.open(out / "model.safetensors", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        result["work_s"] = time.perf_counter() - t
        result["peak_rss"] = _status("VmHWM")
    elif work == "floor_export":
        _reset_peak()
        cpu0 = _cpu()
        t = time.perf_counter()
        tensors = load_file(str(src / "model.safetensors"))
        out.mkdir()
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        result["work_s"] = time.perf_counter() - t
        result["peak_rss"] = _status("VmHWM")
    else:
        _reset_peak()
        cpu0 = _cpu()
        t = time.perf_counter()
        bridge = AutoBridge.from_hf_pretrained(src)
        chunks = bridge.to_megatron_provider().provide_distributed_model(wrap_with_ddp=False)
        import_s = time.perf_counter() - t
        if work == "bridge_import":
            result["work_s"] = import_s
            result["peak_rss"] = _status("VmHWM")
        else:
            _reset_peak()
            cpu0 = _cpu()
            t = time.perf_counter()
            bridge.save_hf_pretrained(chunks, out, progress=False)
            result["work_s"] = time.perf_counter() - t
            result["peak_rss"] = _status("VmHWM")
    result["work_cpu_s"] = _cpu() - cpu0
    return result


def _child_env() -> dict[str, str]:
    """One thread, this checkout on the path, no distributed launch variables inherited."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (written back first: only clean pages can go)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_child(work: str, src: Path, out: Path, keep: bool = False) -> dict:
    if work.endswith("_cold"):
        evict(src)
    env = _child_env()
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", work, "--src", str(src), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{work} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["process_cpu_s"] = process_cpu
    if out.exists() and not keep:
        shutil.rmtree(out)
    return result


def run_cli(args: list[str]) -> dict:
    """One convert_checkpoint.py process, as a user runs it: wall and CPU time from launch to exit."""
    env = _child_env()
    script = REPO / "scripts" / "conversion" / "convert_checkpoint.py"
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(
            f"convert_checkpoint.py {args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": wall, "process_cpu_s": cpu, "peak_rss": after.ru_maxrss * 1024}


def check_export(src: Path, out: Path) -> None:
    # the benchmark is only meaningful if the export is right: compare every tensor once
    import torch
    from safetensors import safe_open

    with (
        safe_open(str(src / "model.safetensors"), "pt") as a,
        safe_open(str(out / "model.safetensors"), "pt") as b,
    ):
        assert set(a.keys()) == set(b.keys())
        for k in a.keys():
            assert torch.equal(a.get_tensor(k).view(torch.int16), b.get_tensor(k).view(torch.int16)), k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workdir", default=None, help="where the temporary checkpoint goes (default: $TMPDIR)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(REPO))
        print(json.dumps(child(args.child, Path(args.src), Path(args.out))))
        from bridge.process_exit import skip_final_collections

        skip_final_collections()  # every child ends as scripts/conversion/convert_checkpoint.py does
        return

    tmp = Path(tempfile.mkdtemp(prefix="bridge-convert-bench-", dir=args.workdir))
    try:
        src, out = tmp / "hf", tmp / "out"
        n, params, size = make_checkpoint(src)
        print(
            f"checkpoint: {n} tensors, {params:,} parameters, {size / 1e9:.2f} GB (bf16, one file)",
            flush=True,
        )
        runs: dict[str, list[dict]] = {
            w: []
            for w in (
                "floor_import",
                "bridge_import",
                "floor_export",
                "floor_export_mem",
                "bridge_export",
                "floor_write_fsync",
                "floor_write_fsync_cold",
                "cli_import",
                "cli_export",
            )
        }
        for i in range(args.repeats):
            for work in runs:
                if work.startswith("cli_"):
                    continue
                check = work == "bridge_export" and i == 0
                runs[work].append(run_child(work, src, out, keep=check))
                if check:
                    check_export(src, out)
                    shutil.rmtree(out)
            ckpt, hf_out = tmp / "torch_dist", tmp / "hf_out"
            runs["cli_import"].append(
                run_cli(["import", "--hf-path", str(src), "--megatron-path", str(ckpt)])
            )
            runs["cli_export"].append(
                run_cli(["export", "--megatron-path", str(ckpt), "--hf-path", str(hf_out)])
            )
            if i == 0:
                check_export(src, hf_out)
            shutil.rmtree(ckpt)
            shutil.rmtree(hf_out)
            print(f"repeat {i + 1}/{args.repeats} done", flush=True)
        print_table(runs, args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def print_table(runs: dict[str, list[dict]], repeats: int) -> None:
    def stat(work: str, key: str, scale: float = 1.0) -> tuple[float, float, float]:
        values = [r[key] / scale for r in runs[work]]
        return statistics.median(values), min(values), max(values)

    gb = 1e9
    rows = [
        (
            "HF -> Megatron model holding the weights (s)",
            stat("floor_import", "work_s"),
            stat("bridge_import", "work_s"),
        ),
        (
            "Megatron -> HF export, save_hf_pretrained (s)",
            stat("floor_export", "work_s"),
            stat("bridge_export", "work_s"),
        ),
        (
            "  same, floor writing tensors already in memory (clone, then save_file) (s)",
            stat("floor_export_mem", "work_s"),
            stat("bridge_export", "work_s"),
        ),
        (
            "peak RSS during import (GB)",
            stat("floor_import", "peak_rss", gb),
            stat("bridge_import", "peak_rss", gb),
        ),
        (
            "peak RSS during export (GB)",
            stat("floor_export", "peak_rss", gb),
            stat("bridge_export", "peak_rss", gb),
        ),
        (
            "RSS after imports, baseline (GB)",
            stat("floor_import", "baseline_rss", gb),
            stat("bridge_import", "baseline_rss", gb),
        ),
        (
            "  import work, CPU time (user + sys, s)",
            stat("floor_import", "work_cpu_s"),
            stat("bridge_import", "work_cpu_s"),
        ),
        (
            "  export work, CPU time (user + sys, s)",
            stat("floor_export", "work_cpu_s"),
            stat("bridge_export", "work_cpu_s"),
        ),
        ("imports (s)", stat("floor_import", "imports_s"), stat("bridge_import", "imports_s")),
        ("whole import process, wall (s)", stat("floor_import", "wall_s"), stat("bridge_import", "wall_s")),
        (
            "whole export process, wall (s; bridge imports first)",
            stat("floor_export", "wall_s"),
            stat("bridge_export", "wall_s"),
        ),
        (
            "whole import process, CPU time (s)",
            stat("floor_import", "process_cpu_s"),
            stat("bridge_import", "process_cpu_s"),
        ),
        (
            "whole export process, CPU time (s)",
            stat("floor_export", "process_cpu_s"),
            stat("bridge_export", "process_cpu_s"),
        ),
        (
            "convert_checkpoint.py import, whole process, CPU time (s; floor: read + write + fsync)",
            stat("floor_write_fsync", "process_cpu_s"),
            stat("cli_import", "process_cpu_s"),
        ),
        (
            "convert_checkpoint.py export, whole process, CPU time (s; floor: read + write + fsync)",
            stat("floor_write_fsync", "process_cpu_s"),
            stat("cli_export", "process_cpu_s"),
        ),
        (
            "  same, floor reading a source not in the page cache, as the export's is (s)",
            stat("floor_write_fsync_cold", "process_cpu_s"),
            stat("cli_export", "process_cpu_s"),
        ),
        (
            "convert_checkpoint.py import, whole process, wall (s)",
            stat("floor_write_fsync", "wall_s"),
            stat("cli_import", "wall_s"),
        ),
        (
            "convert_checkpoint.py export, whole process, wall (s)",
            stat("floor_write_fsync", "wall_s"),
            stat("cli_export", "wall_s"),
        ),
        (
            "  same, floor reading a source not in the page cache (s)",
            stat("floor_write_fsync_cold", "wall_s"),
            stat("cli_export", "wall_s"),
        ),
    ]
    print(f"\nmedian [min-max] of {repeats} fresh processes each (OMP_NUM_THREADS=1)\n")
    print("| work | floor | bridge | ratio of medians |")
    print("| --- | --- | --- | --- |")
    for name, floor, ours in rows:
        cell = "{:.2f} [{:.2f}-{:.2f}]"
        print(f"| {name} | {cell.format(*floor)} | {cell.format(*ours)} | {ours[0] / floor[0]:.2f}x |")


if __name__ == "__main__":
    main()
