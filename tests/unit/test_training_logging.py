"""Megatron's log line format, the FLOPs estimate, and the checkpoint tracker file."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from bridge.checkpoint.paths import (
    TRACKER_FILENAME,
    latest_iteration,
    resolve_checkpoint,
)
from bridge.checkpoint.paths import remove_old_checkpoints as _remove_old_checkpoints
from bridge.checkpoint.paths import write_tracker as _write_tracker
from bridge.config.run_plan import build_plan
from bridge.config.sections import LoggerConfig
from bridge.errors import ConfigError
from bridge.parallel.layout import ModelShape
from bridge.parallel.planner.speed import model_flops_per_token
from bridge.training.logging import IterationStats, format_iteration_line, format_validation_line


def test_iteration_line_is_megatrons_format():
    line = format_iteration_line(
        IterationStats(
            iteration=3,
            train_iters=3,
            consumed_samples=24,
            elapsed_ms=812.34,
            learning_rate=3e-4,
            global_batch_size=8,
            losses={"lm loss": 10.03808},
            grad_norm=2.3451,
            tokens_per_second=1234.4,
        )
    )
    # the example line, then the counters Megatron-LM always appends
    assert line.startswith(
        " iteration        3/       3 | consumed samples: 24 | elapsed time per iteration (ms): 812.3 |"
        " learning rate: 3.000000E-04 | global batch size:     8 | lm loss: 1.003808E+01 | grad norm: 2.345 |"
        " tokens per second: 1234 |"
    )
    assert line.endswith(" number of skipped iterations:   0 | number of nan iterations:   0 |")
    assert "\n" not in line
    assert line.count("grad norm") == 1, line  # printed twice per line before (issue 43)


def test_validation_line():
    assert format_validation_line(5, {"lm loss": 2.0}) == (
        " validation loss at iteration 5 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 |"
    )


def test_flops_per_token_hand_computed():
    # the log line's FLOPs are the planner's model_flops_per_token over the plan's shape:
    # 1 layer, h=4, 2 heads of 2, MHA, ffn 8 non-gated, untied vocab 10, seq 6
    shape = ModelShape(
        num_layers=1,
        num_attention_heads=2,
        hidden_size=4,
        ffn_hidden_size=8,
        vocab_size=10,
        make_vocab_size_divisible_by=1,
        gated_linear_unit=False,
    )
    attn_proj = 4 * 4 + 2 * 4 * 4 + 4 * 4  # q, k+v, out
    mlp = 2 * 4 * 8
    scores = 3 * 6 * 2 * (2 + 2)  # causal QK^T and AV: 3 x seq x heads x (qk + v head dims), fwd + bwd
    assert model_flops_per_token(shape, 6) == 6 * (attn_proj + mlp + 4 * 10) + scores


def test_tracker_is_replaced_atomically(tmp_path):
    assert latest_iteration(tmp_path) is None
    _write_tracker(tmp_path, 5)
    _write_tracker(tmp_path, 10)
    assert latest_iteration(tmp_path) == 10
    assert sorted(os.listdir(tmp_path)) == [TRACKER_FILENAME]  # no temp file left behind
    (tmp_path / TRACKER_FILENAME).write_text("garbage")
    with pytest.raises(ConfigError, match="not an iteration number"):
        latest_iteration(tmp_path)


def test_resolve_checkpoint_refuses_incomplete_or_missing(tmp_path):
    with pytest.raises(ConfigError, match="holds no complete checkpoint"):
        resolve_checkpoint(tmp_path)
    _write_tracker(tmp_path, 2)
    (tmp_path / "iter_0000002").mkdir()
    with pytest.raises(ConfigError, match="incomplete"):
        resolve_checkpoint(tmp_path)
    (tmp_path / "iter_0000002" / "metadata.json").write_text("{}")
    assert resolve_checkpoint(tmp_path) == (tmp_path / "iter_0000002", 2)
    assert resolve_checkpoint(tmp_path / "iter_0000002") == (tmp_path / "iter_0000002", 2)


def test_most_recent_k_keeps_the_newest(tmp_path):
    from bridge.checkpoint.paths import MANIFEST_FILENAME

    for it in (2, 4, 6, 10):
        (tmp_path / f"iter_{it:07d}").mkdir()
        (tmp_path / f"iter_{it:07d}" / MANIFEST_FILENAME).write_text("{}")  # complete
    (tmp_path / "iter_0000012").mkdir()  # a partial folder: never counted, never deleted here
    _remove_old_checkpoints(tmp_path, keep=2, newest=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000006", "iter_0000010", "iter_0000012"]


def test_tensorboard_scalars_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from bridge.training.logging import MetricWriters

    writers = MetricWriters(LoggerConfig(tensorboard_dir=str(tmp_path)))
    writers.write(1, {"lm loss": 5.5, "learning-rate": 3e-4})
    writers.write(2, {"lm loss": 5.25, "learning-rate": 2e-4})
    writers.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("lm loss")] == [(1, 5.5), (2, 5.25)]


def test_missing_logging_packages_are_decided_by_the_plan(monkeypatch):
    import importlib.util

    from bridge.config.container import ConfigContainer
    from bridge.models.gpt_provider import GPTModelProvider

    real_find_spec = importlib.util.find_spec

    def without(*missing):
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda n, *a: None if n in missing else real_find_spec(n, *a)
        )

    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
    )
    cfg = ConfigContainer(model=model)
    cfg.train.train_iters, cfg.train.global_batch_size, cfg.scheduler.lr_warmup_iters = 4, 2, 0
    cfg.validation.eval_interval, cfg.logger.tensorboard_dir = 0, "/tmp/tb"
    without("tensorboard")  # recipes set a tensorboard_dir by default: a warning, not a failure
    plan = build_plan(cfg, 1, cuda=True)
    assert sum("tensorboard package is not installed" in w for w in plan.warnings) == 1
    cfg.logger.wandb_project = "p"
    without("wandb")  # an explicit W&B request without wandb is an error before launch
    with pytest.raises(ConfigError, match="logger.wandb_project = 'p': W&B logging needs the wandb package"):
        build_plan(cfg, 1, cuda=True)


# ---- MFU: the peak table with real CUDA device names, the arithmetic, the log line ----------------


@pytest.mark.parametrize(
    "device, label, bf16, fp8",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4, 1978.9),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.5, 1513.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835.5, 1670.9),
        ("NVIDIA H200", "H200 SXM", 989.4, 1978.9),
        ("NVIDIA H20", "H20", 148.0, 296.0),  # not the H200
        ("NVIDIA GH200 480GB", "GH200", 989.4, 1978.9),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0, None),  # no fp8 tensor cores
        ("NVIDIA L40S", "L40S", 362.05, 733.0),
        ("NVIDIA L4", "L4", 121.0, 242.5),
    ],
)
def test_peak_table_matches_real_device_names(device, label, bf16, fp8):
    from bridge.training.peak_flops import device_peak, peak_tflops

    assert device_peak(device).label == label
    assert peak_tflops(device, "bf16") == peak_tflops(device, "fp16") == bf16
    assert peak_tflops(device, "fp8") == fp8
    assert peak_tflops(device, "fp32") is None  # no MFU quoted against TF32


def test_unknown_device_has_no_peak():
    from bridge.training.peak_flops import device_peak, mfu, peak_tflops

    assert device_peak("NVIDIA GeForce GTX 1080") is None
    assert peak_tflops("NVIDIA GeForce GTX 1080", "bf16") is None
    assert mfu(100.0, "NVIDIA GeForce GTX 1080", "bf16") is None
    assert mfu(100.0, "NVIDIA A100-SXM4-80GB", "fp8") is None


def test_mfu_hand_computed():
    from bridge.training.peak_flops import mfu

    # 6 * 1e9 FLOPs per token, 40,000 tokens/s over 8 GPUs: 6e9 * 4e4 / 8 / 1e12 = 30 TFLOP/s per GPU
    tflops = 6e9 * 40_000 / 8 / 1e12
    assert tflops == pytest.approx(30.0)
    assert mfu(tflops, "NVIDIA A100-SXM4-80GB", "bf16") == pytest.approx(30.0 / 312.0)  # 9.6%
    assert mfu(494.7, "NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(0.5)


def _stats(**kwargs) -> IterationStats:
    return IterationStats(
        iteration=1, train_iters=1, consumed_samples=8, elapsed_ms=10.0, learning_rate=1e-4,
        global_batch_size=8, losses={"lm loss": 1.0}, tokens_per_second=1000.0, **kwargs,
    )  # fmt: skip


def test_mfu_follows_the_throughput_with_one_decimal():
    line = format_iteration_line(_stats(tflops_per_gpu=447.2, throughput_unit="GPU", mfu=447.2 / 989.4))
    assert "| throughput per GPU (TFLOP/s/GPU): 447.2 | MFU: 45.2% | number of skipped" in line


def test_mfu_hidden_when_unknown():
    line = format_iteration_line(_stats(tflops_per_gpu=0.5, throughput_unit="rank"))
    assert "MFU" not in line
    assert "| throughput per rank (TFLOP/s/rank): 0.5 | number of skipped" in line
    assert "GPU" not in line


@pytest.mark.parametrize(
    "device, precision, note",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", None),
        (
            "NVIDIA GeForce GTX 1080",
            "bf16",
            "MFU not shown: no peak FLOP/s for device NVIDIA GeForce GTX 1080 in",
        ),
        (
            "NVIDIA A100-SXM4-80GB",
            "fp32",
            "MFU not shown: no fp32 peak FLOP/s for device NVIDIA A100-SXM4-80GB in",
        ),
    ],
)
def test_mfu_device_is_read_once_and_an_unknown_one_said_once(monkeypatch, device, precision, note):

    import torch

    from bridge.config.run_plan import Precision
    from bridge.training.train import _mfu_device

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: asked.append(1) or device)
    ctx = SimpleNamespace(precision=Precision(requested="x", name=precision))
    import logging

    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    log = logging.getLogger("bridge.training")  # its own handler: the logger may not propagate
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        found = _mfu_device(ctx, log=True)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert len(asked) == 1
    notes = [r.getMessage() for r in records if "MFU not shown" in r.getMessage()]
    if note is None:
        assert found == device and notes == []
    else:
        assert found is None and len(notes) == 1 and notes[0].startswith(note)
        assert notes[0].endswith("bridge/training/peak_flops.py")
