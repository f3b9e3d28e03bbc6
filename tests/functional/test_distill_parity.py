"""Knowledge distillation equals transformers + torch (issue 48): bridge's finetune() of a tiny Llama
student with a 4-layer Llama teacher from its own Hugging Face folder, against the loss written in
workers/distill_parity.py with transformers' student and teacher and torch's kl_div on the same micro
batches, for 5 AdamW steps.

Two launches of one worker. 1 rank: the KD loss alone at temperature 2, and lm loss + 0.5 x KD over the
teacher's top 8 tokens, at TP=1. 2 ranks: both at TP=2 (each rank holds half the vocabulary: the
vocab-parallel log-softmax, top-k and KL must equal the full ones), the KD loss at PP=2 (the teacher's
pass through the pipeline schedule too) and at DP=2, and the KD loss at TP=2 with the teacher loaded from
its bridge checkpoint (imported at TP=1, resharded) instead of its Hugging Face folder.

Tolerances, fp32: the loss and the grad norm to 1e-5 relative (the issue's bound; the KL is of order 1 here
and its terms of order log V ~ 4 nats round to ~1e-6 absolute in fp32), the logged kd / lm loss to 1e-5
relative likewise, the learning rate exactly.
"""

from __future__ import annotations

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")

WORKER = REPO_ROOT / "tests/functional/workers/distill_parity.py"
REL = 1e-5
ITERS = ["1", "2", "3", "4", "5"]
CASES = {
    "kd_tp1": "torch_kd",
    "mixed_topk_tp1": "torch_mixed_topk",
    "kd_tp2": "torch_kd",
    "mixed_topk_tp2": "torch_mixed_topk",
    "kd_pp2": "torch_kd",
    "kd_dp2": "torch_kd",
    "kd_tp2_teacher_ckpt": "torch_kd",  # the teacher from its imported bridge checkpoint, resharded
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("distill_parity"))
    out = assert_ok(torchrun(WORKER, 1, "ref", workdir, timeout=420))
    out += assert_ok(torchrun(WORKER, 2, "layouts", workdir, timeout=420))
    return {r["run"]: r for r in payloads(out, "run")}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


@pytest.mark.parametrize("reference", ["torch_kd", "torch_mixed_topk"])
def test_the_student_moves_toward_the_teacher(runs, reference):
    ref = runs[reference]
    kd = [ref["metrics"][it]["kd loss"] for it in ITERS]
    assert kd[0] > 0.5  # a teacher the student does not already match
    if reference == "torch_kd":
        assert kd[-1] < kd[0] * 0.95


@pytest.mark.parametrize("run", list(CASES))
def test_losses_and_grad_norms_equal_the_reference(runs, run):
    got, ref = runs[run], runs[CASES[run]]
    assert sorted(got["losses"]) == ITERS
    for it in ITERS:
        assert _rel(got["losses"][it], ref["losses"][it]) < REL, (run, it, got["losses"], ref["losses"])
        assert _rel(got["grad_norms"][it], ref["grad_norms"][it]) < REL, (run, it)
        assert got["learning_rates"][it] == pytest.approx(ref["learning_rates"][it], rel=1e-12)


@pytest.mark.parametrize("run", ["kd_tp1", "mixed_topk_tp1", "kd_tp2", "mixed_topk_tp2"])
def test_the_logged_kd_and_lm_losses_equal_the_reference(runs, run):
    got, ref = runs[run], runs[CASES[run]]
    for it in ITERS:
        for key in ("kd loss", "lm loss"):
            assert _rel(got["metrics"][it][key], ref["metrics"][it][key]) < REL, (run, it, key)
