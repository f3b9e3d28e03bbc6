"""bridge's plain-torch Mamba kernels (bridge.parallel.ssm_kernels) against the defining recurrences.

The reference here is the state-space model as published (Mamba-2, Dao & Gu 2024, eq. 1-2), one token
at a time: h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = C_t h_t + D x_t; the causal conv1d as its
sum over the past `width` positions; the gated RMSNorm as its formula. The kernels compute the same in
float32 by chunked matmuls; float32 round-off over a 40-step recurrence of values O(1) stays below
1e-5 relative, the tolerance used.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bridge.parallel import ssm_kernels

TOL = dict(rtol=1e-5, atol=1e-5)


def _inputs(b=2, length=37, h=4, p=3, g=2, n=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, length, h, p, generator=gen)
    dt = torch.randn(b, length, h, generator=gen)
    A = -torch.rand(h, generator=gen) * 4 - 0.5
    B = torch.randn(b, length, g, n, generator=gen)
    C = torch.randn(b, length, g, n, generator=gen)
    D = torch.randn(h, generator=gen)
    dt_bias = torch.randn(h, generator=gen)
    h0 = torch.randn(b, h, p, n, generator=gen)
    return x, dt, A, B, C, D, dt_bias, h0


def _recurrence(x, dt, A, B, C, D, h0):
    b, length, h, p = x.shape
    g = B.shape[2]
    state = h0.clone()
    ys = []
    for t in range(length):
        Bt = B[:, t].repeat_interleave(h // g, dim=1)  # [b, h, n]
        Ct = C[:, t].repeat_interleave(h // g, dim=1)
        decay = torch.exp(dt[:, t] * A)[..., None, None]  # [b, h, 1, 1]
        state = decay * state + (dt[:, t][..., None, None] * x[:, t][..., None] * Bt[:, :, None, :])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ct) + D[:, None] * x[:, t])
    return torch.stack(ys, dim=1), state


@pytest.mark.parametrize("chunk", [1, 8, 16, 64])
def test_chunked_scan_equals_the_recurrence(chunk):
    x, dt, A, B, C, D, dt_bias, h0 = _inputs()
    y, final = ssm_kernels.mamba_chunk_scan_combined(
        x,
        dt,
        A,
        B,
        C,
        chunk,
        D=D,
        dt_bias=dt_bias,
        dt_softplus=True,
        initial_states=h0,
        return_final_states=True,
    )
    ref_y, ref_final = _recurrence(x, F.softplus(dt + dt_bias), A, B, C, D, h0)
    torch.testing.assert_close(y, ref_y, **TOL)
    torch.testing.assert_close(final, ref_final, **TOL)


def test_scan_gates_by_z_and_is_differentiable():
    x, dt, A, B, C, D, dt_bias, _ = _inputs(length=20)
    z = torch.randn_like(x)
    x.requires_grad_(True)
    y = ssm_kernels.mamba_chunk_scan_combined(x, dt, A, B, C, 8, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    ref, _ = _recurrence(x, F.softplus(dt + dt_bias), A, B, C, D, torch.zeros(2, 4, 3, 5))
    torch.testing.assert_close(y, ref * F.silu(z), **TOL)
    y.sum().backward()
    assert x.grad is not None and x.grad.isfinite().all()


def test_causal_conv1d_is_a_sum_over_the_past():
    gen = torch.Generator().manual_seed(1)
    x, w, bias = (
        torch.randn(2, 6, 11, generator=gen),
        torch.randn(6, 4, generator=gen),
        torch.randn(6, generator=gen),
    )
    out = ssm_kernels.causal_conv1d_fn(x, w, bias, activation="silu")
    ref = torch.zeros_like(x)
    for t in range(11):
        for k in range(4):
            src = t - 3 + k
            if src >= 0:
                ref[:, :, t] += w[:, k] * x[:, :, src]
    torch.testing.assert_close(out, F.silu(ref + bias[:, None]), **TOL)


def test_gated_rms_norm_over_groups():
    gen = torch.Generator().manual_seed(2)
    x, z, w = (
        torch.randn(3, 12, generator=gen),
        torch.randn(3, 12, generator=gen),
        torch.randn(12, generator=gen),
    )
    norm = ssm_kernels.RMSNormGated(12, eps=1e-5, group_size=4, norm_before_gate=False)
    norm.weight.data.copy_(w)
    gated = (x * F.silu(z)).reshape(3, 3, 4)
    ref = (gated * torch.rsqrt(gated.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(3, 12) * w
    torch.testing.assert_close(norm(x, z), ref, **TOL)


def test_split_conv1d_scan_is_conv_then_scan_then_gate():
    gen = torch.Generator().manual_seed(3)
    b, length, h, p, g, n, width = 2, 19, 4, 3, 2, 5, 4
    d_ssm, conv_dim = h * p, h * p + 2 * g * n
    zxbcdt = torch.randn(b, length, 2 * d_ssm + 2 * g * n + h, generator=gen)
    w, cb = torch.randn(conv_dim, width, generator=gen), torch.randn(conv_dim, generator=gen)
    A, D, dt_bias = (
        -torch.rand(h, generator=gen) - 0.5,
        torch.randn(h, generator=gen),
        torch.randn(h, generator=gen),
    )
    y = ssm_kernels.mamba_split_conv1d_scan_combined(zxbcdt, w, cb, dt_bias, A, D, 8, headdim=p, ngroups=g)
    z, xbc, dt = torch.split(zxbcdt, [d_ssm, conv_dim, h], dim=-1)
    xbc = ssm_kernels.causal_conv1d_fn(xbc.transpose(1, 2), w, cb, activation="silu").transpose(1, 2)
    x, B, C = torch.split(xbc, [d_ssm, g * n, g * n], dim=-1)
    ref, _ = _recurrence(
        x.reshape(b, length, h, p),
        F.softplus(dt + dt_bias),
        A,
        B.reshape(b, length, g, n),
        C.reshape(b, length, g, n),
        D,
        torch.zeros(b, h, p, n),
    )
    torch.testing.assert_close(y, ref.reshape(b, length, d_ssm) * F.silu(z), **TOL)


def test_packed_sequences_are_refused_by_name():
    x, dt, A, B, C, D, _, _ = _inputs(length=8)
    with pytest.raises(NotImplementedError, match="seq_idx"):
        ssm_kernels.mamba_chunk_scan_combined(x, dt, A, B, C, 4, seq_idx=torch.zeros(2, 8, dtype=torch.int32))
