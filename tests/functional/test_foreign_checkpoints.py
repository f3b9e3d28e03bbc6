"""Checkpoints move both ways between bridge and Megatron-LM / Megatron-Bridge (2 gloo ranks, DP=2, the
distributed optimizer). The worker writes both projects' layouts from a bare Megatron-Core model with
`dist_checkpointing` (workers/foreign_checkpoints.py says what each file holds); the references are that
bare model's own continued training and its logits, and transformers' LlamaForCausalLM for the export."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, records_by_tag, torchrun

pytestmark = pytest.mark.slow

WORKERS = REPO_ROOT / "tests/functional/workers"


def _ints(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("foreign")
    out = assert_ok(torchrun(WORKERS / "foreign_checkpoints.py", 2, str(work), timeout=900))
    return work, records_by_tag(out)


@pytest.mark.parametrize("layout", ["megatron_lm", "megatron_bridge"])
def test_resume_continues_the_writers_own_run(runs, layout):
    _, rec = runs
    bare = _ints(rec["bare"]["losses"])
    resumed = rec[f"resumed_{layout}"]
    got = _ints(resumed["losses"])
    assert sorted(got) == [3, 4]  # resumed at the saved iteration 2, with its optimizer and schedule
    for it, loss in got.items():
        assert _close(loss, bare[it]), (it, loss, bare[it])
    # no model field was typed: the llama32_1b recipe's were replaced by the checkpoint's
    assert resumed["fields"] == {
        "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "num_query_groups": 2, "vocab_size": 256, "seq_length": 32, "share_embeddings_and_output_weights": False,
    }  # fmt: skip


def test_weights_only_start_sees_the_saved_model(runs):
    _, rec = runs
    start = rec["pretrained_start"]
    assert start["num_layers"] == 2
    assert _close(_ints(start["losses"])[1], rec["bare"]["first_batch_loss_of_saved_weights"])


def test_a_checkpoint_without_model_fields_says_so(runs):
    _, rec = runs
    message = rec["no_fields"]
    assert message is not None and "records no model fields" in message
    assert "Fix: set model." in message  # and then what bridge.checkpoint.compat found first


def test_bridge_checkpoint_reads_back_as_megatron_bridge_reads_it(runs):
    import torch

    work, rec = runs
    back = rec["read_back"]
    assert back["step"] == 4 and back["iteration"] == 4 and back["checkpoint_version"] == 3.0
    assert back["train_state_keys"] == sorted(
        ["step", "consumed_train_samples", "skipped_train_samples", "consumed_valid_samples",
         "floating_point_operations_so_far", "do_train", "do_valid", "do_test"]
    )  # fmt: skip
    assert back["consumed_train_samples"] == 32 and back["scheduler_steps"] == 32
    assert back["tp_pp"] == [1, 1]
    assert back["checkpoint_keys"] == {"save_optim": True, "save_rng": True, "fully_parallel_save": True}
    assert back["content_metadata"]["distrib_optim_sharding_type"] == "dp_reshardable"
    # the weights read back are the bare run's after the same 4 iterations
    bare = torch.load(work / "bare_logits.pt")
    torch.testing.assert_close(torch.load(work / "read_back_logits.pt"), bare["at_end"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", ["mlm", "mb"])
def test_export_to_hf_without_naming_a_config(runs, layout):
    import torch
    import transformers

    work, _ = runs
    out = work / f"hf_{layout}"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts/conversion/convert_checkpoint.py"), "export",
         "--megatron-path", str(work / layout), "--hf-path", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert type(model).__name__ == "LlamaForCausalLM"
    bare = torch.load(work / "bare_logits.pt")
    with torch.no_grad():
        logits = model(bare["tokens"]).logits
    torch.testing.assert_close(logits, bare["at_saved"], rtol=0, atol=1e-5)


def test_damage_to_a_foreign_checkpoint_is_found_by_megatron_cores_metadata(runs, tmp_path):
    import shutil

    from bridge.checkpoint.integrity import check_folder

    work, _ = runs
    root = tmp_path / "mlm"
    shutil.copytree(work / "mlm", root)
    folder = root / "iter_0000002"
    assert check_folder(folder, verify=True) == []  # (and one warning: no bridge manifest)
    shard = sorted(folder.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    problems = check_folder(folder, verify=True)
    assert len(problems) == 1 and problems[0].startswith(f"{shard.name} has 100 bytes, its .metadata needs")
    shard.unlink()
    assert check_folder(folder, verify=True) == [f"{shard.name} is missing (its .metadata points into it)"]
