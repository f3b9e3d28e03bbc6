"""Profiling a window of training steps: the run's ProfilingPlan (bridge/config/profiling.py) at run time.

The loop makes one `StepProfiler` per run on the ranks the plan profiles (`StepProfiler.for_rank`
returns None elsewhere and when profiling is off, so the loop pays one `is None` test per step) and
calls `begin(it)` before and `end(it)` after each step, `it` the log line's iteration number, and
`finish()` when training ends. The window is the iterations [step_start, step_end):

- PyTorch profiler: `torch.profiler.profile` (CPU activities, plus CUDA with CUDA) started at step_start
  and stopped after step_end - 1, one `ProfilerStep#<it>` per profiled iteration; the trace
  (`rank<r>.<ns>.pt.trace.json`, Chrome's format) is written by `tensorboard_trace_handler(output_dir)`.
- nsys (CUDA): `torch.cuda.profiler.start()` / `stop()` around the window (nsys's
  `--capture-range=cudaProfilerApi`), `emit_nvtx` inside it, and an NVTX range "iteration <it>" around
  every step of the profiled ranks.
- CUDA memory history: `torch.cuda.memory._record_memory_history` from step_start, dumped to the plan's
  snapshot path after step_end - 1, then switched off.

A run that ends inside the window (train_iters, exit_interval, a signal, an error) stops and writes
what it has in `finish()`.
"""

from __future__ import annotations

import logging

import torch

from bridge.config.profiling import ProfilingPlan

logger = logging.getLogger("bridge.training")

MEMORY_HISTORY_MAX_ENTRIES = 100_000  # allocator events kept (PyTorch's documented example value)


class StepProfiler:
    def __init__(self, plan: ProfilingPlan, rank: int):
        self.plan = plan
        self.rank = rank
        self._torch_prof = None
        self._nvtx = None  # the emit_nvtx context inside the nsys window
        self._nsys_on = False
        self._memory_on = False
        self._started = False

    @classmethod
    def for_rank(cls, plan: ProfilingPlan | None, rank: int) -> StepProfiler | None:
        """The profiler of this rank, or None when nothing is profiled here."""
        if plan is None or not plan.profiles(rank):
            return None
        return cls(plan, rank)

    @property
    def active(self) -> bool:
        return self._torch_prof is not None or self._nsys_on or self._memory_on

    def begin(self, iteration: int) -> None:
        p = self.plan
        if p.nsys:
            torch.cuda.nvtx.range_push(f"iteration {iteration}")
        if not self._started and p.step_start <= iteration < p.step_end:  # a resumed run may start inside
            self._start(iteration)
        elif self._torch_prof is not None and p.step_start < iteration < p.step_end:
            self._torch_prof.step()  # closes ProfilerStep#<it-1>, opens ProfilerStep#<it>

    def end(self, iteration: int) -> None:
        if self.plan.nsys:
            torch.cuda.nvtx.range_pop()
        if iteration == self.plan.step_end - 1:
            self._stop()

    def finish(self) -> None:
        """Stop (and write) whatever is still running: training ended inside the window."""
        if self.active:
            self._stop()

    def _start(self, iteration: int) -> None:
        p = self.plan
        self._started = True
        if p.memory_history:
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_MAX_ENTRIES)
            self._memory_on = True
        if p.pytorch:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if p.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(
                activities=activities,
                # always record: the window is opened and closed here, so the step markers carry the
                # iterations' own numbers
                schedule=lambda step: torch.profiler.ProfilerAction.RECORD,
                on_trace_ready=torch.profiler.tensorboard_trace_handler(
                    p.output_dir, worker_name=f"rank{self.rank}"
                ),
                record_shapes=p.record_shapes,
            )
            prof.step_num = iteration  # ProfilerStep#<iteration>
            prof.start()
            self._torch_prof = prof
        if p.nsys:
            torch.cuda.profiler.start()
            self._nvtx = torch.autograd.profiler.emit_nvtx(record_shapes=p.record_shapes)
            self._nvtx.__enter__()
            self._nsys_on = True

    def _stop(self) -> None:
        p = self.plan
        if self._nsys_on:
            self._nvtx.__exit__(None, None, None)
            torch.cuda.profiler.stop()
            self._nvtx, self._nsys_on = None, False
        if self._torch_prof is not None:
            prof, self._torch_prof = self._torch_prof, None
            last = prof.step_num
            prof.stop()  # writes the trace (on_trace_ready)
            logger.info(
                "rank %d: PyTorch profiler trace up to iteration %d written to %s",
                self.rank,
                last,
                p.output_dir,
            )
        if self._memory_on:
            path = p.snapshot_path(self.rank)
            torch.cuda.memory._dump_snapshot(path)
            torch.cuda.memory._record_memory_history(enabled=None)
            self._memory_on = False
            logger.info("rank %d: CUDA memory snapshot written to %s", self.rank, path)
