"""The README's first command (2 gloo ranks, TP=2 with sequence parallelism, 10 iterations), read from
the README itself and run as written (plus checkpoint and TensorBoard folders of the test's own): quiet by default
(issue 29, item 2). Before: 8 lines before the first iteration (the CPU backend's ~400-character patch
list, the precision and data-worker notes, 9 GPU settings inactive on CPU, the build step); now the
layout, the memory check and the model, then the iterations and the saved checkpoint. No warning, no
traceback."""

from __future__ import annotations

import math
import re
import shlex

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, torchrun


def readme_first_command() -> list[str]:
    """The torchrun arguments of the first command under "On a fresh machine"."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    command = next(part for part in block.split("&&") if "torchrun" in part)
    words = shlex.split(command.replace("\\\n", " "))  # the README breaks it into lines with `\`
    # OMP_NUM_THREADS=1 is what torchrun sets anyway; given, torchrun prints no 4-line banner about it
    assert words[:3] == ["OMP_NUM_THREADS=1", "torchrun", "--nproc_per_node=2"], words[:3]
    return words[3:]


@pytest.mark.slow
def test_the_first_command_is_quiet(tmp_path):
    script, *args = readme_first_command()
    assert script == "scripts/training/run_recipe.py"
    # the README's own checkpoint folder replaced by the test's (a key may be given once)
    assert "checkpoint.save=experiments/first-run/checkpoints" in args
    args = [a for a in args if not a.startswith("checkpoint.save=")]
    own_folders = [f"checkpoint.save={tmp_path}/ckpt", f"logger.tensorboard_dir={tmp_path}/tb"]
    out = assert_ok(torchrun(REPO_ROOT / script, 2, *args, *own_folders, real=True))
    lines = [line for line in out.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if re.match(r" iteration\s+1/", line))
    before = lines[:first]
    assert len(before) == 3, before
    assert re.search(r"parallel layout: TP=2 PP=1 .* world=2", before[0]), before
    assert before[1].startswith("memory per rank:") and before[2].startswith("model built in"), before
    iterations = [line for line in lines if re.match(r" iteration\s+\d+/\s+10 \|", line)]
    assert len(iterations) == 10, out[-3000:]
    loss = float(re.search(r"\| lm loss: ([^ ]+) \|", iterations[-1]).group(1))
    assert math.isfinite(loss) and 5.0 < loss < 9.0  # about ln(1024) = 6.93 for random tokens
    assert lines[first + 10 :] == [s for s in lines if s.startswith("saved checkpoint at iteration 10")]
    assert len(lines) == 3 + 10 + 1, lines
    lowered = out.lower()
    assert "warning" not in lowered and "traceback" not in lowered, out[-3000:]
