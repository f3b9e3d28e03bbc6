"""LoRA / DoRA on Mamba-2 mixers and Gated DeltaNet: what the TP=1 test (tests/unit/test_peft_hybrid.py) and the
TP=2 launch (tests/functional/workers/peft_parallel.py, checked in tests/functional/test_peft_parallel.py) share:
the targets, non-zero adapters, and the comparison with Hugging Face peft."""

from __future__ import annotations

import torch

from tests.functional.workers.convert_models import VOCAB, hf_logits, megatron_logits, read_tensors, tokens
from tests.tolerances import logits_tolerance, merged_weight_tolerance

ALL = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj"]
# family -> (targets, the HF modules peft adapts)
CASES = {
    # Mamba-2 layers (in_proj: one HF Linear of [z; x; B; C; dt]), attention without RoPE, squared-ReLU MLP;
    # no out_proj: peft refuses it on nemotron_h (tests/unit/test_peft_hybrid.py checks the refusal)
    "nemotron_h": (ALL[:-1], ["in_proj", "q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]),
    # Gated DeltaNet (in_proj: HF's in_proj_qkv / _z / _b / _a) and gated softmax attention, a gated MLP
    "qwen3_5": (
        ALL,
        [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
            "in_proj_qkv",
            "in_proj_z",
            "in_proj_b",
            "in_proj_a",
            "out_proj",
        ],
    ),  # fmt: skip
}


def randomize(chunks, seed: int = 0) -> None:
    """Non-zero adapters (B starts at zero): each adapter's full A [r, in] and B [out, r] are drawn from a
    generator seeded by its layer and target, and this rank keeps its shard (column bases: A whole, B's
    rows; row bases: A's columns, B whole), so what the adapter needs replicated is equal on every TP rank.
    DoRA's m: scaled by a draw per local row."""
    from bridge.peft import adapted_linears

    with torch.no_grad():
        for item in adapted_linears(chunks):
            a = item.adapter
            gen = torch.Generator().manual_seed(seed * 1000 + a.layer_number * 10 + len(a.target))
            full_a = 0.2 * torch.randn(a.dim, a.in_features, generator=gen)
            full_b = 0.2 * torch.randn(a.out_features, a.dim, generator=gen)
            if a.kind == "row":
                full_a = full_a.chunk(a.tp_size, dim=1)[a.tp_rank]
            else:
                full_b = full_b.chunk(a.tp_size, dim=0)[a.tp_rank]
            a.linear_in.weight.copy_(full_a)
            a.linear_out.weight.copy_(full_b)
            if a.scheme == "dora":
                m = a.weight_magnitude
                m.mul_(1 + 0.2 * torch.randn(m.shape, generator=gen))


def check_against_peft(source, adapter_dir, merged_dir, ours: torch.Tensor, label: str) -> None:
    """peft's model of `adapter_dir` on `source` gives `ours`, the merged folder gives peft's logits and
    weights (merge_and_unload), and the adapters change the logits."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    toks = tokens()
    hf = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager").eval()
    base = hf_logits(hf, toks)
    peft_model = PeftModel.from_pretrained(hf, adapter_dir).eval()
    ref = hf_logits(peft_model, toks)
    bound = logits_tolerance(ref, peft_model.config)
    diff = (ours - ref).abs().max().item()
    print(f"\n{label}: max |bridge - peft| logits = {diff:.2e} (bound {bound:.2e})")
    assert diff <= bound, (label, diff, bound)
    assert (ref - base).abs().max() > 1e-2  # the adapters matter
    merged_ref = peft_model.merge_and_unload().state_dict()
    merged = read_tensors(merged_dir)
    for k, t in merged.items():  # checkpoint names (`backbone.`) as transformers reads them (`model.`)
        want = merged_ref[k if k in merged_ref else k.replace("backbone.", "model.", 1)]
        assert (t - want).abs().max().item() <= merged_weight_tolerance(want, rank=4), k
    reloaded = AutoModelForCausalLM.from_pretrained(merged_dir, attn_implementation="eager").eval()
    reload_diff = (hf_logits(reloaded, toks) - ref).abs().max().item()
    print(f"{label}: max |merged export - peft| logits = {reload_diff:.2e}")
    assert reload_diff <= logits_tolerance(ref, reloaded.config), reload_diff


# ---- the TP=2 launch (tests/functional/workers/peft_parallel.py calls tp2_phases on its 2 ranks) ----------

RUNS = (("nemotron_h", "lora"), ("nemotron_h", "dora"), ("qwen3_5", "lora"), ("qwen3_5", "dora"))
RESHARDED = ("nemotron_h", "qwen3_5")  # their lora run's adapters: saved at TP=2, loaded at TP=1


def build(folder, targets: list[str], scheme: str, seed: int, **layout):
    import functools

    from bridge import AutoBridge
    from bridge.config.sections import PeftConfig
    from bridge.peft import apply_peft

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    for k, v in layout.items():
        setattr(provider, k, v)
    peft = PeftConfig(scheme=scheme, dim=4, alpha=8.0, target_modules=targets)
    provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=seed))
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    return bridge, [c.eval() for c in chunks]


def _adapters(bridge, chunks) -> dict[str, torch.Tensor]:
    from bridge.conversion.hf_adapter import export_adapter_tensors

    return {n: t.detach().clone() for n, t in export_adapter_tensors(chunks, bridge.family, VOCAB, dst=0)}


def tp2_phases(root, out) -> None:
    """Each run at TP=2: the logits, the adapter folder and the merged folder to out/hybrid_<family>_<scheme>;
    the lora runs' adapters also to torch_dist, loaded into a TP=1 model (2 data-parallel replicas) with
    other initial adapters: out/hybrid_<family>_load.pt holds the TP=2 adapters and the loaded ones."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    from bridge.checkpoint.save_state import model_sharded_state_dict
    from bridge.parallel.teardown import release_model_parallel_groups

    for family, scheme in RUNS:
        folder, targets, name = root / f"hf_{family}", CASES[family][0], f"hybrid_{family}_{scheme}"
        layout = dict(tensor_model_parallel_size=2, parallel_output=False)  # logits gathered over TP
        bridge, chunks = build(folder, targets, scheme, seed=11, **layout)
        randomize(chunks)
        logits = megatron_logits(chunks[0], tokens())
        bridge.save_hf_adapter(chunks, out / name / "adapter")
        bridge.save_hf_pretrained(chunks, out / name / "merged", progress=False)
        saved = _adapters(bridge, chunks)
        ckpt = out / f"ckpt_{family}"
        if scheme == "lora" and family in RESHARDED:
            if dist.get_rank() == 0:
                ckpt.mkdir(parents=True)
            dist.barrier()
            dist_checkpointing.save(model_sharded_state_dict(chunks, "adapters"), str(ckpt))
        if dist.get_rank() == 0:
            torch.save({"logits": logits}, out / f"{name}.pt")
        release_model_parallel_groups()
        if scheme == "lora" and family in RESHARDED:
            bridge, chunks = build(folder, targets, scheme, seed=99)
            before = _adapters(bridge, chunks)
            loaded = dist_checkpointing.load(model_sharded_state_dict(chunks, "adapters"), str(ckpt))
            result = chunks[0].load_state_dict(loaded["model"], strict=False)
            assert not result.unexpected_keys, result.unexpected_keys
            after = _adapters(bridge, chunks)
            if dist.get_rank() == 0:
                torch.save(
                    {"saved": saved, "before": before, "after": after}, out / f"hybrid_{family}_load.pt"
                )
            release_model_parallel_groups()
        if dist.get_rank() == 0:
            print(f"RESULT {name}", flush=True)
