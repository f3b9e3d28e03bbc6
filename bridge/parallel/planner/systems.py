"""The GPU systems the speed estimate knows, and every constant of the step-time model, in one place.

Peaks and bandwidths are vendors' published figures (dense tensor-core FLOP/s without sparsity, HBM
bandwidth, NVLink bandwidth per GPU and direction, one 400 Gb/s InfiniBand NIC per GPU as in DGX / HGX
systems). The efficiencies below are not measured here: they were chosen so that the model reproduces
published runs (docs/parallelism.md, "Speed estimate"), and the test pinning those runs fails when one
of them moves the estimate out of range. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import config_error


@dataclass(frozen=True)
class GpuSystem:
    """One GPU of a system, and the links it has: FLOP/s, bytes and bytes/s."""

    name: str
    peak_flops: dict[str, float]  # dense tensor-core FLOP/s by training precision
    memory_gb: float  # HBM per GPU
    hbm_bandwidth: float  # bytes/s
    nvlink_bandwidth: float  # bytes/s per GPU and direction inside the NVLink domain
    network_bandwidth: float  # bytes/s per GPU and direction between NVLink domains (its NIC)
    gpus_per_node: int  # the NVLink domain
    device_name: str = ""  # what CUDA calls the device (the dry run's --gpu plans for it)
    compute_capability: tuple[int, int] | None = None


def _peaks(bf16: float, fp8: float, tf32: float) -> dict[str, float]:
    # fp32 training runs its matrix products on TF32 tensor cores (Megatron-Core's default on Hopper)
    return {"bf16": bf16, "fp16": bf16, "fp8": fp8, "fp32": tf32}


SYSTEMS: dict[str, GpuSystem] = {
    # DGX H100: 8 GPUs on NVLink 4 (900 GB/s both directions), one ConnectX-7 (400 Gb/s) per GPU
    "h100": GpuSystem(
        "h100",
        _peaks(989e12, 1979e12, 494e12),
        80.0,
        3.35e12,
        450e9,
        50e9,
        8,
        "NVIDIA H100 80GB HBM3",
        (9, 0),
    ),
    # HGX H200: the H100's compute with 141 GB of faster HBM3e
    "h200": GpuSystem(
        "h200", _peaks(989e12, 1979e12, 494e12), 141.0, 4.8e12, 450e9, 50e9, 8, "NVIDIA H200", (9, 0)
    ),
    # DGX B200: 8 GPUs on NVLink 5 (1.8 TB/s both directions), 180 GB each
    "b200": GpuSystem(
        "b200", _peaks(2250e12, 4500e12, 1100e12), 180.0, 8.0e12, 900e9, 50e9, 8, "NVIDIA B200", (10, 0)
    ),
    # GB200 NVL72: 72 GPUs in one NVLink domain
    "gb200": GpuSystem(
        "gb200", _peaks(2500e12, 5000e12, 1250e12), 186.0, 8.0e12, 900e9, 50e9, 72, "NVIDIA GB200", (10, 0)
    ),
}
DEFAULT_SYSTEM = "h100"

# ---- achievable fractions (calibrated on published runs: docs/parallelism.md "Speed estimate") ----------

# large matrix products reach this share of the precision's peak (bf16 ~70 %; fp8 GEMMs also quantize
# their inputs, so they keep less of their doubled peak)
GEMM_EFFICIENCY = {"bf16": 0.70, "fp16": 0.70, "fp8": 0.52, "fp32": 0.70}
# a product whose smallest dimension is d runs at d / (d + GEMM_SMALL_DIM) of that: small products
# (narrow MoE experts, thin TP slices) do not fill the GPU
GEMM_SMALL_DIM = 192.0
# flash attention's share of the bf16 peak (attention runs in bf16 also in fp8 recipes)
ATTENTION_EFFICIENCY = 0.55
ATTENTION_BACKWARD_RATIO = 2.5  # flash attention's backward costs 2.5x its forward
# element-wise work (norms, activations, residuals, rotary, dropout-free): HBM passes over each layer's
# saved activation bytes in forward + backward
ELEMENTWISE_PASSES = 6.0
# collectives reach this share of the link bandwidth (ring algorithms, NCCL protocol overheads)
NVLINK_EFFICIENCY = 0.70
NETWORK_EFFICIENCY = 0.80
ALL_TO_ALL_EFFICIENCY = 0.6  # token dispatch / combine: many small messages
# share of the expert all-to-all not hidden: Megatron-Core overlaps part of one micro batch's dispatch
# and combine with another's compute
EP_EXPOSED = 0.5
# share of tensor-parallel (sequence-parallel) collectives that stays exposed: Megatron-Core overlaps
# part of them with the next product (TE's userbuffers overlap more, not assumed)
TP_EXPOSED = 0.5
# share of the activations sent between pipeline stages that stays exposed (sends overlap compute)
PP_P2P_EXPOSED = 0.25
# data-parallel gradient reduce-scatter / parameter all-gather: overlapped with the backward / forward
# except the last bucket; at least this share stays exposed
DP_MIN_EXPOSED = 0.1
# every MoE layer pays a fixed cost per pass (router, token permutation, the dispatcher's
# host-device synchronisation on the token counts, grouped-GEMM setup): seconds per layer and pass
MOE_LAYER_OVERHEAD_S = 1.6e-3
# every transformer layer pays kernel launches and small host work per pass (seconds)
LAYER_OVERHEAD_S = 0.15e-3
# optimizer step: bytes read and written per parameter of the rank's shard (fp32 master, 2 moments,
# the gradient and the compute-dtype copy), at HBM speed
OPTIMIZER_BYTES_PER_PARAM = 36.0


def system(name: str | None) -> GpuSystem:
    """The system called `name` (None: the default), or one ConfigError naming the choices."""
    key = DEFAULT_SYSTEM if name is None else name
    if key not in SYSTEMS:
        raise config_error("--gpu", name, f"must be one of {', '.join(SYSTEMS)}", "pick one of those")
    return SYSTEMS[key]
