"""Self attention whose sliding-window layers rotate q and k with a RoPE of their own (Gemma 3).

GPTModel computes one rotary embedding for every layer: here it is the global layers' (rotary_base,
seq_len_interpolation_factor: Gemma 3's rope_theta and linear rope_scaling). The layers
`is_layer_window_attention(window_size, window_attn_skip_freq, layer_number)` selects (layer_number is
global under pipeline parallelism) replace it with an embedding of the same length from their own
RotaryEmbedding: base local_rotary_base (rope_local_base_freq), no scaling. Same length, so the
inference slicing of Megatron-Core's Attention applies to it unchanged. Context parallelism (a
CP-sliced embedding) and the fused cos/sin paths are refused by the model build / here.
"""

from __future__ import annotations

from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.utils import is_layer_window_attention


class LocalRopeSelfAttention(SelfAttention):
    """SelfAttention; on sliding-window layers, the rotary embedding of base `local_rotary_base`."""

    def __init__(self, config, submodules, layer_number, *args, local_rotary_base: float, **kwargs):
        super().__init__(config, submodules, layer_number, *args, **kwargs)
        self.local_rotary = None
        if is_layer_window_attention(config.window_size, config.window_attn_skip_freq, self.layer_number):
            # A plain attribute, not a submodule: no state, nothing for checkpoints or conversion.
            object.__setattr__(
                self,
                "local_rotary",
                RotaryEmbedding(
                    kv_channels=config.kv_channels,
                    rotary_percent=1.0,
                    rotary_interleaved=config.rotary_interleaved,
                    rotary_base=local_rotary_base,
                    use_cpu_initialization=config.use_cpu_initialization,
                ),
            )

    def forward(self, hidden_states, attention_mask, *args, rotary_pos_emb=None, **kwargs):
        if self.local_rotary is not None:
            if kwargs.get("rotary_pos_cos") is not None or kwargs.get("rotary_pos_cos_sin") is not None:
                raise NotImplementedError("per-layer RoPE has no fused cos/sin (flash decode) path")
            if rotary_pos_emb is not None:
                rotary_pos_emb = self.local_rotary(rotary_pos_emb.size(0))
        return super().forward(hidden_states, attention_mask, *args, rotary_pos_emb=rotary_pos_emb, **kwargs)
