"""Worker for tests/functional/test_conversion_parallel.py (torchrun, 2 gloo ranks).

    convert_parallel.py ROOT PHASE [PHASE ...]

ROOT holds hf/<family>/ (save_pretrained folders) and refs/<family>.pt (HF logits for
convert_models.tokens()). Each phase sets up one layout, then per family: import (to_megatron_provider
+ provide_distributed_model), compare logits with HF, export with save_hf_pretrained into
ROOT/out/<phase>/<family>. Prints `RESULT <phase> <family> <max abs diff> (at <seconds since start>)` on rank 0.

Phases: tp2 (TP=2; MoE with sequence parallel), pp2 (PP=2, 1 layer per stage), ep2 (EP=2, MoE
families; also checks export_hf_weights on every rank), ckpt_import_tp2 / ckpt_export_pp2
(scripts/conversion/convert_checkpoint.py import --tp 2, then export --pp 2, of ROOT/hf/llama_bf16).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

START = time.perf_counter()

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.functional.workers.convert_models import (  # noqa: E402
    FAMILIES,
    VOCAB,
    megatron_logits,
    refused_by_installed_release,  # noqa: E402
    tokens,
)
from tests.functional.workers.convert_models import MOE_FAMILIES as MOE  # noqa: E402


def check(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def provider_for(folder: Path, load_weights: bool = True, **fields):
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=load_weights)
    for k, v in fields.items():
        setattr(provider, k, v)
    return bridge, provider


def layout_fields(phase: str, family: str) -> dict:
    if phase == "tp2":
        return dict(tensor_model_parallel_size=2, sequence_parallel=family in MOE, parallel_output=False)
    if phase == "pp2":
        return dict(pipeline_model_parallel_size=2)
    if phase == "ep2":
        return dict(expert_model_parallel_size=2)
    raise ValueError(phase)


def pipeline_logits(chunk, toks: torch.Tensor) -> torch.Tensor | None:
    """Forward through 2 pipeline stages by hand: stage 0 sends its hidden states to stage 1."""
    from megatron.core import parallel_state as ps

    from bridge.parallel.wrappers import unwrap

    model = unwrap(chunk)
    pos = torch.arange(toks.shape[1]).unsqueeze(0).expand_as(toks)
    hidden_shape = (toks.shape[1], toks.shape[0], model.config.hidden_size)
    with torch.no_grad():
        if ps.is_pipeline_first_stage():
            hidden = model(toks, pos, attention_mask=None)
            dist.send(hidden.contiguous(), dst=ps.get_pipeline_model_parallel_next_rank())
            return None
        hidden = torch.empty(hidden_shape, dtype=torch.float32)
        dist.recv(hidden, src=ps.get_pipeline_model_parallel_prev_rank())
        model.set_input_tensor(hidden)
        return model(toks, pos, attention_mask=None)[..., :VOCAB].float()


def end_layout() -> None:
    # Megatron-Core's groups go; the default gloo group stays for the next layout (re-creating it
    # on torchrun's rendezvous is not reliable).
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()


def run_family(root: Path, phase: str, family: str) -> None:
    bridge, provider = provider_for(root / "hf" / family, **layout_fields(phase, family))
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    toks = tokens()
    logits = pipeline_logits(chunks[0], toks) if phase == "pp2" else megatron_logits(chunks[0], toks)
    ref = torch.load(root / "refs" / f"{family}.pt")
    diff = torch.tensor(-1.0 if logits is None else (logits - ref).abs().max().item())
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    out = root / "out" / phase / family
    bridge.save_hf_pretrained(chunks, out, progress=False)
    if phase == "ep2":
        check_streamed_export(bridge, chunks, root / "hf" / family)
    if dist.get_rank() == 0:
        print(
            f"RESULT {phase} {family} {diff.item():.3e} (at {time.perf_counter() - START:.1f} s)", flush=True
        )


def check_streamed_export(bridge, chunks, source: Path) -> None:
    # export_hf_weights yields every tensor, bit-identical, on every rank (experts live on one rank each).
    from tests.functional.workers.convert_models import read_tensors

    expected = read_tensors(source)
    seen = set()
    for name, tensor in bridge.export_hf_weights(chunks):
        check(torch.equal(tensor.view(torch.uint8), expected[name].view(torch.uint8)), f"{name} differs")
        seen.add(name)
    check(seen == set(expected), f"rank {dist.get_rank()}: streamed {len(seen)} of {len(expected)} tensors")


def cli_main():
    """scripts/conversion/convert_checkpoint.py's main(), run inside this torchrun worker."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "scripts" / "conversion" / "convert_checkpoint.py"
    spec = importlib.util.spec_from_file_location("convert_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def ckpt_import(root: Path) -> None:
    args = ["import", "--hf-path", str(root / "hf" / "llama_bf16"), "--megatron-path", str(root / "megatron")]
    check(cli_main()(args + ["--tp", "2"]) == 0, "convert_checkpoint.py import failed")
    if dist.get_rank() == 0:
        print(f"RESULT ckpt_import_tp2 llama_bf16 done (at {time.perf_counter() - START:.1f} s)", flush=True)


def ckpt_export(root: Path) -> None:
    out = root / "out" / "ckpt_export_pp2"
    args = ["export", "--megatron-path", str(root / "megatron"), "--hf-path", str(out), "--pp", "2"]
    check(cli_main()(args) == 0, "convert_checkpoint.py export failed")
    if dist.get_rank() == 0:
        print(f"RESULT ckpt_export_pp2 llama_bf16 done (at {time.perf_counter() - START:.1f} s)", flush=True)


def main() -> None:
    root, phases = Path(sys.argv[1]), sys.argv[2:]
    dist.init_process_group("gloo")
    for phase in phases:
        if phase == "ckpt_import_tp2":
            ckpt_import(root)
        elif phase == "ckpt_export_pp2":
            ckpt_export(root)
        else:
            for family in FAMILIES:
                if refused_by_installed_release(family):  # its single-process test checks the refusal
                    continue
                if phase != "ep2" or family in MOE:
                    run_family(root, phase, family)
        end_layout()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
