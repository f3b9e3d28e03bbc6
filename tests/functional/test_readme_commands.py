"""The README's commands, read from its fenced bash blocks and run one after the other in one fresh copy of
the tree, as a newcomer runs them (issue 43): none trips on what an earlier one left (the first run's
checkpoints, the tiny models, the exports), every training run saves where its command says and says so,
and each export writes its folder. Before: the first command saved to `experiments/default/checkpoints`
without saying so, and the dry run after it was refused ("holds checkpoints ... of another configuration").

The commands are parsed, not copied here, so the test follows the README as it changes. Installing
(`python -m venv`, `pip install`) is left out of `&&` chains: the test runs in the installed environment,
with this tree first on PYTHONPATH. A command that cannot run here is skipped for the reason in SKIPS
(a GPU, a cluster, the network, a placeholder path); every other one must exit 0.

The first command is also checked quiet (issue 29, item 2): the layout, the memory check and the model
before the first iteration, then the iterations and the saved checkpoint; no warning, no traceback. No
other command prints a warning or a traceback either."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.functional.launch import REPO_ROOT, count_launch, free_port

# (pattern, why the command is not run here); the first match wins
SKIPS = (
    (r"\bpytest\b", "the test suite (this test is part of it)"),
    (r"gpu_check\.sh", "needs an NVIDIA GPU"),
    (r"\b(HF_DIR|CKPT_DIR|OUT_DIR)\b|/path/to/|\s\.\.\.\s", "a placeholder for the reader's own values"),
    (r"\bbridge launch slurm\b", "submits to a SLURM cluster (tests/functional/test_slurm_launch.py)"),
    (r"\bbridge eval\b", "downloads the task's data from the Hugging Face hub"),
    (r"\bbridge serve\b|OpenAI\(", "a server left running (tests/unit/test_serve.py)"),
)
# Installing: dropped from a `&&` chain (the test runs in the installed environment).
SETUP = re.compile(r"^\s*(python3?(\.\d+)? -m venv\b|\. \S*activate\b|pip install\b)")
TRAIN = "scripts/training/run_recipe.py"
DEFAULT_SAVE = "experiments/default/checkpoints"  # checkpoint.save when a command names none
PER_COMMAND_TIMEOUT = 300


@dataclass
class Command:
    line: str  # as the README writes it (continuations joined)
    run: str | None  # what runs: the line without its installing steps; None when skipped
    why_skipped: str = ""
    output: str = ""
    returncode: int | None = None
    seconds: float = 0.0


def readme_commands(text: str) -> list[Command]:
    """Every command of the README's ```bash blocks, in order, with what runs of it."""
    commands = []
    for block in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            commands.append(_classify(line))
    return commands


def _classify(line: str) -> Command:
    for pattern, why in SKIPS:
        if re.search(pattern, line):
            return Command(line, None, why)
    if _is_training(line) and "model.num_layers=" not in line and "pretrained_checkpoint=" not in line:
        # a full-size model: the README's GPU command (tests/functional/test_training_recipe.py runs it shrunk)
        return Command(line, None, "trains a full-size model (a GPU run)")
    kept = [part for part in line.split("&&") if not SETUP.match(part)]
    if not kept:
        return Command(line, None, "installs (the test runs in the installed environment)")
    return Command(line, "&&".join(kept).strip())


def _is_training(line: str) -> bool:
    return TRAIN in line and "--dry-run" not in line and "--list-recipes" not in line


def fresh_copy(target: Path) -> Path:
    """The tree as a clone has it: git's tracked and unignored files (a plain copy without git)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, check=True,
        ).stdout.decode().split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        ignore = shutil.ignore_patterns(".git", "__pycache__", "experiments", ".venv*", "*.egg-info")
        shutil.copytree(REPO_ROOT, target, ignore=ignore)
        return target
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        env.pop(key, None)  # as a newcomer's shell: the commands set what they need
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "")]
    )  # python, torchrun, bridge
    env["PYTHONPATH"] = str(tree)
    env["HF_HUB_OFFLINE"] = "1"  # nothing here may need the network
    return env


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory) -> tuple[Path, list[Command]]:
    """One fresh copy; every README command run in it, in order (the launches all tests here share)."""
    tree = fresh_copy(tmp_path_factory.mktemp("clone"))
    commands = readme_commands((tree / "README.md").read_text())
    env = _environment(tree)
    for command in commands:
        if command.run is None:
            continue
        env["PET_MASTER_PORT"] = str(free_port())  # torchrun's --master_port (another test may hold 29500)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                ["bash", "-c", command.run], cwd=tree, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=PER_COMMAND_TIMEOUT, start_new_session=True,
            )  # fmt: skip
            command.output, command.returncode = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            command.output, command.returncode = f"timed out after {PER_COMMAND_TIMEOUT} s\n{e.output}", -1
        command.seconds = time.monotonic() - started
        ranks = re.search(r"torchrun --nproc_per_node=(\d+) (\S+)", command.run)
        if ranks:
            count_launch(ranks.group(2), int(ranks.group(1)), started)
        if command.returncode != 0:
            break  # the later commands may need this one's output
    return tree, commands


def _ran(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.run is not None]


@pytest.mark.slow
def test_the_commands_run_one_after_the_other_in_one_copy(readme_run):
    tree, commands = readme_run
    ran = _ran(commands)
    assert len(ran) >= 10, [c.line for c in commands]  # most of the README runs on CPU
    for c in ran:
        assert c.returncode == 0, f"{c.run}\nexit {c.returncode} after {c.seconds:.0f} s\n{c.output[-4000:]}"
    # every skip has its reason, and a command the README gives for CPU (a tiny model) is never skipped
    for c in commands:
        assert c.run is not None or c.why_skipped, c.line
        if "make_tiny" in c.line or "model.num_layers=" in c.line:
            assert c.run is not None, (c.line, c.why_skipped)


@pytest.mark.slow
def test_each_run_saves_where_its_command_says_and_says_so(readme_run):
    tree, commands = readme_run
    runs = [c for c in _ran(commands) if _is_training(c.run)]
    assert runs, "the README has no training command that runs on CPU"
    for c in runs:
        named = re.search(r"\bcheckpoint\.save=(\S+)", c.run)
        where = named.group(1) if named else DEFAULT_SAVE
        said = re.findall(r"saved checkpoint at iteration (\d+) to (\S+) \(", c.output)
        assert said, f"{c.run}\nsays nowhere where it saved:\n{c.output[-3000:]}"
        iteration, path = said[-1]  # the iteration's folder in the command's checkpoint.save
        assert (tree / path).parent.resolve() == (tree / where).resolve(), (c.run, path)
        assert (tree / path).is_dir() and (tree / path).name == f"iter_{int(iteration):07d}", (c.run, path)
        assert (tree / where / "latest_checkpointed_iteration.txt").read_text().strip() == iteration, c.run
    exports = [c for c in _ran(commands) if "convert_checkpoint.py export" in c.run]
    assert exports, "the README has no export that runs on CPU"
    for c in exports:
        files = {p.name for p in (tree / re.search(r"--hf-path (\S+)", c.run).group(1)).iterdir()}
        wanted = "adapter_config.json" if "--adapter-only" in c.run else "config.json"
        assert wanted in files and any(f.endswith(".safetensors") for f in files), (c.run, files)


@pytest.mark.slow
def test_the_first_command_is_quiet(readme_run):
    _, commands = readme_run
    first = _ran(commands)[0]
    assert re.search(r"\bOMP_NUM_THREADS=1 torchrun --nproc_per_node=2 " + TRAIN, first.run), first.run
    # OMP_NUM_THREADS=1 is what torchrun sets anyway; given, torchrun prints no 4-line banner about it
    assert first.returncode == 0, first.output[-3000:]
    lines = [line for line in first.output.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if re.match(r" iteration\s+1/", line))
    before = lines[:start]
    assert len(before) == 3, before
    assert re.search(r"parallel layout: TP=2 PP=1 .* world=2", before[0]), before
    assert before[1].startswith("memory per rank:") and before[2].startswith("model built in"), before
    iterations = [line for line in lines if re.match(r" iteration\s+\d+/\s+10 \|", line)]
    assert len(iterations) == 10, first.output[-3000:]
    loss = float(re.search(r"\| lm loss: ([^ ]+) \|", iterations[-1]).group(1))
    assert math.isfinite(loss) and 5.0 < loss < 9.0  # about ln(1024) = 6.93 for random tokens
    assert lines[start + 10 :] == [s for s in lines if s.startswith("saved checkpoint at iteration 10")]
    assert len(lines) == 3 + 10 + 1, lines
    lowered = first.output.lower()
    assert "warning" not in lowered and "traceback" not in lowered, first.output[-3000:]


@pytest.mark.slow
def test_no_command_prints_a_warning_or_a_traceback(readme_run):
    """Every command, not only the first: a third-party warning that tells a user nothing is filtered
    (bridge.parallel.quiet_warnings); before, the exports on megatron-core 0.19 printed three of torch's
    checkpoint warnings after their last line."""
    _, commands = readme_run
    for c in _ran(commands):
        noisy = [
            line for line in c.output.splitlines()
            if re.search(r"\b\w*Warning\b|^Traceback|^\s*warnings\.warn\(", line)
        ]  # fmt: skip
        assert not noisy, f"{c.run}\n" + "\n".join(noisy[:10])


def test_the_readme_parses_into_commands():
    """No launch: the parser keeps what runs and names why it skips the rest."""
    text = (
        "```bash\npython3 -m venv .venv && . .venv/bin/activate && pip install -e . && \\\n"
        "OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 scripts/training/run_recipe.py \\\n"
        "    --recipe r model.num_layers=2   # a comment\n"
        "bash scripts/gpu_check.sh\n```\n\n```python\nprint('not bash')\n```\n"
        "```bash\npython scripts/conversion/convert_checkpoint.py import --hf-path HF_DIR\n"
        "torchrun --nproc_per_node=4 scripts/training/run_recipe.py --recipe r\n"
        "python scripts/training/run_recipe.py --recipe r --dry-run\n```\n"
    )
    commands = readme_commands(text)
    assert [c.run and " ".join(c.run.split()) for c in commands] == [
        "OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 scripts/training/run_recipe.py --recipe r "
        "model.num_layers=2 # a comment",
        None,
        None,
        None,
        "python scripts/training/run_recipe.py --recipe r --dry-run",
    ]
    assert [c.why_skipped for c in commands][1:4] == [
        "needs an NVIDIA GPU",
        "a placeholder for the reader's own values",
        "trains a full-size model (a GPU run)",
    ]
