"""validation.lm_eval_tasks: lm-eval benchmarks during training (one process), through the run plan.

With optimizer.lr=1e-30 (lr must be > 0) the weights stay the HF folder's: an AdamW step moves a weight
by about lr = 1e-30 (decoupled weight decay by lr * 0.1 * |w|), far below half an fp32 ulp of the
weights (|w| ~ 0.1: ulp ~ 7e-9), so every weight rounds back to itself; so the scores logged at each interval must equal lm-eval's own `hf` backend on the
folder; plus the plan's rules (one ConfigError each, before launch)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("lm_eval")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("single_process_groups"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from tests.finetune_fixtures import write_sft_jsonl
    from tests.lm_eval_fixtures import save_text_model, write_tasks

    root = tmp_path_factory.mktemp("train_bench")
    save_text_model(root / "hf")
    write_tasks(root / "tasks")
    write_sft_jsonl(root / "sft.jsonl", 16)
    return root


def _config(root, *extra: str):
    from bridge.config.compose import compose
    from recipes import get_recipe

    hf = root / "hf"
    base = [
        f"checkpoint.pretrained_checkpoint={hf}",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}",
        "dataset.kind=sft",
        f"dataset.data_paths=[{root}/sft.jsonl]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={root}/cache",
        "model.seq_length=64",
        "dataset.packed_sequence_size=64",
        "model.tensor_model_parallel_size=1",
        "model.sequence_parallel=False",
        "mixed_precision.precision=fp32",
        "train.train_iters=2",
        "train.global_batch_size=2",
        "train.micro_batch_size=1",
        "scheduler.lr_warmup_iters=0",
        "optimizer.lr=1e-30",
        "optimizer.min_lr=1e-30",
        "validation.eval_interval=0",
        "validation.eval_iters=0",
        "checkpoint.save=null",
        "checkpoint.save_interval=0",
        "logger.log_interval=1",
        "logger.tensorboard_dir=null",
        "dataset.num_workers=0",
        f"validation.lm_eval_include_path={root}/tasks",
    ]
    given = {e.split("=")[0] for e in extra}  # an override in `extra` replaces the base's
    overrides = [o for o in base if o.split("=")[0] not in given] + list(extra)
    return compose(get_recipe("llama32_1b_sft_config")(), overrides=overrides)[0]


def test_scores_during_training_equal_lm_evals_hf_backend(root):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from bridge.training import finetune

    cfg = _config(root, "validation.lm_eval_tasks=[tiny_mc:6,tiny_ppl]", "validation.lm_eval_interval=2")
    plan = cfg.validate(1, cuda=False)
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
        _config(root, *extra).validate(1, cuda=False)
