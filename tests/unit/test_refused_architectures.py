"""The 2026 architectures Megatron-Core cannot compute (DeepSeek sparse attention, DeepSeek-V4, Gemma 4,
MiMo-V2-Flash, Qwen3-VL, Falcon-H1's parallel Mamba + attention layers) are refused with one error that names what is
missing and the releases, from a config.json with transformers' model type for it (Falcon-H1: a folder
transformers saved); the DSA reason is checked against the installed Megatron-Core's code."""

from __future__ import annotations

import json

import pytest

from bridge.errors import ConfigError

# architecture -> (transformers' model type, words the refusal must name)
REFUSED = {
    "DeepseekV32ForCausalLM": ("deepseek_v32", ("index_topk", "fast_hadamard_transform", "bf16")),
    "GlmMoeDsaForCausalLM": ("glm_moe_dsa", ("index_topk", "fast_hadamard_transform", "GLM-4.7-Flash")),
    "DeepseekV4ForCausalLM": ("deepseek_v4", ("hyper-connections", "compressed sparse attention", "hash")),
    "Gemma4ForCausalLM": ("gemma4_text", ("global_head_dim", "v_norm", "num_kv_shared_layers")),
    "MiMoV2FlashForCausalLM": ("mimo_v2_flash", ("v_head_dim", "key/value heads", "attention_value_scale")),
}


@pytest.mark.parametrize("architecture", sorted(REFUSED))
def test_refused_with_what_is_missing(architecture, tmp_path):
    from bridge.conversion.registry import family_for
    from bridge.models.hf_translation.common import read_config_json

    model_type, words = REFUSED[architecture]
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": [architecture], "model_type": model_type})
    )
    with pytest.raises(ConfigError) as caught:
        family_for(read_config_json(tmp_path / "config.json")["architectures"])
    message = str(caught.value)
    assert architecture in message and "0.16.1" in message and "0.19.2" in message
    assert all(w in message for w in words), (words, message)


def test_dsa_rotation_needs_the_cuda_kernel_and_bf16():
    # what the DSA refusal says, on the installed release: the indexer's Hadamard rotation refuses fp32
    # input, and without fast_hadamard_transform (a CUDA extension) bf16 input too
    import importlib.util

    torch = pytest.importorskip("torch")
    dsa = pytest.importorskip("megatron.core.transformer.experimental_attention_variant.dsa")
    with pytest.raises(AssertionError, match="bf16"):
        dsa.rotate_activation(torch.zeros(2, 8, dtype=torch.float32))
    if importlib.util.find_spec("fast_hadamard_transform") is None:
        with pytest.raises(AssertionError, match="fast_hadamard_transform"):
            dsa.rotate_activation(torch.zeros(2, 8, dtype=torch.bfloat16))


def test_a_falcon_h1_folder_is_refused_with_what_megatron_core_lacks(tmp_path):
    """Converting a tiny FalconH1ForCausalLM saved by transformers: one ConfigError naming its parallel
    Mamba + attention layers, the multipliers and the releases."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")

    from bridge import AutoBridge

    config = transformers.FalconH1Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, mamba_d_ssm=32, mamba_n_heads=2, mamba_d_head=16, mamba_d_state=8,
        mamba_chunk_size=8, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.FalconH1ForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(ConfigError) as caught:
        AutoBridge.from_hf_pretrained(tmp_path).to_megatron_provider(load_weights=True)
    message = str(caught.value)
    assert message.startswith("architectures=['FalconH1ForCausalLM']: Falcon-H1:"), message
    words = ("side by side", "ssm_multipliers", "hybrid_override_pattern", "0.16.1", "0.19.2", "Nemotron-H")
    assert all(w in message for w in words), message
