"""Plain-torch reference kernels for Megatron-Core's Mamba mixer on a machine without CUDA.

On GPU the mixer calls `mamba_ssm` (the chunked SSD scan, the gated RMSNorm) and `causal_conv1d`.
Neither builds without CUDA; these functions take their call signatures (the arguments Megatron-Core
0.16.1 / 0.19.2 passes) and compute the same quantities in torch, in float32:

- `mamba_chunk_scan_combined`: Mamba-2's selective state space, h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t,
  y_t = C_t h_t + D x_t, computed by state-space duality (Dao & Gu, 2024, "Transformers are SSMs",
  section 6): the sequence is cut into chunks; inside a chunk the output is a masked, decayed
  attention-like product (one matmul), the state each chunk hands on is one matmul, and the states
  are passed between chunks by one more (a chunk-by-chunk decay matrix). No loop over tokens.
- `mamba_split_conv1d_scan_combined`: the training path: in_proj's output split into z, xBC, dt;
  causal depthwise conv + SiLU on xBC; the scan; y * silu(z) (or the gated RMSNorm when its weight is
  given).
- `causal_conv1d_fn`: a depthwise conv1d over the past `width` positions (a left-padded F.conv1d).
- `RMSNormGated`: RMSNorm over groups of channels, of x * silu(z) (norm_before_gate=False, the
  mixer's setting) or followed by the gate.

Autograd differentiates them (the fused kernels have hand-written backward passes; here torch's
suffices). `bridge.parallel.ssm_backend` installs them into the mixer's module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _unsupported(name: str, what: str):
    return NotImplementedError(
        f"{name}: {what} is not implemented by bridge's plain-torch Mamba kernels (CPU); "
        "it needs mamba_ssm / causal_conv1d on a CUDA machine"
    )


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [..., T, T]: out[i, j] = a[j+1] + ... + a[i] for i >= j, -inf above the diagonal.
    Summed from the masked values themselves (not as a difference of two cumulative sums), so long
    chunks keep float32 precision."""
    t = a.shape[-1]
    x = a[..., None].expand(*a.shape, t)  # x[..., k, j] = a[k]
    below = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=-1)
    x = x.masked_fill(~below, 0.0)
    out = torch.cumsum(x, dim=-2)
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=0)
    return out.masked_fill(~keep, float("-inf"))


def ssd_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD scan in float32. x [b, l, h, p]; dt [b, l, h] (already biased, softplus-ed and
    clamped); A [h]; B, C [b, l, g, n] with h a multiple of g (head i reads group i // (h / g));
    initial_states [b, h, p, n] or None. Returns y [b, l, h, p] (without the D skip) and the final
    state [b, h, p, n]."""
    b, length, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    x, dt, A = x.float(), dt.float(), A.float()
    B = B.float().repeat_interleave(h // g, dim=2)
    C = C.float().repeat_interleave(h // g, dim=2)
    pad = (-length) % chunk_size
    if pad:  # zero dt and x past the end: no decay, no input, so the final state is unchanged
        x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    c = x.shape[1] // chunk_size
    q = chunk_size
    xdt = (x * dt[..., None]).reshape(b, c, q, h, p)
    a = (dt * A).reshape(b, c, q, h).permute(0, 3, 1, 2)  # [b, h, c, q]
    B = B.reshape(b, c, q, h, n)
    C = C.reshape(b, c, q, h, n)
    a_cum = torch.cumsum(a, dim=-1)  # [b, h, c, q]

    # 1. inside each chunk: y_i = sum_{j<=i} (C_i . B_j) exp(a_{j+1} + .. + a_i) dt_j x_j
    decay = torch.exp(_segsum(a))  # [b, h, c, q(i), q(j)]
    scores = torch.einsum("bcihn,bcjhn->bhcij", C, B) * decay
    y = torch.einsum("bhcij,bcjhp->bcihp", scores, xdt)

    # 2. the state each chunk adds by its end: sum_j exp(a_{j+1} + .. + a_end) B_j dt_j x_j
    to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [b, h, c, q]
    chunk_states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", B, to_end, xdt)

    # 3. the state entering each chunk: the chunk states decayed over the chunks between
    start = (
        initial_states.float()[:, None]
        if initial_states is not None
        else torch.zeros_like(chunk_states[:, :1])
    )
    states = torch.cat([start, chunk_states], dim=1)  # [b, c+1, h, p, n]
    chunk_decay = torch.exp(_segsum(F.pad(a_cum[..., -1], (1, 0))))  # [b, h, c+1, c+1]
    states = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)
    entering, final = states[:, :-1], states[:, -1]

    # 4. what each position reads of the state entering its chunk
    y = y + torch.einsum("bcihn,bchpn->bcihp", C, entering) * torch.exp(a_cum).permute(0, 2, 3, 1)[..., None]
    y = y.reshape(b, c * q, h, p)[:, :length]
    return y, final


def _dt(dt: torch.Tensor, dt_bias, dt_softplus: bool, dt_limit) -> torch.Tensor:
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    lo, hi = dt_limit
    if lo > 0.0 or hi != math.inf:
        dt = dt.clamp(min=lo, max=hi)
    return dt


def _skip(D: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | float:
    if D is None:
        return 0.0
    D = D.float()
    return x.float() * (D[:, None] if D.dim() == 1 else D)  # D [h] or [h, p]


def mamba_chunk_scan_combined(
    x,
    dt,
    A,
    B,
    C,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    seq_idx=None,
    cu_seqlens=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    return_varlen_states=False,
    **kwargs,
):
    """mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined's contract: x [b, l, h, p],
    dt [b, l, h], A [h], B / C [b, l, g, n], D [h] or [h, p], z [b, l, h, p] (y * silu(z))."""
    if seq_idx is not None or cu_seqlens is not None or return_varlen_states:
        raise _unsupported("mamba_chunk_scan_combined", "packed sequences (seq_idx / cu_seqlens)")
    y, final = ssd_scan(x, _dt(dt, dt_bias, dt_softplus, dt_limit), A, B, C, chunk_size, initial_states)
    y = y + _skip(D, x)
    if z is not None:
        y = y * F.silu(z.float())
    y = y.to(x.dtype)
    return (y, final) if return_final_states else y


def causal_conv1d_fn(
    x,
    weight,
    bias=None,
    seq_idx=None,
    initial_states=None,
    return_final_states=False,
    activation=None,
    **kwargs,
):
    """causal_conv1d's contract: x [b, d, l], weight [d, w]; out[t] = sum_k w[k] x[t - (w-1) + k]
    (+ bias), then SiLU when activation is "silu" / "swish"."""
    if seq_idx is not None or return_final_states:
        raise _unsupported("causal_conv1d_fn", "seq_idx / return_final_states")
    width = weight.shape[-1]
    if initial_states is not None:  # [b, d, w-1]: the positions before x
        x_in = torch.cat([initial_states.to(x.dtype), x], dim=-1)
    else:
        x_in = F.pad(x, (width - 1, 0))
    out = F.conv1d(x_in, weight.unsqueeze(1).to(x.dtype), bias, groups=x.shape[1])
    if activation in ("silu", "swish"):
        out = F.silu(out)
    elif activation is not None:
        raise _unsupported("causal_conv1d_fn", f"activation={activation!r}")
    return out


def mamba_split_conv1d_scan_combined(
    zxbcdt,
    conv1d_weight,
    conv1d_bias,
    dt_bias,
    A,
    D,
    chunk_size,
    initial_states=None,
    seq_idx=None,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    activation="silu",
    rmsnorm_weight=None,
    rmsnorm_eps=1e-6,
    outproj_weight=None,
    outproj_bias=None,
    headdim=None,
    ngroups=1,
    norm_before_gate=True,
    **kwargs,
):
    """mamba_ssm's fused training path: zxbcdt [b, l, 2 d_ssm + 2 g n + h] -> [b, l, d_ssm] (or
    [b, l, out] with outproj_weight)."""
    if seq_idx is not None:
        raise _unsupported("mamba_split_conv1d_scan_combined", "packed sequences (seq_idx)")
    nheads = A.shape[0]
    if D.dim() > 1:
        headdim = D.shape[-1]
    d_ssm = nheads * headdim
    dstate = (zxbcdt.shape[-1] - 2 * d_ssm - nheads) // (2 * ngroups)
    z, xbc, dt = torch.split(zxbcdt, [d_ssm, d_ssm + 2 * ngroups * dstate, nheads], dim=-1)
    xbc = causal_conv1d_fn(xbc.transpose(1, 2), conv1d_weight, conv1d_bias, activation=activation)
    x, B, C = torch.split(xbc.transpose(1, 2), [d_ssm, ngroups * dstate, ngroups * dstate], dim=-1)
    b, length = x.shape[:2]
    out = mamba_chunk_scan_combined(
        x.reshape(b, length, nheads, headdim),
        dt,
        A,
        B.reshape(b, length, ngroups, dstate),
        C.reshape(b, length, ngroups, dstate),
        chunk_size,
        D=D,
        z=None if rmsnorm_weight is not None else z.reshape(b, length, nheads, headdim),
        dt_bias=dt_bias,
        initial_states=initial_states,
        dt_softplus=True,
        dt_limit=dt_limit,
        return_final_states=return_final_states,
    )
    y, final = out if return_final_states else (out, None)
    y = y.reshape(b, length, d_ssm)
    if rmsnorm_weight is not None:
        y = gated_rms_norm(y, z, rmsnorm_weight, rmsnorm_eps, d_ssm // ngroups, norm_before_gate)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y


def gated_rms_norm(x, z, weight, eps: float, group_size: int, norm_before_gate: bool):
    """RMSNorm over groups of `group_size` channels; gated by silu(z) before (norm_before_gate=False)
    or after the norm. float32 inside, x's dtype out."""
    dtype = x.dtype
    h = x.float()
    if z is not None and not norm_before_gate:
        h = h * F.silu(z.float())
    shape = h.shape
    groups = h.reshape(*shape[:-1], shape[-1] // group_size, group_size)
    groups = groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + eps)
    h = groups.reshape(shape) * weight.float()
    if z is not None and norm_before_gate:
        h = h * F.silu(z.float())
    return h.to(dtype)


class RMSNormGated(torch.nn.Module):
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm's contract (weight only, no bias)."""

    def __init__(
        self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None
    ):
        super().__init__()
        self.eps = eps
        self.group_size = group_size or hidden_size
        self.norm_before_gate = norm_before_gate
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)

    def forward(self, x, z=None):
        return gated_rms_norm(x, z, self.weight, self.eps, self.group_size, self.norm_before_gate)
