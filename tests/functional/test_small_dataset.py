"""A small indexed dataset on 2 gloo ranks (issue 42): 200 documents at the recipe's default split
(969,30,1) without evaluation trains (rank 0 looped forever building the 0-document test split, rank 1
waited until the process-group timeout); 10 documents with evaluation on are one `error:` line naming the
split and the document counts, before training. The single-process cases: tests/unit/test_split_documents.py."""

from __future__ import annotations

import re

from tests.functional.launch import REPO_ROOT, torchrun
from tests.functional.workers.train_common import SHORT_RUN, TINY_MODEL, write_learnable_indexed_data

RUN_RECIPE = REPO_ROOT / "scripts/training/run_recipe.py"


def _args(prefix: str, tmp_path, *overrides: str) -> list[str]:
    short = [o for o in SHORT_RUN if not o.startswith("validation.") or not overrides]
    return ["--recipe", "llama32_1b_pretrain_config", *TINY_MODEL, *short, "dataset.kind=indexed",
            f"dataset.data_paths=[{prefix}]", f"dataset.cache_dir={tmp_path}/cache", "train.train_iters=2",
            "distributed.timeout_minutes=2", *overrides]  # fmt: skip


def test_small_indexed_dataset_on_two_ranks(tmp_path):
    ok = write_learnable_indexed_data(tmp_path / "d200" / "count", n_docs=200)
    proc = torchrun(RUN_RECIPE, 2, *_args(ok, tmp_path), timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:]
    assert re.search(r"iteration\s+2/\s*2 .*lm loss: [0-9.]+", out), out[-3000:]

    small = write_learnable_indexed_data(tmp_path / "d10" / "count", n_docs=10)
    proc = torchrun(RUN_RECIPE, 2, *_args(small, tmp_path, "validation.eval_interval=1",
                                          "validation.eval_iters=1"), timeout=240)  # fmt: skip
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stdout[-5000:]
    assert errors[0].startswith(f"error: dataset.split = '969,30,1': {small}.idx holds 10 documents"), errors
    assert "train 10, validation 0, test 0: the validation split gets no document" in errors[0]
    assert "iteration " not in proc.stdout
