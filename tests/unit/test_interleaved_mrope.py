"""Interleaved M-RoPE (bridge.models.interleaved_mrope) against transformers' Qwen3-VL text rotary
embedding, the published reference of the layout (frequency i from position axis i mod 3)."""

from __future__ import annotations

import pytest
import torch
from megatron.core.models.common.embeddings.rotary_pos_embedding import MultimodalRotaryEmbedding
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.interleaved_mrope import InterleavedMultimodalRotaryEmbedding, interleaved_mrope_axes

# Qwen3-VL's published text rotary: head_dim 128, mrope_section [24, 20, 20], rope_theta 5e6.
HEAD, SECTION, THETA = 128, [24, 20, 20], 5_000_000.0


def _positions() -> torch.Tensor:
    # Three different position grids (as image tokens get), [3, batch 2, seq 40].
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 4000, (3, 2, 40), generator=g)


def _ours_and_contiguous(monkeypatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not torch.cuda.is_available():  # MultimodalRotaryEmbedding puts its frequencies on the CUDA device
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    core = MultimodalRotaryEmbedding(kv_channels=HEAD, rotary_percent=1.0, rotary_base=THETA)
    pos = _positions()
    contiguous = core(pos, SECTION)
    ours = InterleavedMultimodalRotaryEmbedding(core)(pos, SECTION)
    return pos, ours, contiguous


def test_interleaved_mrope_equals_transformers_and_contiguous_does_not(monkeypatch):
    pos, ours, contiguous = _ours_and_contiguous(monkeypatch)
    cfg = Qwen3VLTextConfig(
        head_dim=HEAD,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": THETA,
            "mrope_section": SECTION,
            "mrope_interleaved": True,
        },
    )
    cos, sin = Qwen3VLTextRotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), pos)  # [b, s, head]
    assert ours.shape == (40, 2, 1, HEAD)
    angles = ours[:, :, 0].transpose(0, 1)
    # Both take the fp32 product position * inv_freq (the same inverse frequencies, the same operation) and
    # pick the same product per channel, so the cos / sin agree to fp32 rounding of cos / sin alone (1 ulp
    # of values at most 1: 2**-23 ~ 1.2e-7; 1e-6 leaves headroom).
    torch.testing.assert_close(angles.cos(), cos, atol=1e-6, rtol=0)
    torch.testing.assert_close(angles.sin(), sin, atol=1e-6, rtol=0)
    # The contiguous layout (Megatron-Core's) rotates the same channels by other axes' positions: a
    # different rotation by O(1), so the check above can fail.
    off = (contiguous[:, :, 0].transpose(0, 1).cos() - cos).abs().max().item()
    assert off > 0.5, off


def test_axes_follow_i_mod_3_up_to_the_section_counts():
    axes = interleaved_mrope_axes(SECTION, HEAD // 2).tolist()
    assert axes[:6] == [0, 1, 2, 0, 1, 2]
    assert [axes.count(a) for a in (0, 1, 2)] == SECTION
    assert axes[60:] == [0, 0, 0, 0]  # past 3 * 20 the temporal axis takes the rest


def test_mrope_interleaved_needs_mrope():
    p = GPTModelProvider(
        num_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        mrope_interleaved=True,
        position_embedding_type="rope",
    )
    with pytest.raises(ConfigError, match="mrope_interleaved"):
        p.finalize()
