"""Plain-torch reference kernels for the GPU-only packages Megatron-Core's Gated DeltaNet calls.

Megatron-Core's GatedDeltaNet (megatron.core.ssm.gated_delta_net, 0.16.1 and 0.19.x) takes its L2 norm,
its chunked gated delta rule and (0.19.x) its short causal convolution from `fla`
(flash-linear-attention, Triton kernels) and refuses to build without it. Without CUDA the CPU backend
installs these functions in their place (`install_gated_delta_net_kernels`), with fla's signatures:

* `l2norm(x)`: x / sqrt(sum(x^2) + 1e-6) over the last dimension (fla's and transformers' eps).
* `chunk_gated_delta_rule(q, k, v, g, beta, ...)`: the gated delta rule
  S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T, o_t = S_t^T q_t / sqrt(d_k),
  computed in chunks of 64 tokens in the WY / UT-transform form (Yang et al., "Gated Delta Networks",
  2024): inside a chunk the recurrence is one triangular solve (I + A)^-1 with A = tril(diag(beta)
  K K^T * decay, -1), batched over every chunk at once; only the chunk-to-chunk state update is a loop
  (sequence / 64 steps, not one per token).
* `causal_conv1d(x, weight, ...)`: a depthwise causal convolution (torch's conv1d, left-padded), then
  the activation, on [batch, seq, channels] as fla's.

All three compute in float32 (float64 for float64 inputs) and return the input dtype, as fla's do. On CUDA nothing is
installed: there the model needs the real package (bridge.models.linear_attention says which).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

CHUNK = 64


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6, output_dtype=None) -> torch.Tensor:
    w = x.to(torch.promote_types(x.dtype, torch.float32))
    y = w * torch.rsqrt((w * w).sum(dim=dim, keepdim=True) + eps)
    return y.to(output_dtype or x.dtype)


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = CHUNK,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k [B, T, Hk, Dk], v [B, T, H, Dv], g (log decay) and beta [B, T, H] -> (o [B, T, H, Dv],
    final state [B, H, Dk, Dv] or None); H a multiple of Hk (consecutive value heads share a key head)."""
    if cu_seqlens is not None:
        raise NotImplementedError(
            "packed sequences (cu_seqlens) in the CPU gated delta rule: not implemented; run unpacked "
            "sequences on CPU, or install flash-linear-attention on a CUDA machine"
        )
    dtype = v.dtype
    if k.shape[2] != v.shape[2]:  # fewer key heads than value heads: each serves a group of them
        q, k = (t.repeat_interleave(v.shape[2] // k.shape[2], dim=2) for t in (q, k))
    work = torch.promote_types(dtype, torch.float32)  # float32, or float64 for float64 inputs
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    # [B, H, T, D] in float32 (or float64)
    q, k, v, g, beta = (t.transpose(1, 2).to(work) for t in (q, k, v, g, beta))
    b, h, length, dk = k.shape
    dv = v.shape[-1]
    pad = (-length) % chunk_size
    if pad:  # zero keys / values and zero log-decay past the end change nothing before it
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (length + pad) // chunk_size
    q = q * (dk**-0.5 if scale is None else scale)
    q, k, v = (t.reshape(b, h, n, chunk_size, t.shape[-1]) for t in (q, k, v))
    g = g.reshape(b, h, n, chunk_size).cumsum(-1)  # log decay from the chunk start, inclusive
    beta = beta.reshape(b, h, n, chunk_size)

    lower = torch.tril(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device))
    # decay[i, j] = exp(g_i - g_j) for j <= i (masked before exp: no overflow above the diagonal)
    diff = g.unsqueeze(-1) - g.unsqueeze(-2)
    decay = torch.where(lower, diff, torch.full_like(diff, float("-inf"))).exp()
    k_beta = k * beta.unsqueeze(-1)
    # UT transform: T = (I + A)^-1, A = strictly lower part of diag(beta) K K^T * decay
    a = (k_beta @ k.transpose(-1, -2)) * decay
    a = a.masked_fill(~torch.tril(lower, -1), 0.0)
    eye = torch.eye(chunk_size, dtype=a.dtype, device=a.device)
    t_inv = torch.linalg.solve_triangular(a + eye, eye.expand_as(a), upper=False, unitriangular=True)
    u = t_inv @ (v * beta.unsqueeze(-1))  # the chunk's pseudo-values
    w = t_inv @ (k_beta * g.exp().unsqueeze(-1))  # what the incoming state removes from them
    scores = (q @ k.transpose(-1, -2)) * decay  # intra-chunk, causal (decay is 0 above the diagonal)

    state = (
        torch.zeros(b, h, dk, dv, dtype=work, device=q.device)
        if initial_state is None
        else initial_state.to(work)
    )
    out = torch.empty_like(u)
    for c in range(n):  # one step per chunk: the state passed from chunk to chunk
        v_new = u[:, :, c] - w[:, :, c] @ state
        g_c = g[:, :, c]
        out[:, :, c] = (q[:, :, c] * g_c.exp().unsqueeze(-1)) @ state + scores[:, :, c] @ v_new
        last = g_c[..., -1:]
        state = (
            state * last.exp().unsqueeze(-1)
            + (k[:, :, c] * (last - g_c).exp().unsqueeze(-1)).transpose(-1, -2) @ v_new
        )
    out = out.reshape(b, h, n * chunk_size, dv)[:, :, :length].transpose(1, 2).to(dtype)
    return out, (state if output_final_state else None)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fla.modules.convolution.causal_conv1d: x [B, T, D], weight [D, W] -> (y [B, T, D], None)."""
    if cu_seqlens is not None or initial_state is not None or output_final_state:
        raise NotImplementedError(
            "the CPU causal conv1d runs whole unpacked sequences only (no cu_seqlens, no carried state)"
        )
    width = weight.shape[-1]
    y = F.conv1d(x.transpose(1, 2), weight.unsqueeze(1), bias, padding=width - 1, groups=x.shape[-1])
    y = y[..., : x.shape[1]]
    if activation in ("silu", "swish"):
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"causal_conv1d activation {activation!r}: only silu / swish")
    return y.transpose(1, 2), None


# Megatron-Core's modules that bind fla's functions at import (0.16.1: one module; 0.19.x: a package).
GDN_MODULES = (
    "megatron.core.ssm.gated_delta_net",
    "megatron.core.ssm.gated_delta_net.common",
    "megatron.core.ssm.gated_delta_net.gdn",
)


def install_gated_delta_net_kernels() -> None:
    """Give Megatron-Core's imported Gated DeltaNet modules these kernels in place of fla's (CPU only:
    a no-op when CUDA is present, where behaviour must not change)."""
    if torch.cuda.is_available():
        return
    kernels = {
        "l2norm": l2norm,
        "chunk_gated_delta_rule": chunk_gated_delta_rule,
        "causal_conv1d": causal_conv1d,
    }
    for name in GDN_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        if getattr(module, "HAVE_FLA", False) and getattr(module, "chunk_gated_delta_rule", None):
            continue  # the real fla is importable (a CPU machine with it installed): keep it
        module.HAVE_FLA = True
        for attr, fn in kernels.items():
            # 0.16.1 names no causal_conv1d (it falls back to torch's Conv1d itself): set only what exists
            if attr != "causal_conv1d" or hasattr(module, attr):
                setattr(module, attr, fn)
