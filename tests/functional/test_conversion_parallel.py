"""AutoBridge under TP=2, PP=2 (also uneven stages) and EP=2 (2 gloo ranks): HF-equal logits and bit-identical
exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.functional.launch import assert_ok, torchrun
from tests.functional.workers.convert_models import (
    FAMILIES,
    MOE_FAMILIES,
    UNEVEN,
    bit_identical,
    hf_logits,
    read_tensors,
    refused_by_installed_release,
    save_hf_model,
    tokens,
)
from tests.functional.workers.mtp_checkpoint import MTP_FAMILIES, save_mtp_folder
from tests.tolerances import logits_tolerance

WORKER = Path(__file__).parent / "workers" / "convert_parallel.py"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_hf):
    root = tmp_path_factory.mktemp("convert")
    (root / "refs").mkdir()
    for family in FAMILIES:  # the session's folders (tests/conftest.py), linked where the worker reads them
        model = tiny_hf.link(family, root / "hf" / family)
        torch.save(hf_logits(model, tokens()), root / "refs" / f"{family}.pt")
    save_hf_model("llama", root / "hf" / "llama_bf16", dtype=torch.bfloat16, seed=3)
    for family in MTP_FAMILIES:  # one multi-token-prediction layer, named as the published checkpoints
        save_mtp_folder(family, root / "hf" / f"{family}_mtp")
    for name in UNEVEN:  # 3 layers: PP=2 needs uneven stages
        model = save_hf_model(name.removesuffix("_3layers"), root / "hf" / name, seed=5, num_hidden_layers=3)
        torch.save(hf_logits(model, tokens()), root / "refs" / f"{name}.pt")
    return root


def _results(stdout: str) -> dict[tuple[str, str], str]:
    return {
        (m[1], m[2]): m[3] for m in re.finditer(r"^RESULT (\S+) (\S+) (\S+) \(at [\d.]+ s\)$", stdout, re.M)
    }


@pytest.fixture(scope="module")
def tp2_results(root):
    """The first launch: every family through TP=2 and back, and HF (bf16) -> torch_dist written at TP=2."""
    return _results(assert_ok(torchrun(WORKER, 2, str(root), "tp2", "ckpt_import_tp2", timeout=600)))


def _logits_bound(root: Path, family: str) -> float:
    """tests/tolerances.py's bound for the family's reference logits (the worker's refs/<family>.pt)."""
    config = json.loads((root / "hf" / family / "config.json").read_text())
    return logits_tolerance(torch.load(root / "refs" / f"{family}.pt"), config)


def _check_round_trips(root: Path, results: dict[tuple[str, str], str], phase: str) -> None:
    """HF-equal logits at `phase`'s layout, and its export holds the source's bytes, for every family."""
    for family in FAMILIES:
        if (phase == "ep2" and family not in MOE_FAMILIES) or refused_by_installed_release(family):
            continue
        bound = _logits_bound(root, family)
        assert float(results[(phase, family)]) <= bound, (phase, family, results.get((phase, family)), bound)
        diff = bit_identical(read_tensors(root / "hf" / family), read_tensors(root / "out" / phase / family))
        assert diff is None, (phase, family, diff)


def test_tp2_round_trip_and_torch_dist_import(root, tp2_results):
    _check_round_trips(root, tp2_results, "tp2")


@pytest.fixture(scope="module")
def pp2_results(root, tp2_results):
    """The second launch (each phase well under 30 s on an idle machine): it exports what the first
    imported, and trains DeepSeek-V3's MTP folder at three layouts (mtp_train)."""
    phases = ("pp2", "ep2", "ckpt_export_pp2", "pp2_uneven", "mtp", "mtp_train")
    return _results(assert_ok(torchrun(WORKER, 2, str(root), *phases, timeout=600)))


def test_pp2_ep2_and_torch_dist_export_round_trip(root, pp2_results):
    results = pp2_results
    for phase in ("mtp_tp2", "mtp_pp2"):  # MTP layers through TP=2 (SP) and PP=2 (last stage): the same bytes
        for family in MTP_FAMILIES:
            assert results[(phase, family)] == "done", (phase, family, results)
            diff = bit_identical(
                read_tensors(root / "hf" / f"{family}_mtp"), read_tensors(root / "out" / phase / family)
            )
            assert diff is None, (phase, family, diff)
    for phase in ("pp2", "ep2"):
        _check_round_trips(root, results, phase)
    for name in UNEVEN:  # uneven stages: HF-equal logits, the source's bytes back
        bound = _logits_bound(root, name)
        assert float(results[("pp2_uneven", name)]) <= bound, (name, results.get(("pp2_uneven", name)), bound)
        diff = bit_identical(
            read_tensors(root / "hf" / name), read_tensors(root / "out" / "pp2_uneven" / name)
        )
        assert diff is None, (name, diff)
    # HF (bf16) -> torch_dist written at TP=2 -> HF written at PP=2: the same bytes
    assert results[("ckpt_export_pp2", "llama_bf16")] == "done"
    exported = root / "out" / "ckpt_export_pp2"
    assert bit_identical(read_tensors(root / "hf" / "llama_bf16"), read_tensors(exported)) is None
    assert (exported / "config.json").read_bytes() == (
        root / "hf" / "llama_bf16" / "config.json"
    ).read_bytes()


def test_every_moe_family_exports_at_tp2(root):
    """convert_checkpoint.py export --tp 2 of each MoE family's checkpoint gives the source's bytes."""
    results = _results(assert_ok(torchrun(WORKER, 2, str(root), "ckpt_moe_tp2", timeout=600)))
    for family in MOE_FAMILIES:
        if refused_by_installed_release(family):
            continue
        assert results[("ckpt_moe_tp2", family)] == "done", (family, results)
        exported = root / "out" / "ckpt_moe_tp2" / family
        diff = bit_identical(read_tensors(root / "hf" / family), read_tensors(exported))
        assert diff is None, (family, diff)


def test_mtp_trains_equal_at_tp2_and_pp2(root, pp2_results):
    """DeepSeek-V3's tiny folder with model.mtp_num_layers=1, 3 steps from the same weights and batches:
    TP=2 with sequence parallelism and PP=2 (the MTP layer on the last stage) log the `lm loss` and
    `mtp_1 loss` of TP=1 (DP=2) at every step.

    Tolerance: each loss is a mean cross-entropy; cross-entropy moves at most twice as far as the logits
    (logsumexp and the target logit are 1-Lipschitz in the max norm), and the logits of two correct fp32
    layouts differ by at most tests/tolerances.py's bound, here over the main layers and the MTP layer
    (num_hidden_layers + 1 deep) at the reference logits' magnitude. The updates between steps differ by
    the learning rate times the gradients' relative rounding (Adam normalises each coordinate), which moves
    the next step's logits orders below that bound. A layout that averaged the MTP loss over the wrong
    group, dropped micro batches or mis-scaled it per pipeline schedule moves it by 1e-2 or more.

    The run keeps the SFT recipe's learning rate (5e-6, then 2.5e-6): at 3e-3 TP=2 leaves TP=1 by 2e-3 at
    step 3 with or without MTP: one backward's gradients first differ at the last layer's kv down
    projection, where Megatron-Core's local-spec multi-latent attention splits k_pos_emb out of a
    column-parallel output gathered over TP, whose backward keeps only this rank's heads' share (an open
    issue of the main model, not of MTP); PP=2 stays equal at 3e-3."""
    from transformers import AutoModelForCausalLM

    folder = root / "hf" / "deepseek_v3_mtp"
    config = json.loads((folder / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    deeper = {**config, "num_hidden_layers": config["num_hidden_layers"] + 1}
    bound = 2 * logits_tolerance(hf_logits(model, tokens()), deeper)
    runs = {name: json.loads(pp2_results[("mtp_train", name)]) for name in ("tp1", "tp2_sp", "pp2")}
    ref = runs["tp1"]
    assert sorted(ref, key=int) == ["1", "2", "3"], ref
    for name in ("tp2_sp", "pp2"):
        for it, (lm, mtp) in runs[name].items():
            assert abs(lm - ref[it][0]) <= bound, (name, it, lm, ref[it][0], bound)
            assert abs(mtp - ref[it][1]) <= bound, (name, it, mtp, ref[it][1], bound)
    # the MTP loss is its own quantity, not the LM loss again: a fresh layer predicts t_{i+2} worse
    assert all(abs(ref[it][1] - ref[it][0]) > 10 * bound for it in ref), ref
