"""Qwen3 0.6B's YaRN 128K SFT recipe (recipes/qwen3.py): the RoPE its provider fields build in
Megatron-Core (YarnRotaryEmbedding, what GPTModel builds for position_embedding_type "yarn") is
transformers' Qwen3 rotary embedding under the same rope scaling."""

from __future__ import annotations

import pytest
import torch

from recipes import get_recipe

NAME = "qwen3_600m_sft_8gpu_h100_bf16_yarn_128k_config"


def test_yarn_fields_build_transformers_qwen3_yarn_rope(monkeypatch):
    yarn = pytest.importorskip("megatron.core.models.common.embeddings.yarn_rotary_pos_embedding")
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    from transformers import Qwen3Config

    m = get_recipe(NAME)().model
    assert (m.position_embedding_type, m.seq_length, m.context_parallel_size) == ("yarn", 131072, 8)
    if not torch.cuda.is_available():  # get_emb moves its frequencies to the current CUDA device
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    core = yarn.YarnRotaryEmbedding(
        kv_channels=m.kv_channels,
        rotary_percent=1.0,
        rotary_base=m.rotary_base,
        scaling_factor=m.yarn_rotary_scaling_factor,
        original_max_position_embeddings=m.yarn_original_max_position_embeddings,
        beta_fast=m.yarn_beta_fast,
        beta_slow=m.yarn_beta_slow,
        mscale=m.yarn_mscale,
        mscale_all_dim=m.yarn_mscale_all_dim,
        correction_range_round_to_int=m.yarn_correction_range_round_to_int,
        use_cpu_initialization=True,
    )
    positions = torch.tensor([0, 1, 4095, 40959, 40960, 100_000, 131_071])
    emb, scale = core.forward(131072)
    emb = emb.reshape(131072, -1)[positions].double()

    # Qwen/Qwen3-0.6B's config.json with the rope scaling the recipe states
    hf = Qwen3Config(
        head_dim=128,
        hidden_size=1024,
        num_attention_heads=16,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1_000_000.0,
            "factor": 131072 / 40960,
            "original_max_position_embeddings": 40960,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "truncate": False,
        },
    )
    rope = qwen3.Qwen3RotaryEmbedding(hf)
    cos, sin = rope(torch.zeros(1, dtype=torch.float64), positions[None])
    torch.testing.assert_close((emb.cos() * scale).float(), cos[0].float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close((emb.sin() * scale).float(), sin[0].float(), rtol=1e-4, atol=1e-4)
    # and the scaling is not a no-op: unscaled RoPE differs at long positions
    plain = 1.0 / (1_000_000.0 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128))
    assert not torch.allclose(emb[-1, :64], positions[-1].double() * plain, rtol=1e-3)
