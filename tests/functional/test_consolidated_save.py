"""checkpoint.save_consolidated on 2 gloo ranks (tests/functional/workers/consolidated_save.py): each
checkpoint holds a Hugging Face folder that transformers loads with the trained model's logits (fp32),
for strategy fsdp2 (shards gathered over dp) and strategy megatron; the copy is in the manifest."""

from __future__ import annotations

import json

import pytest

from tests.functional.launch import REPO_ROOT, assert_ok, payloads, torchrun

WORKER = REPO_ROOT / "tests/functional/workers/consolidated_save.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("consolidated")
    out = assert_ok(torchrun(WORKER, 2, str(work), timeout=400))
    return work, {r["strategy"]: r for r in payloads(out, "consolidated") if "max_abs_diff" in r}


@pytest.mark.parametrize("strategy", ["fsdp2", "megatron"])
def test_transformers_loads_the_copy_with_equal_logits(run, strategy):
    work, records = run
    r = records[strategy]
    assert r["files"] == ["config.json", "model.safetensors"]
    assert r["max_abs_diff"] <= 1e-5 * r["logit_scale"], r
    manifest = json.loads((work / strategy / "iter_0000002" / "manifest.json").read_text())
    assert "consolidated/model.safetensors" in manifest["files"]  # published and verified with the checkpoint


def test_a_run_from_scratch_exports_as_its_hf_architecture(run):
    # no --hf-config and no HF source: config.json from the saved run config (checkpoint.hf_architecture)
    import json as _json

    from tests.functional.workers.convert_models import bit_identical, read_tensors

    work, _ = run
    out = work / "exported"
    assert_ok(
        torchrun(
            REPO_ROOT / "scripts/conversion/convert_checkpoint.py", 1, "export",
            "--megatron-path", str(work / "megatron"), "--hf-path", str(out),
        )
    )  # fmt: skip
    copy = work / "megatron" / "iter_0000002" / "consolidated"
    assert bit_identical(read_tensors(out), read_tensors(copy)) is None
    config = _json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config == _json.loads(
        (copy / "config.json").read_text()
    )
