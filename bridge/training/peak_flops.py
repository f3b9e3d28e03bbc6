"""Peak dense tensor-core FLOP/s per device, for the model-FLOPs utilisation (MFU) in the log line.

Values are NVIDIA's datasheet numbers without structured sparsity (the datasheets print the sparse
number first, twice the dense one), in TFLOP/s per GPU. bf16 also stands for fp16 (same peak on these
parts); fp8 is absent where the part has no fp8 tensor cores. A device missing from the table gets no
MFU (the log line leaves it off) rather than a guessed one. Pure Python: no torch import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    pattern: str  # regular expression searched in torch.cuda.get_device_name() (case-insensitive)
    label: str
    bf16: float  # dense bf16 / fp16 TFLOP/s
    fp8: float | None  # dense fp8 TFLOP/s; None = no fp8 tensor cores


# First match wins: the more specific names (PCIe / NVL variants, GH200 / GB200) come before the family.
PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak(r"\bGB200\b", "GB200", 2500.0, 5000.0),
    DevicePeak(r"\bB200\b", "B200", 2250.0, 4500.0),
    DevicePeak(r"\bGH200\b", "GH200", 989.4, 1978.9),
    DevicePeak(r"\bH200 NVL\b", "H200 NVL", 835.5, 1670.9),
    DevicePeak(r"\bH200\b", "H200 SXM", 989.4, 1978.9),
    DevicePeak(r"\bH100 PCIe\b", "H100 PCIe", 756.5, 1513.0),
    DevicePeak(r"\bH100 NVL\b", "H100 NVL", 835.5, 1670.9),
    DevicePeak(r"\bH100\b", "H100 SXM", 989.4, 1978.9),
    DevicePeak(r"\bH800\b", "H800", 989.4, 1978.9),
    DevicePeak(r"\bH20\b", "H20", 148.0, 296.0),
    DevicePeak(r"\bA100\b", "A100", 312.0, None),
    DevicePeak(r"\bA800\b", "A800", 312.0, None),
    DevicePeak(r"\bL40S\b", "L40S", 362.05, 733.0),
    DevicePeak(r"\bL4\b", "L4", 121.0, 242.5),
    DevicePeak(r"\bA10\b", "A10", 125.0, None),
)


def device_peak(device_name: str) -> DevicePeak | None:
    """The table's row for a CUDA device name such as "NVIDIA H100 80GB HBM3", or None."""
    for peak in PEAKS:
        if re.search(peak.pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def peak_tflops(device_name: str, compute: str) -> float | None:
    """Dense peak TFLOP/s of `device_name` for `compute` ("bf16", "fp16" or "fp8"); None when unknown
    (a device not in the table, fp8 on a part without it, or fp32, whose TF32 peak MFU is not quoted in)."""
    peak = device_peak(device_name)
    if peak is None:
        return None
    if compute in ("bf16", "fp16"):
        return peak.bf16
    if compute == "fp8":
        return peak.fp8
    return None


def mfu(achieved_tflops_per_gpu: float, device_name: str, compute: str) -> float | None:
    """Model-FLOPs utilisation as a fraction (0.45 = 45%), or None when the peak is unknown."""
    peak = peak_tflops(device_name, compute)
    return None if peak is None else achieved_tflops_per_gpu / peak
