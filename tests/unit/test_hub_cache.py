"""AutoBridge.from_hf_pretrained("org/name"): a Hub model id that is not a local path resolves to its
snapshot in the local Hugging Face cache without the network; a model in neither place is one
ConfigError when offline."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("huggingface_hub")

from bridge.conversion.auto_bridge import AutoBridge  # noqa: E402
from bridge.errors import ConfigError  # noqa: E402
from tests.finetune_fixtures import make_tiny_llama  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # "org/tiny-llama" is no local path here
    return cache


def test_a_cached_model_id_resolves_offline(hub_cache, tmp_path):
    folder = make_tiny_llama(tmp_path / "src")
    repo = hub_cache / "models--org--tiny-llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    bridge = AutoBridge.from_hf_pretrained("org/tiny-llama")
    assert bridge.hf_path == repo / "snapshots" / COMMIT
    assert bridge.family.architectures == ("LlamaForCausalLM",)
    direct = AutoBridge.from_hf_pretrained(folder)  # the same model as from its folder
    assert bridge._provider_fields == direct._provider_fields


def test_an_uncached_model_id_offline_is_one_config_error(hub_cache):
    with pytest.raises(
        ConfigError, match=r"hf_path='org/absent' is not a local folder and not in the Hugging Face cache"
    ):
        AutoBridge.from_hf_pretrained("org/absent")
