"""One `error:` line for a user mistake, from every entry point (issue 29 items 1 and 5).

torchrun's own reader (ProcessFailure / ChildFailedError) is the reference for what its failure summary
shows from the error file bridge writes; the launcher, conversion, generation, data preparation and the
jsonl loader are checked through their entry points (exit 2, one line, nothing left behind)."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.cli import launch, user_error
from bridge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _script(relative: str):
    spec = importlib.util.spec_from_file_location(Path(relative).stem + "_under_test", REPO / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_launcher_env(monkeypatch):
    for name in ("TORCHELASTIC_ERROR_FILE", "RANK", user_error.LAUNCHER_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ---- bridge.cli.user_error and torchrun's error file ------------------------------------------------------


def test_plain_process_prints_one_line_and_returns_2(no_launcher_env, capsys):
    assert user_error.report_user_error(ConfigError("a = 1: wrong.\n  Fix: b.")) == 2
    assert _one_error_line(capsys.readouterr().err) == "error: a = 1: wrong. Fix: b."
    no_launcher_env.setenv("RANK", "1")  # another launcher's rank 1: rank 0 prints
    user_error.report_user_error(ConfigError("x"))
    assert capsys.readouterr().err == ""


def _torchrun_ranks(tmp_path: Path, n: int) -> list[Path]:
    """torchrun's layout of per-rank error files: <attempt dir>/<local rank>/error.json."""
    files = []
    for rank in range(n):
        (tmp_path / "attempt_0" / str(rank)).mkdir(parents=True)
        files.append(tmp_path / "attempt_0" / str(rank) / "error.json")
    return files


def test_every_rank_records_the_line_and_the_first_to_fail_prints_it(no_launcher_env, capsys, tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    files = _torchrun_ranks(tmp_path, 4)
    for rank in (2, 0, 3, 1):  # rank 2 finds the mistake first
        no_launcher_env.setenv("RANK", str(rank))
        no_launcher_env.setenv("TORCHELASTIC_ERROR_FILE", str(files[rank]))
        assert user_error.report_user_error(ConfigError("train.x = 3: wrong. Fix: 2.")) == 2
    assert capsys.readouterr().err == "error: train.x = 3: wrong. Fix: 2.\n"  # once, by rank 2
    # what torchrun's summary shows for these files (its own reader and formatter)
    failures = {
        r: ProcessFailure(local_rank=r, pid=100 + r, exitcode=2, error_file=str(f))
        for r, f in enumerate(files)
    }
    summary = str(ChildFailedError("run_recipe.py", failures))
    assert summary.count("traceback : error: train.x = 3: wrong. Fix: 2.") == 4
    assert "To enable traceback" not in summary
    rank, failure = launch.root_failure(failures)
    assert launch.failure_line(rank, failure) == "error: train.x = 3: wrong. Fix: 2."
    # a rank torchrun killed after it recorded the line may have the earliest file: the exit code is 2
    failures[0] = ProcessFailure(local_rank=0, pid=100, exitcode=-15, error_file=str(files[0]))
    failures[0].timestamp -= 1
    assert launch.root_failure(failures)[1].exitcode == 2


def test_under_bridge_run_the_workers_print_nothing(no_launcher_env, capsys, tmp_path):
    (error_file,) = _torchrun_ranks(tmp_path, 1)
    no_launcher_env.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    no_launcher_env.setenv(user_error.LAUNCHER_ENV, "1")
    assert user_error.report_user_error("bad") == 2
    assert capsys.readouterr().err == ""
    assert json.loads(error_file.read_text())["message"]["message"] == "error: bad"


def test_launcher_lines_for_failures_without_bridge_line(tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    missing = str(tmp_path / "none.json")
    crashed = ProcessFailure(local_rank=1, pid=7, exitcode=1, error_file=missing)
    assert launch.failure_line(1, crashed) == "error: rank 1 exited with code 1 (see its output above)"
    killed = ProcessFailure(local_rank=0, pid=7, exitcode=-9, error_file=missing)
    assert launch.failure_line(0, killed) == "error: rank 0 was killed by SIGKILL (see its output above)"
    assert launch.exit_code_of(killed) == 137 and launch.exit_code_of(crashed) == 1
    recorded = tmp_path / "rec.json"  # @record's form for an uncaught exception
    recorded.write_text(
        json.dumps(
            {"message": {"message": "KeyError: 'x'", "extraInfo": {"py_callstack": "T", "timestamp": "1"}}}
        )
    )
    raised = ProcessFailure(local_rank=3, pid=7, exitcode=1, error_file=str(recorded))
    assert launch.failure_line(3, raised) == "error: rank 3 failed: KeyError: 'x'"


def test_bridge_run_is_a_subcommand_and_needs_a_script(capsys):
    from bridge.cli import main

    assert main(["run"]) == 2
    assert "usage: bridge run" in capsys.readouterr().err


# ---- entry points in one process ----------------------------------------------------------------------------


def test_run_recipe_and_plan_print_one_line(no_launcher_env, capsys):
    from bridge.cli.plan import main as plan_main

    run_recipe = _script("scripts/training/run_recipe.py")
    assert run_recipe.main(["--recipe", "llama32_1b_pretrain_config", "--dry-run", "train.bogus=1"]) == 2
    assert "train.bogus" in _one_error_line(capsys.readouterr().err)
    assert plan_main(["--model", "no_such_model", "--gpus", "8"]) == 2
    assert "--model" in _one_error_line(capsys.readouterr().err)


def test_conversion_write_failures_exit_2_with_one_line(no_launcher_env, capsys, tmp_path):
    convert = _script("scripts/conversion/convert_checkpoint.py")
    from bridge.conversion.auto_bridge import AutoBridge

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "model.safetensors").write_bytes(b"x" * 3000)
    target = tmp_path / "out"
    for code, text in ((errno.ENOSPC, "no space left on the device"), (errno.EACCES, "Permission denied")):

        def refuse(*_args, _code=code, **_kwargs):
            raise OSError(_code, os.strerror(_code), str(tmp_path / ".out.partial" / "x.distcp"))

        no_launcher_env.setattr(AutoBridge, "import_ckpt", refuse)
        assert convert.main(["import", "--hf-path", str(hf), "--megatron-path", str(target)]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert text in line and "x.distcp" in line and "Fix:" in line, line
    unreadable = OSError(errno.EACCES, "Permission denied", str(hf / "model.safetensors"))
    args = convert.parse_args(["import", "--hf-path", str(hf), "--megatron-path", str(target)])
    assert "model.safetensors: Permission denied while reading it" in str(
        convert.write_failure(args, unreadable)
    )
    assert (
        "about 0.00 GB (the source's weights)"
        in convert.write_failure(
            convert.parse_args(["import", "--hf-path", str(hf), "--megatron-path", str(target)]),
            OSError(errno.ENOSPC, "No space left on device", str(target)),
        ).args[0]
    )


def test_a_killed_conversions_staging_folder_is_removed_by_the_next(tmp_path):
    from bridge.checkpoint.atomic import atomic_dir

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = tmp_path / f".out.tmp-{int(gone.stdout)}"
    live = tmp_path / f".out.tmp-{os.getppid()}"  # a conversion still running (this test's parent process)
    for folder in (dead, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    with atomic_dir(tmp_path / "out") as staging:
        (staging / "config.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "out"])


def test_fsdp2_checkpoint_export_names_a_fix_that_exists(tmp_path):
    import torch

    from bridge.checkpoint.paths import CONSOLIDATED_DIR
    from bridge.conversion.fsdp2_refusal import refuse_fsdp2_checkpoint

    folder = tmp_path / "iter_0000002"
    folder.mkdir()
    metadata = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
    (folder / "metadata.json").write_text(
        json.dumps({**metadata, "common_backend": "torch", "common_backend_version": 1})
    )
    torch.save({"checkpoint_content": {"fsdp2": {"dp_shard": 2}}}, folder / "common.pt")
    with pytest.raises(ConfigError) as err:
        refuse_fsdp2_checkpoint(folder)
    assert "checkpoint.save_consolidated=true" in str(err.value)
    fix = str(err.value).split("Fix:")[1]  # no circle: neither export form is the way out
    assert "--low-memory" not in fix and "distributed.strategy=fsdp2" in fix
    (folder / CONSOLIDATED_DIR).mkdir()
    (folder / CONSOLIDATED_DIR / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"use {folder / CONSOLIDATED_DIR} directly"):
        refuse_fsdp2_checkpoint(folder, reader="generation")
    torch.save({"checkpoint_content": {}}, folder / "common.pt")
    refuse_fsdp2_checkpoint(folder)  # a torch_dist checkpoint passes


def test_generate_suggests_only_flags_it_has(no_launcher_env, capsys, tmp_path):
    generate = _script("scripts/inference/generate.py")
    parser_flags = generate.parse_args(["--megatron-path", "x", "--hf-config", "y", "--prompt-ids", "1"])
    assert parser_flags.hf_config == "y"  # the fix AutoBridge.from_megatron_checkpoint names exists
    argv = ["--hf-path", str(tmp_path), "--hf-config", str(tmp_path), "--prompt-ids", "1"]
    assert generate.main(argv) == 2
    assert "--hf-config" in _one_error_line(capsys.readouterr().err)
    args = generate.parse_args(["--hf-path", "x", "--prompt-ids", "1", "--max-new-tokens", "8"])
    with pytest.raises(ConfigError) as err:
        generate._check_length(args, n_prompt=64, max_len=20)
    assert "at most 19 tokens" in str(err.value) and "-" not in str(err.value).split("Fix:")[1]


# ---- data preparation and the jsonl loader ----------------------------------------------------------------

BAD_JSONL = {
    "binary": (b'{"text": "ok"}\n\x00\xff\xfe\x9c garbage\n', ":2: not UTF-8 text"),
    "no text key": (b'{"body": "a b"}\n', ":1: no key 'text' (keys: body)"),
    "text not a string": (b'{"text": "a"}\n{"text": [1, 2]}\n', ":2: 'text' is a JSON array, not a string"),
    "bad JSON line": (b'{"text": "a"}\n\n{"text": "b" x}\n', ":3: not valid JSON"),
    "not an object": (b'"just a string"\n', ":1: a JSON string"),
    "empty": (b"\n\n", "holds no document"),
}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tests.unit.test_training_data import _make_tokenizer

    return _make_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.mark.parametrize("case", list(BAD_JSONL))
def test_preprocess_data_bad_input_is_one_line_and_leaves_nothing(
    case, tokenizer_dir, tmp_path, capsys, no_launcher_env
):
    data, expected = BAD_JSONL[case]
    source = tmp_path / "in.jsonl"
    source.write_bytes(data)
    out = tmp_path / "out"
    preprocess = _script("scripts/data/preprocess_data.py")
    argv = ["--input", str(source), "--tokenizer", str(tokenizer_dir), "--output-prefix", str(out / "c")]
    assert preprocess.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert expected in line and "Fix:" in line, line
    assert list(out.iterdir()) == []  # no partial .bin / .idx


def test_preprocess_data_missing_input_or_tokenizer(tokenizer_dir, tmp_path, capsys, no_launcher_env):
    preprocess = _script("scripts/data/preprocess_data.py")
    good = tmp_path / "in.jsonl"
    good.write_text('{"text": "a b"}\n')
    for source, tok, expected in (
        (tmp_path / "missing.jsonl", tokenizer_dir, "--input"),
        (good, tmp_path / "no_tokenizer", "--tokenizer"),
    ):
        argv = ["--input", str(source), "--tokenizer", str(tok), "--output-prefix", str(tmp_path / "o" / "c")]
        assert preprocess.main(argv) == 2
        assert _one_error_line(capsys.readouterr().err).startswith(f"error: {expected}")
    assert not (tmp_path / "o").exists()


def test_jsonl_loader_names_the_line_of_binary_garbage(tmp_path):
    from bridge.training.data.jsonl import read_jsonl_records

    path = tmp_path / "garbage.jsonl"
    path.write_bytes(b'{"text": "fine"}\n' + bytes(range(128, 256)) + b"\n")
    with pytest.raises(ConfigError, match=r"garbage.jsonl:2 is not UTF-8 text \(byte 0x80 at column 1\)"):
        read_jsonl_records([str(path)])


def test_bridge_run_help_is_bridges_own_and_a_scripts_help_is_the_scripts():
    """`bridge run --help` printed torchrun's argparse help (issue 43); after SCRIPT, --help is the script's."""
    import contextlib
    import io

    from bridge.cli import launch

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert launch.main(["--help"]) == 0
    text = out.getvalue()
    assert text.startswith("usage: bridge run") and "torchrun --help" in text, text
    assert "--rdzv-backend" not in text  # torchrun's own argparse listing is not printed
    assert launch.asks_for_help(["--nproc_per_node=2", "-h"])
    assert not launch.asks_for_help(["--nproc_per_node=2", "scripts/training/run_recipe.py", "--help"])


def test_a_restarted_attempt_finds_the_mistake_of_an_earlier_one(tmp_path, monkeypatch, capsys):
    # torchrun's layout: <agent dir>/attempt_N/<local rank>/error.json, one agent dir for all attempts
    def attempt(n: int, restarts: int = 2) -> None:
        (tmp_path / f"attempt_{n}" / "0").mkdir(parents=True)
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / f"attempt_{n}" / "0" / "error.json"))
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(n))
        monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", str(restarts))

    attempt(0)
    assert user_error.previous_stop() is None
    assert user_error.report_user_error(ConfigError("model.x = 1: bad. Fix: 2")) == 2
    attempt(1)
    assert user_error.previous_stop() == "error: model.x = 1: bad. Fix: 2"
    user_error.report_user_error("error: not retried (model.x = 1)")  # keeps the first attempt's line
    attempt(2)
    assert user_error.previous_stop() == "error: model.x = 1: bad. Fix: 2"
    capsys.readouterr()


def test_no_restart_left_records_nothing(tmp_path, monkeypatch):
    (tmp_path / "attempt_0" / "0").mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "attempt_0" / "0" / "error.json"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    user_error.report_user_error(ConfigError("model.x = 1: bad"))
    assert not (tmp_path / "bridge-deterministic-stop").exists()
