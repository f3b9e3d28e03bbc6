"""A refused config shows its one `error:` line in every launch, whichever rank finds it (issue 29 item 1).

Each config is refused by validation on every rank. Launched with torchrun, the line is printed once by
the first rank to fail and torchrun's failure summary carries it as the root cause (not "To enable
traceback see ..."); launched with `bridge run`, it is the only line printed and the exit code is 2; in
plain python it is printed once with exit 2. No launch shows a traceback frame of bridge's own code
(torchrun's frames of its own launcher are its own; `bridge run` has none)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.functional.launch import REPO_ROOT, free_port

pytestmark = pytest.mark.slow

RECIPE = ["scripts/training/run_recipe.py", "--recipe", "llama32_1b_pretrain_config"]
# overrides refused before any process group exists -> a word of the expected line
REFUSED = {
    "global batch not divisible": (["train.global_batch_size=3"], "train.global_batch_size = 3"),
    "tp above the world": (["model.tensor_model_parallel_size=8"], "min_gpus"),
    "missing data file": (
        ["dataset.kind=jsonl", "dataset.data_paths=[/nonexistent/corpus.jsonl]"],
        "dataset",
    ),
    "unknown key": (["train.bogus=1"], "train.bogus"),
    "unsupported architecture": (
        ["checkpoint.pretrained_checkpoint={unsupported}"],
        "no conversion is registered",
    ),
}
# a frame of bridge's code in a traceback: the library, the scripts or the recipes of this repository
BRIDGE_FRAME = re.compile(r'File ".*/(bridge|scripts|recipes)/[^"]*\.py"')


def _launch(launcher: list[str], args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, *launcher, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )


def _multi_rank(kind: str, nproc: int) -> list[str]:
    module = "torch.distributed.run" if kind == "torchrun" else "bridge.cli"
    sub = [] if kind == "torchrun" else ["run"]
    return [
        "-m",
        module,
        *sub,
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
    ]


def _error_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("error: ")]


def _check(kind: str, proc: subprocess.CompletedProcess, word: str) -> str:
    out = proc.stdout
    lines = _error_lines(out)
    assert len(lines) == 1 and word in lines[0], f"{kind}: exit {proc.returncode}\n{out[-4000:]}"
    assert not BRIDGE_FRAME.search(out), f"{kind}: a traceback through bridge's code\n{out[-4000:]}"
    if kind == "torchrun":  # rank processes exit 2; torchrun itself exits 1 with its summary
        assert proc.returncode == 1, out[-4000:]
        root = out.split("Root Cause (first observed failure):")[1]
        assert f"traceback : {lines[0]}" in root and "To enable traceback" not in out, out[-4000:]
        assert out.index(lines[0]) < out.index("Traceback"), out[-4000:]  # the line comes first
    else:
        assert proc.returncode == 2, f"{kind}: exit {proc.returncode}\n{out[-4000:]}"
        assert "Traceback" not in out, out[-4000:]
        if kind == "bridge run":
            assert out.strip().splitlines()[-1] == lines[0], out[-4000:]
    return lines[0]


@pytest.fixture(scope="module")
def unsupported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf_unsupported")
    config = {"architectures": ["NotAModelForCausalLM"], "model_type": "not_a_model", "vocab_size": 64}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_refused_configs_show_one_error_line_in_every_launch(unsupported):
    """5 refused configs, each under torchrun and `bridge run` (10 launches), the world sizes alternating so
    that each launcher runs both 2 and 4 ranks; plus plain python (the dry run for 2 ranks: the same
    validation, so the same line as the 2-rank launches)."""
    seen = {}
    for index, (name, (overrides, word)) in enumerate(REFUSED.items()):
        args = [*RECIPE, *(o.format(unsupported=unsupported) for o in overrides)]
        if name == "unsupported architecture":
            args[2] = "llama32_1b_sft_config"  # a run started from a Hugging Face folder
        plain = _check(
            "python", _launch([], [*args, "--dry-run", "--world-size", "2", "--device", "cpu"]), word
        )
        for kind, nproc in (("torchrun", (2, 4)[index % 2]), ("bridge run", (4, 2)[index % 2])):
            line = _check(kind, _launch(_multi_rank(kind, nproc), args), word)
            if nproc == 2:
                assert line == plain, (name, kind, line, plain)
            seen[(name, kind, nproc)] = line
    assert {(kind, nproc) for _, kind, nproc in seen} == {
        (kind, nproc) for kind in ("torchrun", "bridge run") for nproc in (2, 4)
    }
    assert len(seen) == 10


def test_conversion_and_generation_under_torchrun_show_one_error_line(tmp_path):
    """The other entry points launched on 2 ranks: a missing HF folder, a layout that is not the world."""
    convert = ["scripts/conversion/convert_checkpoint.py", "import", "--hf-path", str(tmp_path / "missing")]
    convert += ["--megatron-path", str(tmp_path / "out"), "--tp", "2"]
    generate = [
        "scripts/inference/generate.py",
        "--hf-path",
        str(tmp_path),
        "--prompt-ids",
        "1,2",
        "--tp",
        "4",
    ]
    for args, word in ((convert, "missing"), (generate, "--tp x --pp")):
        for kind in ("torchrun", "bridge run"):
            _check(kind, _launch(_multi_rank(kind, 2), args), word)
    assert not (tmp_path / "out").exists()
