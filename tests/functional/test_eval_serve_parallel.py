"""`bridge eval` and `bridge serve` at TP=2 and PP=2, and benchmarks during a TP=2 + sequence-parallel
training run (one launch of 2 gloo ranks) against references no one here wrote: lm-eval's `hf` backend on
the same HF model (per-sample log-likelihoods within 1e-5, fp32; the same generations and scores), and
transformers' greedy generate for the server's answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.functional.launch import assert_ok, torchrun
from tests.functional.workers.eval_serve_parallel import LAYOUTS, SERVE_PROMPTS, SERVE_TOKENS

pytest.importorskip("lm_eval")
pytest.importorskip("openai")
WORKER = Path(__file__).parent / "workers" / "eval_serve_parallel.py"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
# fp32 logits of a 2-layer width-64 model: TP=2 splits row-parallel sums into two partial sums, PP=2 moves
# activations unchanged; float32 reassociation (eps 1.2e-7) over a few sums per token gives ~1e-7 per token.
# A sample sums its tokens' log-probs, so the difference grows with the sum: a rolling document of 150
# tokens (|sum| ~ 200) differs by ~1.5e-5. Hence 1e-5 absolute plus 1e-6 relative to the sum.
ATOL, RTOL = 1e-5, 1e-6


def _leaves(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value if isinstance(value, bool) else float(value)


def _samples(results: dict, task: str) -> list:
    return [s["resps"] for s in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def test_eval_and_serve_at_tp2_and_pp2_equal_the_references(tmp_path):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoTokenizer

    from tests.lm_eval_fixtures import TASKS, save_text_model, write_tasks, write_training_inputs

    hf_model = save_text_model(tmp_path / "model")
    write_tasks(tmp_path / "tasks")
    write_training_inputs(tmp_path / "train")  # the same model (seed 0) and tasks, with SFT data
    out = assert_ok(torchrun(WORKER, 2, str(tmp_path), timeout=900))
    reference = lm_eval.simple_evaluate(
        model=HFLM(pretrained=str(tmp_path / "model"), device="cpu", dtype="float32", batch_size=4),
        tasks=list(TASKS),
        task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False),
        log_samples=True,
        bootstrap_iters=0,
    )
    for layout in LAYOUTS:
        ours = json.loads((tmp_path / f"eval_{layout}.json").read_text())
        for task in ("tiny_mc", "tiny_ppl"):
            a, b = list(_leaves(_samples(reference, task))), list(_leaves(_samples(ours, task)))
            assert len(a) == len(b) > 0, (layout, task)
            for x, y in zip(a, b, strict=True):
                assert x == y if isinstance(x, bool) else math.isclose(x, y, rel_tol=RTOL, abs_tol=ATOL), (
                    layout,
                    task,
                    x,
                    y,
                )
        assert _samples(reference, "tiny_gen") == _samples(ours, "tiny_gen"), layout
        for task, metrics in reference["results"].items():
            for key, value in metrics.items():
                if isinstance(value, float) and "stderr" not in key:
                    assert math.isclose(value, ours["results"][task][key], rel_tol=1e-6, abs_tol=1e-6), (
                        layout,
                        key,
                    )

    tok = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    for layout in LAYOUTS:
        served = json.loads((tmp_path / f"serve_{layout}.json").read_text())
        for prompt in SERVE_PROMPTS:
            ids = torch.tensor([tok.encode(prompt)])
            greedy = hf_model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=SERVE_TOKENS,
                pad_token_id=0,
            )[0, ids.shape[1] :].tolist()
            expected = tok.decode([t for t in greedy if t != 2], skip_special_tokens=True)
            assert served["answers"][prompt] == expected, (layout, prompt)
        assert served["streamed"] == served["answers"][SERVE_PROMPTS[0]], layout
        assert served["bad"] == 400, layout
    # benchmarks during the TP=2 + SP run: the reference's scores (perplexities: exp of fp32 sums, 1e-5 relative)
    trained = json.loads((tmp_path / "train_tp2_sp.json").read_text())
    expected = {
        f"{task}/{key.split(',')[0]}": value
        for task in ("tiny_mc", "tiny_ppl")
        for key, value in reference["results"][task].items()
        if isinstance(value, float) and "stderr" not in key
    }
    assert set(trained) == set(expected)
    for key, value in expected.items():
        assert math.isclose(trained[key], value, rel_tol=1e-5), (key, trained[key], value)
    assert "Traceback" not in out
