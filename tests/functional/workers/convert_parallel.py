"""Worker for tests/functional/test_conversion_parallel.py (torchrun, 2 gloo ranks).

    convert_parallel.py ROOT PHASE [PHASE ...]

ROOT holds hf/<family>/ (save_pretrained folders) and refs/<family>.pt (HF logits for
convert_models.tokens()). Each phase sets up one layout, then per family: import (to_megatron_provider
+ provide_distributed_model), compare logits with HF, export with save_hf_pretrained into
ROOT/out/<phase>/<family>. Prints `RESULT <phase> <family> <max abs diff> (at <seconds since start>)` on rank 0.

Phases: tp2 (TP=2; MoE, OLMo 2 and Gemma 2 with sequence parallel; OLMo 2 / Gemma 2 norm gradients
checked against HF's), pp2 (PP=2, 1 layer per stage), ep2 (EP=2, MoE
families; also checks export_hf_weights on every rank), pp2_uneven (PP=2 on 3-layer models, UNEVEN: Megatron-Core's
first-stage count and a layout string), ckpt_import_tp2 / ckpt_export_pp2
(scripts/conversion/convert_checkpoint.py import --tp 2, then export --pp 2, of ROOT/hf/llama_bf16),
ckpt_moe_tp2 (every MoE family: convert_checkpoint.py import, then export --tp 2), mtp (ROOT/hf/<family>_mtp,
DeepSeek-V3, GLM-4.5, GLM-4.7-Flash and Qwen3-Next with one multi-token-prediction layer: imported into
Megatron-Core's MTP block at TP=2 with sequence parallelism and at PP=2, where the MTP layer lives on the last
stage, and exported into ROOT/out/mtp_tp2|mtp_pp2/<family>), mtp_train (DeepSeek-V3's MTP folder trained 3 steps at TP=1 (DP=2), TP=2
with sequence parallelism and PP=2: each step's lm loss and mtp_1 loss).
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
    UNEVEN,
    VOCAB,
    megatron_logits,
    refused_by_installed_release,  # noqa: E402
    tokens,
)
from tests.functional.workers.convert_models import MOE_FAMILIES as MOE  # noqa: E402
from tests.functional.workers.mtp_checkpoint import MTP_FAMILIES, OWN_LAYOUT  # noqa: E402


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


# TP=2 with sequence parallelism: the MoE families, those whose norms follow a row-parallel linear, and
# those with LayerNorm biases or biases added after a row-parallel linear (grads per sequence slice).
# (granite: its branch-output multipliers act on the sequence-parallel slices)
SEQUENCE_PARALLEL = (
    *MOE,
    "olmo2",
    "gemma2",
    "gemma3",
    "olmo3",
    "exaone4",
    "granite",
    "glm4",
    "nemotron",
    "starcoder2",
)
# TP=2 gradients checked against HF's: projection-wide q/k norms (a TP all-reduce in forward and backward)
# and the norms after the branches (under sequence parallelism).
GRADIENT_CHECKS = {
    "olmo2": {
        "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", True),
        "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", True),
        "self_attention.linear_proj.post_layernorm.weight": ("post_attention_layernorm.weight", False),
        "mlp.linear_fc2.post_layernorm.weight": ("post_feedforward_layernorm.weight", False),
    },
    "gemma2": {
        "self_attention.linear_proj.post_layernorm.weight": ("post_attention_layernorm.weight", False),
        "mlp.linear_fc2.post_layernorm.weight": ("post_feedforward_layernorm.weight", False),
    },
    "glm4": {
        "self_attention.linear_proj.post_layernorm.weight": ("post_self_attn_layernorm.weight", False),
        "mlp.linear_fc2.post_layernorm.weight": ("post_mlp_layernorm.weight", False),
    },
    "nemotron": {
        "input_layernorm.bias": ("input_layernorm.bias", False),
        "pre_mlp_layernorm.weight": ("post_attention_layernorm.weight", False),
    },
    "starcoder2": {
        "input_layernorm.bias": ("input_layernorm.bias", False),
        "self_attention.linear_proj.bias": ("self_attn.o_proj.bias", False),
        "mlp.linear_fc1.bias": ("mlp.c_fc.bias", True),
        "mlp.linear_fc2.bias": ("mlp.c_proj.bias", False),
    },
    # per-head q/k norms: each rank's heads give part of the gradient (summed over TP, as finalize does)
    "gemma3": {
        "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", False),
        "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", False),
        "self_attention.linear_proj.post_layernorm.weight": ("post_attention_layernorm.weight", False),
    },
    "exaone4": {
        "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", False),
        "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", False),
        "mlp.linear_fc2.post_layernorm.weight": ("post_feedforward_layernorm.weight", False),
    },
}
GRADIENT_CHECKS["olmo3"] = GRADIENT_CHECKS["olmo2"]  # OLMo 2's norms, with windows and two RoPEs


def layout_fields(phase: str, family: str) -> dict:
    if phase == "tp2":
        return dict(
            tensor_model_parallel_size=2, sequence_parallel=family in SEQUENCE_PARALLEL, parallel_output=False
        )
    if phase == "pp2":
        return dict(pipeline_model_parallel_size=2)
    if phase == "pp2_uneven":
        return dict(pipeline_model_parallel_size=2, **UNEVEN[family])
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
    from bridge.parallel.teardown import release_model_parallel_groups

    release_model_parallel_groups()


def run_family(root: Path, phase: str, family: str) -> None:
    bridge, provider = provider_for(root / "hf" / family, **layout_fields(phase, family))
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    toks = tokens()
    logits = pipeline_logits(chunks[0], toks) if phase.startswith("pp2") else megatron_logits(chunks[0], toks)
    ref = torch.load(root / "refs" / f"{family}.pt")
    diff = torch.tensor(-1.0 if logits is None else (logits - ref).abs().max().item())
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    if phase == "tp2" and family in GRADIENT_CHECKS:
        check_gradients(chunks[0], root / "hf" / family, GRADIENT_CHECKS[family])
    out = root / "out" / phase / family
    bridge.save_hf_pretrained(chunks, out, progress=False)
    if phase == "ep2":
        check_streamed_export(bridge, chunks, root / "hf" / family)
    if dist.get_rank() == 0:
        print(
            f"RESULT {phase} {family} {diff.item():.3e} (at {time.perf_counter() - START:.1f} s)", flush=True
        )


def check_gradients(chunk, source: Path, names: dict) -> None:
    """Gradients of a weighted sum of the logits, at TP=2 (sequence parallel), equal HF's (1e-5 of
    the largest):
    per layer, each Megatron weight `name` against HF's `hf_name`, this rank's rows when `split`
    (TP-sharded by heads), else whole (sequence-parallel grads summed over TP first, as
    finalize_model_grads does)."""
    from megatron.core import parallel_state as ps
    from transformers import AutoModelForCausalLM

    from bridge.parallel.wrappers import unwrap

    toks = tokens()
    weights = torch.randn(*toks.shape, VOCAB, generator=torch.Generator().manual_seed(7))
    hf = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager")
    (hf(toks).logits.float() * weights).sum().backward()
    model = unwrap(chunk)
    pos = torch.arange(toks.shape[1]).unsqueeze(0).expand_as(toks)
    (model(toks, pos, attention_mask=None)[..., :VOCAB].float() * weights).sum().backward()
    rank, tp = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    hf_params = dict(hf.named_parameters())
    for layer in range(len(model.decoder.layers)):
        ours_layer = dict(model.decoder.layers[layer].named_parameters())
        for name, (hf_name, split) in names.items():
            grad = ours_layer[name].grad.clone()
            ref = hf_params[f"model.layers.{layer}.{hf_name}"].grad
            if split:
                n = ref.shape[0] // tp
                ref = ref[rank * n : (rank + 1) * n]
            else:
                dist.all_reduce(grad, group=ps.get_tensor_model_parallel_group())
            diff = ((grad - ref).abs().max() / ref.abs().max()).item()
            check(diff <= 1e-5, f"layer {layer} {name}: max |grad - HF| / max |HF| = {diff}")


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


def ckpt_moe_export_tp2(root: Path) -> None:
    """Every MoE family: convert_checkpoint.py import (TP=1), then export --tp 2, which Megatron-Core would
    refuse without sequence parallelism the converter has no flag for (issue 42)."""
    for family in MOE:
        if refused_by_installed_release(family):
            continue
        ckpt = root / "megatron_moe" / family
        args = ["import", "--hf-path", str(root / "hf" / family), "--megatron-path", str(ckpt)]
        check(cli_main()(args) == 0, f"{family}: convert_checkpoint.py import failed")
        end_layout()
        out = root / "out" / "ckpt_moe_tp2" / family
        args = ["export", "--megatron-path", str(ckpt), "--hf-path", str(out), "--tp", "2"]
        check(cli_main()(args) == 0, f"{family}: convert_checkpoint.py export --tp 2 failed")
        end_layout()
        if dist.get_rank() == 0:
            print(f"RESULT ckpt_moe_tp2 {family} done (at {time.perf_counter() - START:.1f} s)", flush=True)


def run_mtp(root: Path) -> None:
    from bridge.parallel.wrappers import unwrap

    layouts = {
        "mtp_tp2": dict(tensor_model_parallel_size=2, sequence_parallel=True),
        "mtp_pp2": dict(pipeline_model_parallel_size=2),
    }
    for phase, fields in layouts.items():
        for family in MTP_FAMILIES:
            # Qwen3-Next's config.json counts no MTP layer: the run asks for the checkpoint's one
            own = {"mtp_num_layers": 1} if family in OWN_LAYOUT else {}
            bridge, provider = provider_for(root / "hf" / f"{family}_mtp", **fields, **own)
            chunks = provider.provide_distributed_model(wrap_with_ddp=False)
            model = unwrap(chunks[0])
            last = phase == "mtp_tp2" or dist.get_rank() == 1  # PP=2: the MTP layer is the last stage's
            check(provider.mtp_num_layers == 1, f"{family}: mtp_num_layers={provider.mtp_num_layers}")
            check((getattr(model, "mtp", None) is not None) == last, f"{family} {phase}: MTP block placement")
            bridge.save_hf_pretrained(chunks, root / "out" / phase / family, progress=False)
            end_layout()
            if dist.get_rank() == 0:
                print(f"RESULT {phase} {family} done (at {time.perf_counter() - START:.1f} s)", flush=True)


MTP_TRAIN_LAYOUTS = {
    "tp1": [],  # DP=2
    "tp2_sp": ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"],
    "pp2": ["model.pipeline_model_parallel_size=2"],
}


def run_mtp_train(root: Path) -> None:
    """DeepSeek-V3's tiny folder with its MTP layer trained 3 steps (model.mtp_num_layers=1) from the same
    weights at TP=1 (DP=2), TP=2 with sequence parallelism and PP=2, the same global batches: each step's
    `lm loss` and `mtp_1 loss` printed as a RESULT line (JSON)."""
    import json

    from bridge.config.compose import compose
    from bridge.config.run_plan import build_plan
    from bridge.training.pretrain import finetune
    from recipes import get_recipe
    from tests.functional.workers.train_common import SHORT_RUN

    run = [o for o in SHORT_RUN if not o.startswith("train.global_batch_size")]
    base = [
        *run, f"checkpoint.pretrained_checkpoint={root / 'hf' / 'deepseek_v3_mtp'}", "model.mtp_num_layers=1",
        "dataset.kind=mock", "dataset.packed_sequence_size=0", "tokenizer.tokenizer_type=NullTokenizer",
        "model.seq_length=32", "train.train_iters=3", "train.global_batch_size=4",
    ]  # fmt: skip
    for name, extra in MTP_TRAIN_LAYOUTS.items():
        cfg = compose(get_recipe("llama32_1b_sft_config")(), overrides=[*base, *extra])[0]
        result = finetune(build_plan(cfg, dist.get_world_size(), cuda=False))
        steps = {it: [result.losses[it], result.metrics[it]["mtp_1 loss"]] for it in sorted(result.losses)}
        end_layout()
        if dist.get_rank() == 0:
            line = json.dumps(steps, separators=(",", ":"))
            print(f"RESULT mtp_train {name} {line} (at {time.perf_counter() - START:.1f} s)", flush=True)


def main() -> None:
    root, phases = Path(sys.argv[1]), sys.argv[2:]
    dist.init_process_group("gloo")
    for phase in phases:
        if phase == "ckpt_import_tp2":
            ckpt_import(root)
        elif phase == "ckpt_export_pp2":
            ckpt_export(root)
        elif phase == "ckpt_moe_tp2":
            ckpt_moe_export_tp2(root)
        elif phase == "mtp":
            run_mtp(root)
        elif phase == "mtp_train":
            run_mtp_train(root)
        elif phase == "pp2_uneven":
            for name in UNEVEN:
                run_family(root, phase, name)
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
