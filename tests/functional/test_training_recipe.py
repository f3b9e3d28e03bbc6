"""The README's "Training on GPUs" command (TP=2 PP=2 SP), through torchrun and
scripts/training/run_recipe.py on 4 gloo ranks, with overrides that shrink the model and sequence for
CPU: exit 0, a finite lm loss at iteration 3, the layout line, and the final checkpoint (tracker +
run_config.yaml) written after the run. The same run profiles iterations 2 and 3 on rank 0 with the
PyTorch profiler (a window reaching past the last iteration: stopped when training ends)."""

from __future__ import annotations

import gzip
import json
import math
import re

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun

SEEDS_COMMAND = [
    "--recipe", "llama32_1b_pretrain_config",
    "model.tensor_model_parallel_size=2", "model.pipeline_model_parallel_size=2", "model.sequence_parallel=True",
    "train.train_iters=3", "train.global_batch_size=8", "train.micro_batch_size=1",
    "scheduler.lr_warmup_iters=0",
    "validation.eval_iters=0", "validation.eval_interval=0",
    "checkpoint.save_interval=0",
    "logger.log_interval=1",
]  # fmt: skip
SHRINK_FOR_CPU = [
    "model.num_layers=4", "model.hidden_size=64", "model.ffn_hidden_size=128", "model.num_attention_heads=4",
    "model.num_query_groups=2", "model.seq_length=64", "model.vocab_size=1024",
]  # fmt: skip


def test_seeds_verification_command(tmp_path):
    where = [f"checkpoint.save={tmp_path}/ckpt", f"logger.tensorboard_dir={tmp_path}/tb"]
    profile = [
        "profiling.use_pytorch_profiler=true",
        "profiling.profile_step_start=2",
        "profiling.profile_step_end=4",
    ]
    proc = torchrun(
        REPO_ROOT / "scripts/training/run_recipe.py", 4, *SEEDS_COMMAND, *SHRINK_FOR_CPU, *where, *profile
    )
    out = assert_ok(proc)

    assert re.search(r"\bTP=2 PP=2\b.*\bDP=1\b.*\bworld=4\b", out), out[-3000:]
    lines = {
        int(m.group(1)): line
        for line in out.splitlines()
        if (m := re.match(r" iteration\s+(\d+)/\s+3 \|", line))
    }
    assert sorted(lines) == [1, 2, 3]
    loss = float(re.search(r"\| lm loss: ([^ ]+) \|", lines[3]).group(1))
    assert math.isfinite(loss) and 5.0 < loss < 9.0  # about ln(1024) = 6.93 for random tokens
    assert "consumed samples: 24 |" in lines[3] and "global batch size:     8 |" in lines[3]
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    from bridge.config.container import ConfigContainer

    saved = ConfigContainer.from_yaml((tmp_path / "ckpt" / "iter_0000003" / "run_config.yaml").read_text())
    assert saved.model.num_layers == 4 and saved.model.tensor_model_parallel_size == 2
    assert saved.train.train_iters == 3

    # the trace: in logger.tensorboard_dir (profiling.output_dir unset), from rank 0 only (profile_ranks [0])
    traces = sorted((tmp_path / "tb").glob("*.pt.trace.json*"))
    assert [re.match(r"rank(\d+)\.", t.name).group(1) for t in traces] == ["0"], traces
    text = gzip.open(traces[0], "rt").read() if traces[0].suffix == ".gz" else traces[0].read_text()
    steps = {
        e["name"] for e in json.loads(text)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    }
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}
    assert "rank 0: PyTorch profiler trace up to iteration 3 written to" in out
