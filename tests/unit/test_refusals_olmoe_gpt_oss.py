"""Config.json settings of the OLMoE and GPT-OSS families that Megatron-Core cannot compute as
transformers does: each is one ConfigError naming the HF field, never a model computing something else."""

import pytest

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import make_hf_config

pytest.importorskip("transformers")


def fields_of(config):
    from bridge.conversion.registry import family_for
    from bridge.models.hf_translation.read import provider_fields

    return provider_fields(config, family_for(config.architectures))


@pytest.mark.parametrize(
    "family,change,message",
    [
        ("olmoe", dict(clip_qkv=8.0), "clip_qkv=8.0"),
        ("olmoe", dict(mlp_only_layers=[1]), r"mlp_only_layers=\[1\]"),
        ("olmoe", dict(decoder_sparse_step=2), "decoder_sparse_step=2"),
    ],
)
def test_refused(family, change, message):
    with pytest.raises(ConfigError, match=message):
        fields_of(make_hf_config(family, **change))


def test_olmoe_reads_its_published_routing():
    fields = fields_of(make_hf_config("olmoe"))
    assert fields["moe_router_pre_softmax"] is True  # softmax over all experts, top-k not renormalised
    assert (fields["qk_layernorm"], fields["qk_layernorm_scope"]) == (True, "projection")
    assert "moe_layer_freq" not in fields  # every layer MoE
