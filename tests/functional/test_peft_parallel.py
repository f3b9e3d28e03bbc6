"""PEFT under TP=2 (with and without sequence parallelism) and PP=2 on 2 gloo ranks: LoRA and DoRA
give the TP=1 losses and adapter gradients over 3 SGD steps, the same HF adapter / merged exports, and
torch_dist adapter checkpoints load at another layout. In the same launch: adapters on Mamba-2 mixers and
Gated DeltaNet (Nemotron-H, Qwen3.5) at TP=2 against peft, and their checkpoint loaded at TP=1; adapters on
multi-latent attention (a tiny DeepSeek-V3) at TP=2 + SP against TP=1, the TP=2 adapter folder in peft."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.functional.launch import assert_ok, torchrun
from tests.functional.workers.convert_models import read_tensors
from tests.functional.workers.peft_hybrid import CASES, RESHARDED, RUNS, check_against_peft

WORKER = Path(__file__).parent / "workers" / "peft_parallel.py"
LAYOUTS = ("tp2", "tp2_sp", "pp2")
# the HF modules of the MLA adapters: q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_hf):
    root = tmp_path_factory.mktemp("peft")
    tiny_hf.link("llama", root / "hf")  # the session's folder (tests/conftest.py)
    for family in CASES:
        tiny_hf.link(family, root / f"hf_{family}")
    tiny_hf.link("deepseek_v3", root / "hf_mla")
    assert_ok(torchrun(WORKER, 2, str(root), timeout=300))
    return root


def _record(root: Path, name: str) -> dict:
    return torch.load(root / "out" / f"{name}.pt")


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:4]
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["lora", "dora"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_reproduces_tp1(root, layout, scheme):
    ref, got = _record(root, f"tp1_{scheme}"), _record(root, f"{layout}_{scheme}")
    # initialisation does not depend on the layout (DoRA's m = ||W||_row: a row base sums over TP ranks)
    lora_ab = {k for k in ref["initial"] if "magnitude" not in k}
    assert max((ref["initial"][k] - got["initial"][k]).abs().max().item() for k in lora_ab) == 0.0
    assert _max_diff(ref["initial"], got["initial"]) <= 1e-6
    n_tensors = 2 * (3 + 1 + 2 + 1) * (3 if scheme == "dora" else 2)  # layers x HF modules x (A, B, m)
    assert len(ref["initial"]) == n_tensors
    # the steps change the loss, and every adapter tensor gets a gradient by the last step
    assert abs(ref["losses"][-1] - ref["losses"][0]) > 1e-3, ref["losses"]
    assert all(g.abs().max() > 0 for g in ref["grads"][-1].values())
    for step, (want, have) in enumerate(zip(ref["losses"], got["losses"], strict=True)):
        assert abs(have - want) <= 1e-5, (layout, scheme, step, have, want)
    for step in range(len(ref["grads"])):
        assert _max_diff(ref["grads"][step], got["grads"][step]) <= 1e-5, (layout, scheme, step)
    assert _max_diff(ref["final"], got["final"]) <= 1e-5
    # the exports gathered at this layout hold what TP=1 writes
    for folder in ("adapter", "merged"):
        a = read_tensors(root / "out" / f"tp1_{scheme}" / folder)
        b = read_tensors(root / "out" / f"{layout}_{scheme}" / folder)
        assert _max_diff(a, b) <= 1e-5, folder
    assert _max_diff(got["final"], read_tensors(root / "out" / f"{layout}_{scheme}" / "adapter")) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("phase,source", [("load_tp1", "tp2_sp_dora"), ("load_tp2", "pp2_lora")])
def test_adapter_checkpoint_loads_at_another_layout(root, phase, source):
    saved, loaded = _record(root, source)["final"], _record(root, phase)
    assert _max_diff(loaded["before"], saved) > 1e-2  # a differently seeded model before loading
    assert _max_diff(loaded["after"], saved) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("family,scheme", RUNS)
def test_hybrid_adapters_at_tp2_match_peft(root, tiny_hf, family, scheme):
    """TP=2 splits the Mamba heads and groups (in_proj's [z; x; B; C; dt] blocks each over TP) and the Gated
    DeltaNet heads: the gathered adapter folder and merged export give bridge's TP=2 logits through peft."""
    name = f"hybrid_{family}_{scheme}"
    ours = _record(root, name)["logits"]
    source, _ = tiny_hf.get(family)
    check_against_peft(source, root / "out" / name / "adapter", root / "out" / name / "merged", ours, name)


@pytest.mark.slow
@pytest.mark.parametrize("family", RESHARDED)
def test_hybrid_adapter_checkpoint_from_tp2_loads_at_tp1(root, family):
    """in_proj's B is stored by blocks (as Megatron-Core stores in_proj), so TP=1 reads TP=2's adapters."""
    record = _record(root, f"hybrid_{family}_load")
    assert _max_diff(record["before"], record["saved"]) > 1e-2  # other adapters before loading
    assert _max_diff(record["after"], record["saved"]) == 0.0


@pytest.mark.parametrize("scheme", ["lora", "dora"])
def test_mla_adapters_at_tp2_sp_reproduce_tp1_and_load_in_peft(root, tiny_hf, scheme):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.functional.workers.convert_models import hf_logits, tokens
    from tests.tolerances import logits_tolerance

    ref, got = _record(root, f"mla_tp1_{scheme}"), _record(root, f"mla_tp2_sp_{scheme}")
    assert _max_diff(ref["initial"], got["initial"]) <= 1e-6  # layout-independent start (DoRA's m: a norm)
    assert len(ref["initial"]) == 2 * 5 * (3 if scheme == "dora" else 2)  # layers x HF modules x (A, B, m)
    assert abs(ref["losses"][-1] - ref["losses"][0]) > 1e-3, ref["losses"]
    assert all(g.abs().max() > 0 for g in ref["grads"][-1].values())  # every adapter learns
    # fp32, 2 layers: TP=2 sums the row-parallel products and the MoE's expert outputs in another order;
    # the same bounds as the dense layouts above
    for step, (want, have) in enumerate(zip(ref["losses"], got["losses"], strict=True)):
        assert abs(have - want) <= 1e-5, (scheme, step, have, want)
    for step in range(len(ref["grads"])):
        assert _max_diff(ref["grads"][step], got["grads"][step]) <= 1e-5, (scheme, step)
    assert _max_diff(ref["final"], got["final"]) <= 1e-5
    tp2 = root / "out" / f"mla_tp2_sp_{scheme}"
    assert _max_diff(got["final"], read_tensors(tp2 / "adapter")) == 0.0
    # peft's model with the TP=2 adapter folder = transformers' model of the TP=2 merged export = bridge at TP=2
    folder, _ = tiny_hf.get("deepseek_v3")
    base = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    peft_logits = hf_logits(PeftModel.from_pretrained(base, tp2 / "adapter").eval(), tokens())
    merged = AutoModelForCausalLM.from_pretrained(tp2 / "merged", attn_implementation="eager").eval()
    bound = logits_tolerance(peft_logits, merged.config)
    assert (hf_logits(merged, tokens()) - peft_logits).abs().max().item() <= bound
    assert (got["logits"] - peft_logits).abs().max().item() <= bound
    assert (ref["logits"] - peft_logits).abs().max().item() <= bound
    plain = hf_logits(AutoModelForCausalLM.from_pretrained(folder), tokens())
    assert (peft_logits - plain).abs().max().item() > 1e-2  # the trained adapters matter
