"""Nothing dropped in silence, and multi-token prediction (MTP) in and out of Hugging Face folders (TP=1).

A checkpoint tensor no parameter maps is an error naming it, or (omit_unmapped) a listed omission that
an export carries back; DeepSeek-V3 / GLM-4.5 MTP layers, named as the published checkpoints
(tests/functional/workers/mtp_checkpoint.py), import into Megatron-Core's MTP block and export
bit-identically; a model built with mtp_num_layers=0 lists them as left out and the export carries them.
"""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import read_tensors
from tests.functional.workers.mtp_checkpoint import save_mtp_folder

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups(single_process_groups):  # tests/unit/conftest.py
    yield


@pytest.fixture(scope="module")
def v3_mtp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("v3_mtp") / "hf"
    model, extra = save_mtp_folder("deepseek_v3", folder)
    return folder, model, extra


def _build(folder, **fields):
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    omit = fields.pop("omit_unmapped", False)
    provider = bridge.to_megatron_provider(load_weights=True, omit_unmapped=omit)
    for k, v in fields.items():
        setattr(provider, k, v)
    return bridge, provider, provider.provide_distributed_model(wrap_with_ddp=False)


def _add(folder, extra):
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    save_file({**load_file(str(path)), **extra}, str(path), metadata={"format": "pt"})


def test_unknown_tensor_is_an_error_and_omit_unmapped_lists_it_and_export_carries_it(
    family_sources, tmp_path, caplog
):
    from bridge import AutoBridge

    folder = tmp_path / "llama"
    shutil.copytree(family_sources["llama"][0], folder)
    extra = {f"model.layers.0.extra{i}.weight": torch.full((3,), float(i)) for i in range(7)}
    _add(folder, extra)
    with pytest.raises(ConfigError, match=r"7 tensor\(s\) the model does not use: model\.layers\.0\.extra0") as e:
        AutoBridge.import_ckpt(folder, tmp_path / "never")
    assert "(7 in all)" in str(e.value) and "--omit-unmapped" in str(e.value)
    assert not (tmp_path / "never").exists()

    caplog.set_level(logging.WARNING)
    AutoBridge.import_ckpt(folder, tmp_path / "mcore", omit_unmapped=True)
    assert all(name in caplog.text for name in extra) and "omit_unmapped=True" in caplog.text
    # the export from the imported checkpoint's hf_assets (names only) cannot be silently smaller ...
    imported = AutoBridge.from_megatron_checkpoint(tmp_path / "mcore")
    with pytest.raises(ConfigError, match=r"7 tensor\(s\) fewer than its source checkpoint"):
        imported.export_ckpt(tmp_path / "mcore", tmp_path / "small")
    # ... unless asked (listed), and with the source folder the omitted tensors are carried unchanged
    caplog.clear()
    imported.export_ckpt(tmp_path / "mcore", tmp_path / "small", omit_unmapped=True)
    assert set(read_tensors(folder)) - set(read_tensors(tmp_path / "small")) == set(extra)
    assert all(name in caplog.text for name in extra)
    AutoBridge.from_hf_pretrained(folder).export_ckpt(tmp_path / "mcore", tmp_path / "full")
    src, out = read_tensors(folder), read_tensors(tmp_path / "full")
    assert src.keys() == out.keys() and all(torch.equal(src[k], out[k]) for k in src)


def test_deepseek_v3_mtp_round_trip_is_bit_identical(v3_mtp, tmp_path):
    folder, _, extra = v3_mtp
    bridge, provider, chunks = _build(folder)
    assert provider.mtp_num_layers == 1 and len(extra) > 25  # a full MoE layer + the MTP modules
    model = chunks[0]
    assert len(model.mtp.layers) == 1
    bridge.save_hf_pretrained(chunks, tmp_path / "out")
    src, out = read_tensors(folder), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys()
    assert [k for k in src if not torch.equal(src[k], out[k])] == []
    # every MTP tensor went through a Megatron parameter: the MTP block holds them
    params = dict(model.named_parameters())
    assert torch.equal(params["mtp.layers.0.eh_proj.weight"], extra["model.layers.2.eh_proj.weight"])


def test_mtp_copies_must_equal_the_main_tensors(v3_mtp, tmp_path):
    folder = tmp_path / "v3"
    shutil.copytree(v3_mtp[0], folder)
    _add(folder, {"model.layers.2.shared_head.head.weight": torch.zeros_like(v3_mtp[2]["model.layers.2.shared_head.head.weight"])})
    with pytest.raises(ConfigError, match=r"'model\.layers\.2\.shared_head\.head\.weight' differs from 'lm_head\.weight'"):
        _build(folder)


def test_mtp_switched_off_lists_the_layer_and_export_carries_it_back(v3_mtp, tmp_path, caplog):
    folder, _, extra = v3_mtp
    caplog.set_level(logging.WARNING)
    from bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider(load_weights=True)
    provider.mtp_num_layers = None  # a finetune without MTP (model.mtp_num_layers=0)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    assert not hasattr(chunks[0], "mtp") or chunks[0].mtp is None or not chunks[0].mtp_process
    assert "fewer model.mtp_num_layers" in caplog.text and all(n in caplog.text for n in extra)
    bridge.save_hf_pretrained(chunks, tmp_path / "out")
    src, out = read_tensors(folder), read_tensors(tmp_path / "out")
    assert src.keys() == out.keys() and all(torch.equal(src[k], out[k]) for k in src)
