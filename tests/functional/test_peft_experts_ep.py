"""LoRA on MoE routed experts under expert parallelism (EP=2 on 2 gloo ranks) against the same run without
it (EP=1, each rank every expert): the same initial adapters, losses, adapter gradients (expert adapters
reduced over the expert-data-parallel group, not across expert ranks) and exports over 3 SGD steps; the EP=2
adapter folder loads in peft onto transformers' Qwen3-MoE with the EP=2 merged export's logits; the EP=2
torch_dist adapter checkpoint loads at EP=1. One launch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.functional.launch import assert_ok, torchrun
from tests.functional.workers.convert_models import hf_logits, read_tensors, save_hf_model, tokens

WORKER = Path(__file__).parent / "workers" / "peft_experts_ep.py"
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("experts")
    save_hf_model("qwen3_moe", root / "hf", with_tokenizer=False, mlp_only_layers=[])  # every layer MoE
    assert_ok(torchrun(WORKER, 2, str(root), timeout=600))
    return root


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:4]
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def test_expert_parallel_training_and_exports_equal_ep1(root):
    ref, got = torch.load(root / "out" / "ep1.pt"), torch.load(root / "out" / "ep2.pt")
    experts = [k for k in ref["initial"] if ".experts." in k]
    assert len(experts) == 2 * 4 * 3 * 2  # layers x experts x (gate, up, down) x (A, B)
    assert _max_diff(ref["initial"], got["initial"]) == 0.0  # per-expert seeds: the layout does not matter
    assert abs(ref["losses"][-1] - ref["losses"][0]) > 1e-3, ref["losses"]
    # fp32, 2 layers, the same tokens routed to the same experts; only the reduction order differs
    assert max(abs(a - b) for a, b in zip(ref["losses"], got["losses"], strict=True)) <= 1e-6
    for step in range(len(ref["grads"])):
        assert _max_diff(ref["grads"][step], got["grads"][step]) <= 1e-6, step
    assert all(ref["grads"][-1][k].abs().max() > 0 for k in experts)  # every expert adapter learns
    assert _max_diff(ref["final"], got["final"]) <= 1e-6
    assert _max_diff(read_tensors(root / "out/ep1/adapter"), read_tensors(root / "out/ep2/adapter")) <= 1e-6
    assert _max_diff(read_tensors(root / "out/ep1/merged"), read_tensors(root / "out/ep2/merged")) <= 1e-6


def test_expert_parallel_adapter_loads_in_peft_and_its_checkpoint_at_ep1(root):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    toks = tokens()
    base = AutoModelForCausalLM.from_pretrained(root / "hf", attn_implementation="eager").eval()
    adapted = PeftModel.from_pretrained(base, root / "out/ep2/adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(root / "out/ep2/merged", attn_implementation="eager").eval()
    ref = hf_logits(merged, toks)
    assert (hf_logits(adapted, toks) - ref).abs().max().item() <= 1e-5  # fp32, as the TP=1 unit test
    assert (ref - hf_logits(AutoModelForCausalLM.from_pretrained(root / "hf"), toks)).abs().max() > 1e-3
    loaded = torch.load(root / "out" / "load_ep1.pt")["after"]
    assert _max_diff(loaded, torch.load(root / "out" / "ep2.pt")["final"]) == 0.0
