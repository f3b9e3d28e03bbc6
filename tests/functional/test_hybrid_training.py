"""A hybrid (MambaModelProvider: Mamba-2, attention and MLP layers) trains through run_recipe.py: TP=1 for two
iterations with a checkpoint, resumed at TP=2 on 2 gloo ranks (the Mamba mixer's sharded state dict
resharded), equal in loss to an uninterrupted TP=1 run. Three launches, slow tier."""

from __future__ import annotations

import re

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun

RECIPE = REPO_ROOT / "scripts" / "training" / "run_recipe.py"
TINY_HYBRID = [
    "--recipe", "nemotronh_4b_pretrain_config", "model.num_layers=4", "model.hybrid_override_pattern=M*M-",
    "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_attention_heads=4", "model.num_query_groups=2",
    "model.kv_channels=16", "model.mamba_num_heads=8", "model.mamba_head_dim=16", "model.mamba_state_dim=16",
    "model.mamba_num_groups=2", "model.mamba_chunk_size=16", "model.seq_length=64", "dataset.seq_length=64",
    "model.vocab_size=256", "train.global_batch_size=4", "train.micro_batch_size=2", "scheduler.lr_warmup_iters=1",
    "scheduler.lr_decay_iters=4", "validation.eval_iters=0", "validation.eval_interval=0", "logger.log_interval=1",
    "logger.tensorboard_dir=null", "dataset.num_workers=0", "train.train_iters=4",
]  # fmt: skip
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: ([0-9.Ee+-]+)")


def _losses(out: str) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for m in LOSS.finditer(out)}


@pytest.mark.slow
def test_tp1_checkpoint_resumed_at_tp2_equals_an_uninterrupted_run(tmp_path):
    whole = _losses(
        assert_ok(torchrun(RECIPE, 1, *TINY_HYBRID, "checkpoint.save=null", "checkpoint.save_interval=0"))
    )
    first = assert_ok(
        torchrun(
            RECIPE,
            1,
            *TINY_HYBRID,
            f"checkpoint.save={tmp_path}",
            "checkpoint.save_interval=2",
            "train.exit_interval=2",
            "checkpoint.dist_ckpt_optim_fully_reshardable=true",  # Adam's state resharded to TP=2
        )  # fmt: skip
    )
    assert "saved checkpoint at iteration 2" in first
    resumed = assert_ok(
        torchrun(
            RECIPE,
            2,
            *TINY_HYBRID,
            "model.tensor_model_parallel_size=2",
            f"checkpoint.load={tmp_path}",
            "checkpoint.save=null",
            "checkpoint.save_interval=0",
            "checkpoint.load_rng=False",  # no dropout: the RNG state draws nothing
        )  # fmt: skip
    )
    assert "TP=2" in resumed and "resumed from" in resumed
    later = _losses(resumed)
    assert sorted(whole) == [1, 2, 3, 4] and sorted(later) == [3, 4]
    # fp32 on both layouts: TP=2 splits the matmuls' sums (and the Mamba heads / groups) over 2 ranks, so
    # the losses (about 5.5) agree to float32 reduction-order error, far below 1e-5 relative
    for it in (3, 4):
        assert later[it] == pytest.approx(whole[it], rel=1e-5), (it, later, whole)
