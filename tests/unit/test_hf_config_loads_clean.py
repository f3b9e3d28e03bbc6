"""The config.json bridge writes (a from-scratch export, a consolidated copy) and the README's tiny model
load in transformers without a warning: transformers 5's keys (`dtype`, `rope_parameters`) and a
`max_position_embeddings` consistent with a scaled RoPE (issue 29, item 4). Warnings are errors here, and
so is any record transformers logs at WARNING or above."""

from __future__ import annotations

import contextlib
import json
import logging
import warnings

import pytest

from bridge.conversion.registry import family_for
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hf_translation.read import provider_fields
from bridge.models.hf_translation.write import hf_config_dict
from bridge.models.provider_kinds import provider_class
from tests.functional.workers.convert_models import FAMILIES as TINY_MODELS
from tests.functional.workers.convert_models import make_hf_config


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@contextlib.contextmanager
def nothing_said():
    """Fails on any Python warning and any transformers log record at WARNING or above."""
    handler = _Collect()
    hf_logger = logging.getLogger("transformers")
    hf_logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        hf_logger.removeHandler(handler)
    assert handler.records == [], handler.records


def _load_config(folder):
    from transformers import AutoConfig

    with nothing_said():
        return AutoConfig.from_pretrained(folder)


def _readme_run_provider() -> GPTModelProvider:
    """The README's first run: the Llama 3.2 recipe (llama3 RoPE scaling, 8192 original positions)
    shrunk to 2 layers and seq_length 64."""
    from recipes import get_recipe

    model = get_recipe("llama32_1b_pretrain_config")().model
    for name, value in dict(
        num_layers=2, hidden_size=128, ffn_hidden_size=256, num_attention_heads=4, num_query_groups=2,
        seq_length=64, vocab_size=1024,
    ).items():  # fmt: skip
        setattr(model, name, value)
    return model


def test_a_from_scratch_llama3_config_loads_clean(tmp_path):
    provider = _readme_run_provider()
    written = hf_config_dict(provider, family_for(["LlamaForCausalLM"]), "LlamaForCausalLM")
    assert "torch_dtype" not in written and "rope_scaling" not in written and "rope_theta" not in written
    assert written["dtype"] == "float32"
    rope = written["rope_parameters"]
    assert rope["rope_type"] == "llama3" and rope["rope_theta"] == provider.rotary_base
    # transformers requires original_max_position_embeddings < max_position_embeddings
    assert written["max_position_embeddings"] > rope["original_max_position_embeddings"] == 8192
    (tmp_path / "config.json").write_text(json.dumps(written))
    loaded = _load_config(tmp_path)
    assert loaded.rope_parameters["factor"] == provider.rope_scaling_factor
    assert provider_fields(loaded, family_for(["LlamaForCausalLM"]))["rope_scaling"] is True


@pytest.mark.parametrize("family", list(TINY_MODELS))  # every family's tiny-model test data
def test_every_familys_written_config_loads_clean(family, tmp_path):
    # configs only (no weights), with a vocabulary holding the class-default special token ids (Phi-3's
    # eos 32000, OLMo 2's 50279, MiniMax-M2's bos 200034), which config.json leaves to transformers' class
    # defaults
    hf = make_hf_config(family, vocab_size=200064 if family == "minimax_m2" else 50304)
    fam = family_for(hf.architectures)
    fields = provider_fields(hf, fam)
    written = hf_config_dict(provider_class(fam.provider_kind)(**fields), fam, hf.architectures[0])
    assert "torch_dtype" not in written and "rope_scaling" not in written
    (tmp_path / "config.json").write_text(json.dumps(written))
    assert provider_fields(_load_config(tmp_path), fam) == fields


def test_the_readme_tiny_model_loads_clean(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.finetune_fixtures import make_tiny_llama

    with nothing_said():
        make_tiny_llama(tmp_path / "tiny")  # no `torch_dtype` deprecation either
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert "torch_dtype" not in config and config["dtype"] == "float32"
    with nothing_said():
        AutoTokenizer.from_pretrained(tmp_path / "tiny")
        AutoModelForCausalLM.from_pretrained(tmp_path / "tiny")
