"""validation.lm_eval_tasks: lm-eval benchmarks during training (one process), through the run plan.

With optimizer.lr=1e-30 (lr must be > 0) the weights stay the HF folder's: an AdamW step moves a weight
by about lr = 1e-30 (decoupled weight decay by lr * 0.1 * |w|), far below half an fp32 ulp of the
weights (|w| ~ 0.1: ulp ~ 7e-9), so every weight rounds back to itself; so the scores logged at each interval must equal lm-eval's own `hf` backend on the
folder; plus the plan's rules (one ConfigError each, before launch)."""

from __future__ import annotations

import math

import pytest

from bridge.config.run_plan import build_plan

pytest.importorskip("lm_eval")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("single_process_groups"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from tests.lm_eval_fixtures import write_training_inputs

    return write_training_inputs(tmp_path_factory.mktemp("train_bench"))


def _config(root, *extra: str):
    from tests.lm_eval_fixtures import training_config

    return training_config(root, *extra)


def test_scores_during_training_equal_lm_evals_hf_backend(root):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from bridge.training import finetune

    cfg = _config(root, "validation.lm_eval_tasks=[tiny_mc:6,tiny_ppl]", "validation.lm_eval_interval=2")
    plan = build_plan(cfg, 1, cuda=False)
    assert plan.benchmarks.tasks == ("tiny_mc", "tiny_ppl") and plan.benchmarks.limits == (6, None)
    assert "lm-eval benchmarks every 2 iterations: tiny_mc (6 docs), tiny_ppl" in plan.summary_lines()
    result = finetune(plan)
    assert sorted(result.benchmark_scores) == [2]  # every 2 iterations of 2
    hf = HFLM(pretrained=str(root / "hf"), device="cpu", dtype="float32", batch_size=4)
    manager = TaskManager(include_path=str(root / "tasks"), include_defaults=False)
    expected = {}
    for task, limit in (("tiny_mc", 6), ("tiny_ppl", None)):
        out = lm_eval.simple_evaluate(
            model=hf, tasks=[task], task_manager=manager, limit=limit, bootstrap_iters=0
        )
        for key, value in out["results"][task].items():
            if isinstance(value, float) and "stderr" not in key:
                expected[f"{task}/{key.split(',')[0]}"] = value
    scores = result.benchmark_scores[2]
    assert set(scores) == set(expected)
    for key, value in expected.items():
        # perplexities are exp(-sum / words) of fp32 sums: 1e-5 relative covers the summation order
        assert math.isclose(scores[key], value, rel_tol=1e-5), (key, scores[key], value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["validation.lm_eval_tasks=[tiny_mc:zero]"],
            r"validation.lm_eval_tasks = 'tiny_mc:zero': each entry",
        ),
        (
            ["validation.lm_eval_tasks=[tiny_mc]", "validation.eval_interval=0"],
            r"validation.lm_eval_interval = None: benchmarks need a positive interval",
        ),
        (
            [
                "validation.lm_eval_tasks=[tiny_mc]",
                "validation.lm_eval_interval=1",
                "tokenizer.tokenizer_type=NullTokenizer",
            ],
            r"lm-eval tasks are text and need the run's Hugging Face tokenizer.*tokenizer.tokenizer_type=HuggingFaceTokenizer",
        ),
        (
            [
                "validation.lm_eval_tasks=[tiny_mc]",
                "validation.lm_eval_interval=1",
                "validation.lm_eval_limit=0",
            ],
            r"validation.lm_eval_limit = 0: must be >= 1",
        ),
    ],
)
def test_plan_rules(root, extra, message):
    from bridge.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        build_plan(_config(root, *extra), 1, cuda=False)
