"""The kernels Megatron-Core's Mamba mixer needs: `mamba_ssm` / `causal_conv1d` on CUDA, bridge's
plain-torch reference kernels (bridge.parallel.ssm_kernels) without CUDA.

`ensure_ssm_kernels()` runs before a hybrid model is built (bridge.models.hybrid_build):

- CUDA present: the packages must be importable; a missing one is one ImportError naming it and its
  pip name. Nothing is patched, so GPU behaviour is Megatron-Core's own, never a silent slow path.
- no CUDA: `megatron.core.ssm.mamba_mixer` is imported and its kernel names rebound to the reference
  kernels, once per process:

| name in mamba_mixer (0.16.1, 0.19.2) | without the packages | rebound to |
| --- | --- | --- |
| `HAVE_MAMBA_SSM` | False: `MambaMixer.__init__` raises (0.16.1) | True |
| `mamba_split_conv1d_scan_combined` (training) / `mamba_chunk_scan_combined` (prefill) | absent / None | `ssm_kernels`' chunked SSD scan |
| `ExtendedRMSNorm` (the gated norm) | a `MagicMock` subclass | `ssm_kernels.RMSNormGated` with the same sharded state dict (split along dim 0) |
| `causal_conv1d_fn`, `causal_conv1d_update`, `selective_state_update` | None (0.16.1); Triton kernels (0.19.2 decode) | None: the mixer's own torch fallbacks (conv1d module; one-token decode) |

On Python 3.11 legs without Triton (megatron-core 0.16.1), `mamba_mixer` imports the dynamic-batching
inference helpers of `megatron.core.inference.contexts.attention_context.triton.tensor_ops`, a Triton
module; that module is registered as one whose functions raise ImportError naming triton (they serve
only the dynamic-batching inference engine, which bridge does not use).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types

_lock = threading.Lock()
_installed = False
_TENSOR_OPS = "megatron.core.inference.contexts.attention_context.triton.tensor_ops"
# (module, pip name) Megatron-Core's mixer needs on CUDA.
GPU_PACKAGES = (("mamba_ssm", "mamba-ssm"), ("causal_conv1d", "causal-conv1d"), ("einops", "einops"))


def missing_gpu_packages() -> list[tuple[str, str]]:
    return [(mod, pip) for mod, pip in GPU_PACKAGES if importlib.util.find_spec(mod) is None]


def ensure_ssm_kernels() -> str:
    """Make the Mamba mixer buildable here; returns "mamba_ssm" (CUDA kernels) or "reference"."""
    global _installed
    import torch

    if torch.cuda.is_available():
        missing = missing_gpu_packages()
        if missing:
            names = ", ".join(mod for mod, _ in missing)
            raise ImportError(
                f"Megatron-Core's Mamba mixer on CUDA needs {names}, which is not installed. Fix: pip install "
                f"{' '.join(pip for _, pip in missing)} (bridge's plain-torch kernels run only without CUDA)"
            )
        return "mamba_ssm"
    with _lock:
        if not _installed:
            _install_reference()
            _installed = True
    return "reference"


def _stub_triton_tensor_ops() -> None:
    if importlib.util.find_spec("triton") is not None or _TENSOR_OPS in sys.modules:
        return
    stub = types.ModuleType(_TENSOR_OPS)

    def _needs_triton(*args, **kwargs):
        raise ImportError(
            "Megatron-Core's dynamic-batching inference helpers need triton (pip install triton)"
        )

    for name in ("tensor_get_slice_after", "tensor_masked_update", "tensor_merge"):
        setattr(stub, name, _needs_triton)
    sys.modules[_TENSOR_OPS] = stub


def _install_reference() -> None:
    _stub_triton_tensor_ops()
    from megatron.core.ssm import mamba_mixer

    from bridge.parallel import ssm_kernels

    mamba_mixer.HAVE_MAMBA_SSM = True
    mamba_mixer.mamba_chunk_scan_combined = ssm_kernels.mamba_chunk_scan_combined
    mamba_mixer.mamba_split_conv1d_scan_combined = ssm_kernels.mamba_split_conv1d_scan_combined
    mamba_mixer.RMSNormGated = ssm_kernels.RMSNormGated
    mamba_mixer.ExtendedRMSNorm = _extended_rms_norm(mamba_mixer)
    for name in ("causal_conv1d_fn", "causal_conv1d_update", "selective_state_update"):
        setattr(mamba_mixer, name, None)


def _extended_rms_norm(mamba_mixer) -> type:
    from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

    from bridge.parallel.ssm_kernels import RMSNormGated

    class ExtendedRMSNorm(RMSNormGated):
        """The gated norm with Megatron-Core's sharded state dict: weight split along dim 0."""

        def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
            if not hasattr(self, "tp_group"):
                self.tp_group = mamba_mixer.parallel_state.get_tensor_model_parallel_group()
            return make_sharded_tensors_for_checkpoint(
                self.state_dict(prefix="", keep_vars=True),
                prefix,
                {"weight": 0},
                sharded_offsets,
                tp_group=self.tp_group,
                dp_cp_group=(metadata or {}).get("dp_cp_group"),
            )

    return ExtendedRMSNorm
