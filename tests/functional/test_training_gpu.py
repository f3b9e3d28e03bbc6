"""With CUDA: the same loop on NCCL in the recipe's bf16 (skipped on CPU-only machines)."""

from __future__ import annotations

import math
import re

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun
from tests.functional.test_training_recipe import SHRINK_FOR_CPU


@pytest.mark.gpu
def test_recipe_trains_in_bf16_on_one_gpu(tmp_path):
    proc = torchrun(
        REPO_ROOT / "scripts/training/run_recipe.py", 1, "--recipe", "llama32_1b_pretrain_config",
        *SHRINK_FOR_CPU, "train.train_iters=3", "train.global_batch_size=4", "train.micro_batch_size=2",
        "scheduler.lr_warmup_iters=0", "validation.eval_interval=0", "logger.log_interval=1",
        f"checkpoint.save={tmp_path}/ckpt", f"logger.tensorboard_dir={tmp_path}/tb",
    )  # fmt: skip
    out = assert_ok(proc)
    assert "needs CUDA" not in out  # bf16 kept: no CPU fallback
    losses = [float(m.group(1)) for m in re.finditer(r"\| lm loss: ([^ ]+) \|", out)]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


@pytest.mark.gpu
def test_megatron_fsdp_trains_on_one_gpu(tmp_path):
    # Megatron-FSDP (Megatron-Core's fully sharded wrapper) is CUDA-only: on CPU the plan refuses it
    proc = torchrun(
        REPO_ROOT / "scripts/training/run_recipe.py", 1, "--recipe", "llama32_1b_pretrain_config",
        *SHRINK_FOR_CPU, "train.train_iters=3", "train.global_batch_size=4", "train.micro_batch_size=2",
        "scheduler.lr_warmup_iters=0", "validation.eval_interval=0", "logger.log_interval=1",
        "distributed.strategy=megatron_fsdp", "model.sequence_parallel=False", "checkpoint.save=null",
        "checkpoint.save_interval=0", f"logger.tensorboard_dir={tmp_path}/tb",
    )  # fmt: skip
    out = assert_ok(proc)
    losses = [float(m.group(1)) for m in re.finditer(r"\| lm loss: ([^ ]+) \|", out)]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
