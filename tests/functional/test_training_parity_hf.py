"""Training equals Hugging Face at every layout (issue 28): bridge's pretrain() / finetune() started from
an HF folder (`checkpoint.pretrained_checkpoint=<HF folder>`) against a plain transformers +
torch.optim.AdamW loop written in the worker from the definitions (Megatron's weight-decay groups,
clipping, linear warmup + cosine decay; HF's logits scored against Megatron's already shifted labels).

Two launches of one worker (workers/training_parity_hf.py). 1 rank: bridge at TP=1, recording the windows
it trains on, and the reference over exactly those windows, for a LlamaForCausalLM (384-token vocabulary),
a MixtralForCausalLM (4 experts, top-2, auxiliary loss off on both sides), a Qwen3_5ForCausalLM (a Gated
DeltaNet layer and a gated softmax-attention layer; also at TP=2), full SFT with answer-only loss
(the sft recipe with `model.calculate_per_token_loss=True`: the token mean over the step, as the reference
computes it; docs/finetuning.md gives the size of the difference without it) and LoRA on that SFT (the
peft recipe, rank 4 on linear_proj / linear_fc2, against peft's LoRA on o_proj / down_proj started from
bridge's initial A and B). 2 ranks: Llama at TP=2, TP=2+SP, PP=2, DP=2, CP=2, fsdp2 DP=2 and TP=2 with
the vocabulary padded (384 -> 512 rows), and Mixtral at EP=2, in sequence.

Full-batch steps (one global batch = 8 windows, token mean over all of them) so the order of the windows
cannot matter. Per iteration the loss must equal the reference's to 1e-5 relative, the grad norm (before
clipping) to 2e-6 (the 7 significant digits the log prints), and the learning rate exactly.
"""

from __future__ import annotations

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

pytest.importorskip("megatron.core")
pytest.importorskip("transformers")


WORKER = REPO_ROOT / "tests/functional/workers/training_parity_hf.py"
LOSS_REL = 1e-5
GRAD_NORM_REL = 2e-6
ITERS = ["1", "2", "3", "4", "5"]
LAYOUT_RUNS = [
    "tp1",
    "tp2",
    "tp2_sp",
    "pp2",
    "dp2",
    "cp2",
    "fsdp2",
    "tp2_padded",
    "mixtral_tp1",
    "mixtral_ep2",
    "qwen35_tp1",
    "qwen35_tp2",
    "sft_tp1",
    "lora_tp1",
]
CLIP_FLOOR = 1.0  # every step's norm is above optimizer.clip_grad: clipping is active in every step


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("training_parity_hf"))
    out = assert_ok(torchrun(WORKER, 1, "ref", workdir, timeout=420))
    out += assert_ok(torchrun(WORKER, 2, "layouts", workdir, timeout=560))
    results = {r["run"]: r for r in payloads(out, "run")}
    (results["sft_answers"],) = payloads(out, "sft_answers")
    return results


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _reference(runs, run: str) -> dict:
    if run.startswith("lora_"):
        return runs["peft_lora"]
    family = run.split("_")[0] if run.startswith(("mixtral_", "sft_", "qwen35_")) else "llama"
    return runs[f"transformers_{family}"]


def test_sft_loss_falls_on_the_answers_only(runs):
    # the labels bridge puts loss on in the first step's 8 windows are the 8 records' answers (+ eos), as
    # transformers' tokenizer writes them: no prompt token, no padding
    answers = runs["sft_answers"]
    assert sorted(answers["masked"]) == sorted(answers["answers"])


@pytest.mark.parametrize("family", ["llama", "mixtral", "qwen35", "sft"])
def test_the_reference_trains(runs, family):
    ref = runs[f"transformers_{family}"]
    assert sorted(ref["losses"]) == ITERS
    # iteration 1 runs at the warmup's lr 0 (Megatron-Core's schedule starts there); then the loss falls
    assert ref["losses"]["5"] < ref["losses"]["2"] - 0.3
    assert all(ref["grad_norms"][it] > CLIP_FLOOR for it in ITERS)


def assert_run_equals_reference(run: str, got: dict, ref: dict, iters: list[str] = ITERS) -> None:
    """Per iteration: loss, grad norm and learning rate of bridge's run equal the reference's."""
    assert sorted(got["losses"]) == sorted(iters)
    for it in iters:
        assert _rel(got["losses"][it], ref["losses"][it]) < LOSS_REL, (run, it, got["losses"], ref["losses"])
        assert _rel(got["grad_norms"][it], ref["grad_norms"][it]) < GRAD_NORM_REL, (
            run,
            it,
            got["grad_norms"],
            ref["grad_norms"],
        )
        assert got["learning_rates"][it] == pytest.approx(ref["learning_rates"][it], rel=1e-12), (run, it)


@pytest.mark.parametrize("run", LAYOUT_RUNS)
def test_losses_grad_norms_and_learning_rates_equal_transformers(runs, run):
    ref, got = _reference(runs, run), runs[run]
    assert_run_equals_reference(run, got, ref)
