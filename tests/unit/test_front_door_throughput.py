"""The throughput label says GPU only with CUDA: "TFLOP/s/GPU" there, "TFLOP/s/rank" on CPU."""

from __future__ import annotations

import pytest

from bridge.training.logging import IterationStats, format_iteration_line


def _throughput_line(**kwargs) -> str:
    stats = IterationStats(
        iteration=1, train_iters=1, consumed_samples=8, elapsed_ms=10.0, learning_rate=1e-4,
        global_batch_size=8, losses={"lm loss": 1.0}, tflops_per_gpu=12.34, **kwargs,
    )  # fmt: skip
    return format_iteration_line(stats)


@pytest.mark.parametrize("cuda, label", [(True, "throughput per GPU (TFLOP/s/GPU): 12.3"),
                                         (False, "throughput per rank (TFLOP/s/rank): 12.3")])  # fmt: skip
def test_label_says_gpu_only_with_cuda(monkeypatch, cuda, label):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    line = _throughput_line()
    assert f"| {label} |" in line
    assert ("GPU" in line) == cuda


def test_label_on_this_machine_and_an_explicit_unit():
    import torch

    unit = "GPU" if torch.cuda.is_available() else "rank"
    assert f"| throughput per {unit} (TFLOP/s/{unit}): 12.3 |" in _throughput_line()
    assert "| throughput per rank (TFLOP/s/rank): 12.3 |" in _throughput_line(throughput_unit="rank")
    assert "| throughput per GPU (TFLOP/s/GPU): 12.3 |" in _throughput_line(throughput_unit="GPU")


def test_small_values_keep_three_significant_digits():
    stats = IterationStats(
        iteration=1, train_iters=1, consumed_samples=8, elapsed_ms=10.0, learning_rate=1e-4,
        global_batch_size=8, losses={"lm loss": 1.0}, tflops_per_gpu=0.01234, throughput_unit="rank",
    )  # fmt: skip
    assert "| throughput per rank (TFLOP/s/rank): 0.0123 |" in format_iteration_line(stats)
