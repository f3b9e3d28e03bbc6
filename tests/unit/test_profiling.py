"""The profiling section: its rules (validation), the plan's decision, and StepProfiler on CPU."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.run_plan import build_plan
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


def _cfg(**profiling) -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
    )
    cfg = ConfigContainer(model=model)
    cfg.train.train_iters, cfg.train.global_batch_size, cfg.scheduler.lr_warmup_iters = 20, 4, 0
    cfg.validation.eval_interval = 0
    for key, value in profiling.items():
        setattr(cfg.profiling, key, value)
    return cfg


def _refused(cfg: ConfigContainer, world_size: int = 1, cuda: bool = True) -> str:
    with pytest.raises(ConfigError) as e:
        build_plan(cfg, world_size, cuda=cuda)
    return str(e.value)


def test_off_by_default_and_nothing_planned():
    plan = build_plan(_cfg(), 1, cuda=True)
    assert plan.profiling is None
    assert not any(line.startswith("profiling:") for line in plan.summary_lines())


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(use_pytorch_profiler=True, use_nsys_profiler=True),
            "profiling.use_nsys_profiler = True: profiling.use_pytorch_profiler is on too: one profiler at a "
            "time",
        ),
        (
            dict(use_pytorch_profiler=True, profile_step_start=0),
            "profiling.profile_step_start = 0: must be >= 1 (iterations are numbered from 1, as in the log "
            "line). Fix: give the first iteration to profile",
        ),
        (
            dict(use_nsys_profiler=True, profile_step_start=5, profile_step_end=5),
            "profiling.profile_step_end = 5: must be > profiling.profile_step_start (5): the window "
            "[profile_step_start, profile_step_end) would hold no iteration. Fix: set "
            "profiling.profile_step_end to at least 6.",
        ),
        (
            dict(record_memory_history=True, profile_step_start=5, profile_step_end=3),
            "profiling.profile_step_end = 3: must be > profiling.profile_step_start (5)",
        ),
        (
            dict(use_pytorch_profiler=True, profile_ranks=[]),
            "profiling.profile_ranks = []: lists no rank, so nothing is profiled. Fix: use [0].",
        ),
        (
            dict(use_pytorch_profiler=True, profile_ranks=[0, 4]),
            "profiling.profile_ranks = [0, 4]: rank 4 is outside [0, 4) (world size 4). Fix: list ranks "
            "between 0 and 3.",
        ),
        (
            dict(use_pytorch_profiler=True, profile_ranks=[-1]),
            "profiling.profile_ranks = [-1]: rank -1 is outside [0, 4)",
        ),
    ],
)
def test_rules_name_field_value_rule_and_fix(settings, message):
    text = _refused(_cfg(**settings), world_size=4)
    assert message in text
    assert ". Fix: " in text


def test_a_nsys_error_also_on_cpu_and_the_window_checked_without_cuda():
    # the CUDA-only tools are inactive on CPU, but a config that is wrong for the GPU still fails here
    assert "one profiler at a time" in _refused(
        _cfg(use_pytorch_profiler=True, use_nsys_profiler=True), cuda=False
    )
    assert "profiling.profile_step_end = 2" in _refused(
        _cfg(use_nsys_profiler=True, profile_step_start=2, profile_step_end=2), cuda=False
    )


def test_output_dir_that_is_a_file(tmp_path):
    path = tmp_path / "trace"
    path.write_text("")
    text = _refused(_cfg(use_pytorch_profiler=True, output_dir=str(path)))
    assert f"profiling.output_dir = {str(path)!r}: exists and is not a directory. Fix: " in text


def test_cuda_only_tools_are_warnings_on_cpu():
    plan = build_plan(_cfg(use_nsys_profiler=True, record_memory_history=True), 1, cuda=False)
    nsys = [w for w in plan.warnings if w.startswith("profiling.use_nsys_profiler=true is inactive")]
    memory = [w for w in plan.warnings if w.startswith("profiling.record_memory_history=true is inactive")]
    assert len(nsys) == 1 and "NVTX ranges need CUDA" in nsys[0]
    assert len(memory) == 1 and "needs CUDA" in memory[0]
    assert plan.profiling is None  # nothing runs on this device
    # the same config with CUDA: no warning, both run
    plan = build_plan(_cfg(use_nsys_profiler=True, record_memory_history=True), 1, cuda=True)
    assert not [w for w in plan.warnings if w.startswith("profiling.")]
    assert plan.profiling.nsys and plan.profiling.memory_history and not plan.profiling.pytorch


def test_pytorch_profiler_with_memory_history_on_cpu_keeps_the_profiler():
    plan = build_plan(_cfg(use_pytorch_profiler=True, record_memory_history=True), 1, cuda=False)
    assert plan.profiling.pytorch and not plan.profiling.memory_history and not plan.profiling.cuda
    assert sum("record_memory_history=true is inactive" in w for w in plan.warnings) == 1


def test_settings_without_a_profiler_and_a_window_after_the_run():
    plan = build_plan(_cfg(record_shapes=True, output_dir="/tmp/x"), 1, cuda=True)
    assert sum("has no effect: no profiler is on" in w for w in plan.warnings) == 2
    plan = build_plan(
        _cfg(use_pytorch_profiler=True, profile_step_start=30, profile_step_end=32), 1, cuda=True
    )
    assert any(
        "profile_step_start=30 is after the last iteration (train.train_iters=20)" in w for w in plan.warnings
    )


def test_output_dir_follows_tensorboard_then_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(use_pytorch_profiler=True)
    assert build_plan(cfg, 1, cuda=False).profiling.output_dir == str(tmp_path / "profiles")
    cfg.logger.tensorboard_dir = "tb"
    assert build_plan(cfg, 1, cuda=False).profiling.output_dir == str(tmp_path / "tb")
    cfg.profiling.output_dir = str(tmp_path / "traces")
    plan = build_plan(cfg, 1, cuda=False)
    assert plan.profiling.output_dir == str(tmp_path / "traces")
    line = next(x for x in plan.summary_lines() if x.startswith("profiling:"))
    assert line == f"profiling: pytorch profiler at iterations 10-11 on ranks [0] -> {tmp_path / 'traces'}"


def test_summary_line_of_nsys_and_memory_history():
    cfg = _cfg(use_nsys_profiler=True, record_memory_history=True, profile_ranks=[0, 2], profile_step_start=3)
    cfg.profiling.profile_step_end = 5
    plan = build_plan(cfg, 4, cuda=True)
    assert plan.profiling.describe() == (
        "profiling: nsys capture range + NVTX + CUDA memory history -> snapshot.pickle at iterations 3-4 on "
        "ranks [0, 2]"
    )
    assert plan.profiling.snapshot_path(2) == "snapshot_rank2.pickle"  # several ranks: one file each
    assert (
        build_plan(_cfg(record_memory_history=True), 1, cuda=True).profiling.snapshot_path(0)
        == "snapshot.pickle"
    )


def test_overrides_and_yaml_round_trip():
    from bridge.config.overrides import apply_overrides

    cfg = apply_overrides(
        _cfg(),
        [
            "profiling.use_pytorch_profiler=true",
            "profiling.profile_ranks=[0,1]",
            "profiling.record_shapes=true",
        ],
    )
    assert cfg.profiling.profile_ranks == [0, 1] and cfg.profiling.use_pytorch_profiler
    back = ConfigContainer.from_yaml(cfg.to_yaml())
    assert back.profiling == cfg.profiling


def test_only_listed_ranks_get_a_profiler():
    from bridge.training.profiling import StepProfiler

    plan = build_plan(_cfg(use_pytorch_profiler=True, profile_ranks=[0, 3]), 4, cuda=False).profiling
    assert [r for r in range(4) if StepProfiler.for_rank(plan, r) is not None] == [0, 3]
    assert StepProfiler.for_rank(None, 0) is None  # profiling off: no object, nothing to call


def _trace_steps(folder) -> tuple[list[str], list[int]]:
    files = sorted(p.name for p in folder.iterdir())
    steps = []
    for name in files:
        path = folder / name
        text = gzip.open(path, "rt").read() if name.endswith(".gz") else path.read_text()
        events = json.loads(text)["traceEvents"]
        steps += [
            int(m.group(1)) for e in events if (m := re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", "")))
        ]
    return files, sorted(set(steps))


def _run_steps(profiler, iterations):
    import torch

    x = torch.randn(16, 16)
    for it in iterations:
        profiler.begin(it)
        (x @ x).sum()
        profiler.end(it)
    profiler.finish()


@pytest.mark.parametrize(
    "window, iterations, profiled",
    [((2, 4), range(1, 6), [2, 3]), ((4, 10), range(1, 6), [4, 5])],  # the second ends inside the window
)
def test_step_profiler_writes_a_trace_of_the_window(tmp_path, window, iterations, profiled):
    from bridge.training.profiling import StepProfiler

    cfg = _cfg(use_pytorch_profiler=True, profile_step_start=window[0], profile_step_end=window[1])
    cfg.profiling.output_dir = str(tmp_path)
    profiler = StepProfiler.for_rank(build_plan(cfg, 1, cuda=False).profiling, 0)
    _run_steps(profiler, iterations)
    files, steps = _trace_steps(tmp_path)
    assert len(files) == 1 and re.fullmatch(r"rank0\.\d+\.pt\.trace\.json", files[0]), files
    assert steps == profiled
    profiler.finish()  # a second finish writes nothing more
    assert len(list(tmp_path.iterdir())) == 1


def test_cuda_tools_call_order_without_a_gpu(monkeypatch):
    """nsys and memory history (CUDA only) with the CUDA calls replaced by recorders."""
    import contextlib

    import torch

    from bridge.config.profiling import ProfilingPlan
    from bridge.training.profiling import StepProfiler

    calls = []

    @contextlib.contextmanager
    def emit_nvtx(record_shapes=False):
        calls.append(("emit_nvtx", record_shapes))
        yield
        calls.append(("emit_nvtx exit",))

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop",)))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append(("cuda start",)))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append(("cuda stop",)))
    monkeypatch.setattr(torch.autograd.profiler, "emit_nvtx", emit_nvtx)
    monkeypatch.setattr(
        torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(("history", kw))
    )
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: calls.append(("dump", path)))
    plan = ProfilingPlan(
        pytorch=False, nsys=True, memory_history=True, step_start=2, step_end=3, ranks=(0, 1),
        record_shapes=True, output_dir=None, memory_snapshot_path="mem.pickle", cuda=True,
    )  # fmt: skip
    profiler = StepProfiler.for_rank(plan, 1)
    for it in (1, 2, 3):
        profiler.begin(it)
        profiler.end(it)
    profiler.finish()
    assert calls == [
        ("push", "iteration 1"), ("pop",),
        ("push", "iteration 2"), ("history", {"max_entries": 100_000}), ("cuda start",), ("emit_nvtx", True),
        ("pop",), ("emit_nvtx exit",), ("cuda stop",), ("dump", "mem_rank1.pickle"), ("history", {"enabled": None}),
        ("push", "iteration 3"), ("pop",),
    ]  # fmt: skip
