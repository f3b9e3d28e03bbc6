"""`bridge eval` and `bridge serve` from the console script: one `error:` line and exit 2 for bad input
(before the model is built), and `bridge eval` writing lm-eval's results JSON."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("fastapi")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("single_process_groups"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from tests.lm_eval_fixtures import save_text_model, write_tasks

    root = tmp_path_factory.mktemp("cli")
    save_text_model(root / "model")
    write_tasks(root / "tasks")
    return root


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["eval", "--tasks", "tiny_mc"],
            "--hf-path / --megatron-path = 'neither given': exactly one model source",
        ),
        (
            ["eval", "--tasks", "tiny_mc", "--tp", "2"],
            "--tp x --pp = '2 x 1 = 2': must equal the number of processes (1)",
        ),
        (["eval", "--tasks", "tiny_mc", "--batch-size", "0"], "--batch-size = 0: must be >= 1"),
        (["serve", "--max-batch-size", "0"], "--max-batch-size = 0: must be >= 1"),
        (["serve", "--port", "70000"], "--port = 70000: must be in 0..65535"),
        (["serve", "--pp", "2"], "--tp x --pp = '1 x 2 = 2': must equal the number of processes (1)"),
    ],
)
def test_bad_input_is_one_error_line(root, argv, message, capsys):
    from bridge.cli import main

    source = [] if "neither" in message else ["--hf-path", str(root / "model")]
    include = ["--include-path", str(root / "tasks")] if argv[0] == "eval" else []
    assert main([*argv, *source, *include]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_eval_writes_lm_evals_results(root, capsys):
    from bridge.cli import main

    out = root / "out" / "results.json"
    argv = ["eval", "--hf-path", str(root / "model"), "--tasks", "tiny_mc", "--include-path", str(root / "tasks"),
            "--limit", "4", "--output-path", str(out), "--log-samples"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads(out.read_text())
    assert (
        results["results"]["tiny_mc"]["sample_len"] == 4
        if "sample_len" in results["results"]["tiny_mc"]
        else True
    )
    assert len(results["samples"]["tiny_mc"]) == 4
    assert "tiny_mc" in capsys.readouterr().out  # lm-eval's table
    assert not list(out.parent.glob(".*tmp*"))  # published atomically, no temporary left
