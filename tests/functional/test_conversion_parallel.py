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
    logit_tolerance,
    read_tensors,
    refused_by_installed_release,
    save_hf_model,
    tokens,
)

WORKER = Path(__file__).parent / "workers" / "convert_parallel.py"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_hf):
    root = tmp_path_factory.mktemp("convert")
    (root / "refs").mkdir()
    tolerances = {}
    for family in FAMILIES:  # the session's folders (tests/conftest.py), linked where the worker reads them
        model = tiny_hf.link(family, root / "hf" / family)
        torch.save(hf_logits(model, tokens()), root / "refs" / f"{family}.pt")
        tolerances[family] = logit_tolerance(family, model, tokens())
    (root / "refs" / "tolerances.json").write_text(json.dumps(tolerances))
    save_hf_model("llama", root / "hf" / "llama_bf16", dtype=torch.bfloat16, seed=3)
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


def _check_round_trips(root: Path, results: dict[tuple[str, str], str], phase: str) -> None:
    """HF-equal logits at `phase`'s layout, and its export holds the source's bytes, for every family."""
    for family in FAMILIES:
        if (phase == "ep2" and family not in MOE_FAMILIES) or refused_by_installed_release(family):
            continue
        tolerance = json.loads((root / "refs" / "tolerances.json").read_text())[family]
        assert float(results[(phase, family)]) <= tolerance, (phase, family, results.get((phase, family)))
        diff = bit_identical(read_tensors(root / "hf" / family), read_tensors(root / "out" / phase / family))
        assert diff is None, (phase, family, diff)


def test_tp2_round_trip_and_torch_dist_import(root, tp2_results):
    _check_round_trips(root, tp2_results, "tp2")


def test_pp2_ep2_and_torch_dist_export_round_trip(root, tp2_results):
    # a second launch (each well under 30 s on an idle machine) exports what the first imported
    results = _results(
        assert_ok(torchrun(WORKER, 2, str(root), "pp2", "ep2", "ckpt_export_pp2", "pp2_uneven", timeout=600))
    )
    for phase in ("pp2", "ep2"):
        _check_round_trips(root, results, phase)
    for name in UNEVEN:  # uneven stages: HF-equal logits, the source's bytes back
        assert float(results[("pp2_uneven", name)]) <= 1e-5, (name, results.get(("pp2_uneven", name)))
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
