"""Gated DeltaNet: the CPU reference kernels against transformers' token-by-token recurrence, the
refusal on CUDA without flash-linear-attention, and the provider's field checks (in the plan)."""

from __future__ import annotations

import pytest
import torch

from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.parallel import cpu_kernels


def _inputs(length: int, key_heads: int, value_heads: int, dtype=torch.float64):
    torch.manual_seed(0)
    b, dk, dv = 2, 16, 8
    q = torch.randn(b, length, key_heads, dk, dtype=dtype)
    k = torch.randn(b, length, key_heads, dk, dtype=dtype)
    v = torch.randn(b, length, value_heads, dv, dtype=dtype)
    g = -2 * torch.rand(b, length, value_heads, dtype=dtype)  # log decay in (-2, 0)
    beta = torch.rand(b, length, value_heads, dtype=dtype)
    return q, k, v, g, beta


def _recurrence(q, k, v, g, beta):
    """The gated delta rule by its definition, one token at a time (float64): S_t = exp(g_t) S_{t-1}
    + beta_t k_t (v_t - k_t^T exp(g_t) S_{t-1}), o_t = S_t^T q_t / sqrt(d_k), q and k L2-normalised
    as fla and transformers do it (x / sqrt(sum x^2 + 1e-6))."""
    q, k = (t * torch.rsqrt((t * t).sum(dim=-1, keepdim=True) + 1e-6) for t in (q, k))
    rep = v.shape[2] // k.shape[2]
    q, k = (t.repeat_interleave(rep, dim=2) for t in (q, k))
    state = torch.zeros(q.shape[0], v.shape[2], k.shape[-1], v.shape[-1], dtype=v.dtype)
    out = []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], error * beta[:, t, :, None])
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * q.shape[-1] ** -0.5, state))
    return torch.stack(out, dim=1), state


@pytest.mark.parametrize("length", [1, 64, 150])  # one token, one whole chunk, three chunks (padded)
def test_chunked_gated_delta_rule_equals_the_recurrence(length):
    # float64: the same function computed two ways, so only float64 rounding separates them (1e-16
    # relative per operation; 1e-12 leaves room for the 64-token triangular solve and 150 steps).
    # transformers' own recurrence computes in float32: within 1e-6 of it (outputs of order 0.1,
    # float32's 6e-8 per operation accumulated over up to 150 steps).
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    q, k, v, g, beta = _inputs(length, key_heads=2, value_heads=4)
    ref, ref_state = _recurrence(q, k, v, g, beta)
    out, state = cpu_kernels.chunk_gated_delta_rule(
        q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert out.dtype == torch.float64 and out.shape == ref.shape
    assert (out - ref).abs().max().item() < 1e-12
    assert (state - ref_state).abs().max().item() < 1e-12
    theirs, _ = torch_recurrent_gated_delta_rule(
        q, k, v, g=g, beta=beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True
    )
    assert (out - theirs.double()).abs().max().item() < 1e-6


def test_initial_state_carries_across_calls():
    # Two calls, the first's final state handed to the second, equal one call over both halves.
    q, k, v, g, beta = _inputs(100, key_heads=4, value_heads=4)
    whole, _ = cpu_kernels.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    first, state = cpu_kernels.chunk_gated_delta_rule(
        *(t[:, :70] for t in (q, k, v, g, beta)), output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    second, _ = cpu_kernels.chunk_gated_delta_rule(
        *(t[:, 70:] for t in (q, k, v, g, beta)), initial_state=state, use_qk_l2norm_in_kernel=True
    )
    assert (torch.cat([first, second], dim=1) - whole).abs().max().item() < 1e-10


def test_causal_conv1d_is_torchs_left_padded_depthwise_conv():
    torch.manual_seed(0)
    x, w = torch.randn(2, 9, 6), torch.randn(6, 4)
    y, _ = cpu_kernels.causal_conv1d(x, w, activation="silu")
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3, bias=False)
    conv.weight.data.copy_(w.unsqueeze(1))
    ref = torch.nn.functional.silu(conv(x.transpose(1, 2))[..., :9]).transpose(1, 2)
    assert torch.allclose(y, ref, atol=1e-6)
    assert torch.equal(y[:, :3], cpu_kernels.causal_conv1d(x[:, :3], w, activation="silu")[0])  # causal


def _gdn(**fields) -> GPTModelProvider:
    base = dict(
        num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2, kv_channels=16,
        ffn_hidden_size=96, vocab_size=256, normalization="RMSNorm", activation_func="silu",
        gated_linear_unit=True, position_embedding_type="rope", attention_output_gate=True,
        experimental_attention_variant="gated_delta_net", linear_attention_freq=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
    )  # fmt: skip
    return GPTModelProvider(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            dict(tensor_model_parallel_size=4),
            r"tensor_model_parallel_size = 4: must divide linear_num_key_heads=2",
        ),
        (
            dict(linear_num_value_heads=3),
            r"linear_num_value_heads = 3: must be a multiple of linear_num_key_heads",
        ),
        (dict(linear_attention_freq=None), r"linear_attention_freq = None: with Gated DeltaNet"),
        (dict(context_parallel_size=2), r"context_parallel_size = 2: Gated DeltaNet layers have no context"),
    ],
)
def test_fields_megatron_core_cannot_build_are_refused(fields, message):
    with pytest.raises(ConfigError, match=message):
        _gdn(**fields).finalize()


def test_the_plan_refuses_them_too():
    from bridge.config.run_plan import build_plan
    from recipes.qwen3_next import qwen3_next_80b_a3b_pretrain_config

    cfg = qwen3_next_80b_a3b_pretrain_config()
    cfg.model.tensor_model_parallel_size = 32
    with pytest.raises(ConfigError, match="must divide linear_num_key_heads=16"):
        build_plan(cfg, world_size=256)


def test_cuda_without_fla_is_one_error_naming_the_package(monkeypatch):
    import importlib.util

    from bridge.models import linear_attention

    real = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fla" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"flash-linear-attention.*Fix: pip install flash-linear-attention"):
        linear_attention.ensure_kernels()
