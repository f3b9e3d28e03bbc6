"""The GPU performance settings a model can ask for, as data: each GPTModelProvider field, the value it
runs with when the machine cannot (Megatron-Core's default) and the keys of what it needs.

bridge.config.performance decides, per machine and layout, which requested ones run; the provider names
the requested ones when Megatron-Core refuses a config. Pure data: no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PerformanceSetting:
    field: str  # a GPTModelProvider (TransformerConfig) field
    off: Any  # the value it runs with when its needs are not met (Megatron-Core's default)
    needs: tuple[str, ...]  # keys of NEEDS, checked in order (the first missing one is the reason)
    does: str  # what it buys, for the docs
    with_it: tuple[tuple[str, Any], ...] = ()  # other fields set when it is active
    # the value that asks for it (None: any value other than `off`); e.g. the dispatcher only for "flex"
    asks: Any = None

    def requested(self, value: Any) -> bool:
        return value == self.asks if self.asks is not None else value != self.off


SETTINGS: tuple[PerformanceSetting, ...] = (
    PerformanceSetting("bias_activation_fusion", False, ("cuda",), "bias + activation (GeLU / SwiGLU) in one kernel"),
    PerformanceSetting("bias_dropout_fusion", False, ("cuda",), "bias + dropout + residual add in one kernel"),
    PerformanceSetting("masked_softmax_fusion", False, ("cuda",), "scale + mask + softmax in one kernel"),
    PerformanceSetting("persist_layer_norm", False, ("cuda", "transformer_engine"), "persistent layer-norm kernel"),
    PerformanceSetting("apply_rope_fusion", False, ("cuda", "transformer_engine"), "fused rotary embedding"),
    PerformanceSetting(
        "gradient_accumulation_fusion", False, ("cuda", "megatron_grad_buffers", "apex_fused_wgrad"),
        "weight gradients accumulated into the fp32 main_grad by the GEMM itself",
    ),
    PerformanceSetting("cross_entropy_loss_fusion", False, ("cuda",), "vocab-parallel cross-entropy in one kernel"),
    PerformanceSetting(
        "cross_entropy_fusion_impl", "native", ("cuda", "transformer_engine"),
        "Transformer Engine's cross-entropy kernel (value te)", asks="te",
    ),
    PerformanceSetting(
        "moe_grouped_gemm", False, ("experts", "cuda", "transformer_engine"),
        "the local experts' GEMMs as one grouped GEMM (TEGroupedMLP) instead of a loop (SequentialMLP)",
    ),
    PerformanceSetting(
        "moe_permute_fusion", False, ("experts", "cuda", "transformer_engine>=2.1"),
        "fused token permutation / unpermutation around the experts",
    ),
    PerformanceSetting(
        "moe_token_dispatcher_type", "alltoall", ("experts", "cuda", "deep_ep"),
        "the flex dispatcher (value flex): DeepEP's fused all-to-all kernels", asks="flex",
    ),
    PerformanceSetting(
        "tp_comm_overlap", False, ("cuda", "transformer_engine", "tp_with_sp"),
        "TP all-gathers / reduce-scatters overlapped with the GEMMs (Transformer Engine userbuffers)",
    ),
    PerformanceSetting(
        "overlap_p2p_comm", False, ("cuda", "interleaved_pipeline"),
        "pipeline send / receive overlapped with compute in the interleaved schedule",
        with_it=(("batch_p2p_comm", False),),
    ),
)  # fmt: skip
