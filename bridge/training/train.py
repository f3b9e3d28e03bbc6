"""One training step, evaluation, and the iteration loop, on Megatron-Core's pipeline schedules or (the
plan's torch schedules: gpipe, looped_bfs, dfs, zero_bubble) on torch.distributed.pipelining's
(bridge/training/pipelining.py)."""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bridge import checkpoint
from bridge.config.container import ConfigContainer
from bridge.config.run_plan import Precision, RunPlan
from bridge.training import peak_flops
from bridge.training.logging import (
    IterationStats,
    MetricWriters,
    format_iteration_line,
    format_validation_line,
    logger,
)
from bridge.training.state import NonFiniteLossError, TrainResult, TrainState


@dataclass
class TrainingContext:
    """Everything the loop needs, built by pretrain() from the run's plan."""

    plan: RunPlan
    model: list
    optimizer: Any  # Megatron-Core's MegatronOptimizer
    scheduler: Any  # Megatron-Core's OptimizerParamScheduler
    forward_step_func: Callable
    train_iterators: list
    valid_iterators: list | None
    state: TrainState
    megatron_ddp: bool
    overlap_param_gather: bool
    flops_per_token: float
    writers: MetricWriters
    run_config_yaml: str | None
    # bridge.training.pipelining.TorchPipelineRunner when plan.pipeline.engine == "torch", else None
    pipeline_runner: Any = None
    # bridge.training.consolidated's hook writing the Hugging Face copy into each save, or None
    consolidated: Callable | None = None

    @property
    def cfg(self) -> ConfigContainer:
        return self.plan.config

    @property
    def num_microbatches(self) -> int:
        return self.plan.num_microbatches

    @property
    def seq_length(self) -> int:
        return self.plan.data.seq_length

    @property
    def precision(self) -> Precision:
        return self.plan.precision


def _log_rank() -> int:
    return torch.distributed.get_world_size() - 1  # a last-pipeline-stage rank (pp is the outer dim)


def _reduce_losses(losses_reduced: list[dict]) -> dict[str, torch.Tensor]:
    """Sum [loss_sum, tokens] over microbatches and data-parallel ranks (last stage only)."""
    from megatron.core import parallel_state

    totals: dict[str, torch.Tensor] = {}
    if parallel_state.is_pipeline_last_stage(ignore_virtual=True):
        for micro in losses_reduced:
            for key, value in micro.items():
                totals[key] = totals.get(key, 0) + value.detach().float()
        for value in totals.values():
            torch.distributed.all_reduce(
                value, group=parallel_state.get_data_parallel_group(with_context_parallel=True)
            )
    return totals


def _broadcast_loss(totals: dict[str, torch.Tensor]) -> float:
    """lm loss from the logging rank to every rank, so all ranks take the same decisions."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    value = torch.zeros(1, dtype=torch.float64, device=device)
    if "lm loss" in totals:
        s, n = totals["lm loss"].tolist()
        value[0] = s / max(n, 1.0)
    torch.distributed.broadcast(value, src=_log_rank())
    return float(value.item())


def _forward_backward(ctx: TrainingContext, iterators: list, forward_only: bool) -> list[dict]:
    """All micro batches of one step through the plan's pipeline schedule: Megatron-Core's forward_backward
    function, or the torch.distributed.pipelining runner (the one place that chooses)."""
    if ctx.plan.pipeline.engine == "torch":
        return ctx.pipeline_runner.forward_backward(iterators, forward_only)
    from megatron.core.pipeline_parallel import get_forward_backward_func

    return get_forward_backward_func()(
        forward_step_func=ctx.forward_step_func,
        data_iterator=iterators,
        model=ctx.model,
        num_microbatches=ctx.num_microbatches,
        seq_length=ctx.seq_length,
        micro_batch_size=ctx.cfg.train.micro_batch_size,
        decoder_seq_length=ctx.seq_length,
        forward_only=forward_only,
    )


def train_step(ctx: TrainingContext) -> tuple[float, float | None, bool]:
    """One global batch: forward/backward over all microbatches, then (if finite) the optimizer step."""
    if ctx.megatron_ddp:
        for chunk in ctx.model:
            chunk.zero_grad_buffer()
    ctx.optimizer.zero_grad()
    losses_reduced = _forward_backward(ctx, ctx.train_iterators, forward_only=False)
    loss = _broadcast_loss(_reduce_losses(losses_reduced))
    iteration = ctx.state.iteration + 1
    if not math.isfinite(loss):
        raise NonFiniteLossError(_non_finite_message("lm loss", loss, iteration, ctx))
    update_successful, grad_norm, _ = ctx.optimizer.step()
    if update_successful:
        ctx.scheduler.step(increment=ctx.cfg.train.global_batch_size)
    elif grad_norm is None:
        pass  # the fp16 loss scaler found inf/nan gradients: Megatron-Core skips this step
    if grad_norm is not None and not math.isfinite(grad_norm):
        raise NonFiniteLossError(_non_finite_message("grad norm", grad_norm, iteration, ctx))
    return loss, grad_norm, bool(update_successful)


def last_finite_checkpoint(save_dir: str | None) -> tuple[int, str, dict] | None:
    """The newest complete checkpoint in `save_dir` whose weights were finite when it was saved
    (from its manifest summary; a checkpoint without one counts as finite)."""
    from bridge.checkpoint import manifest, paths

    if not save_dir:
        return None
    for it in reversed(paths.complete_iterations(save_dir)):
        folder = paths.checkpoint_dir(save_dir, it)
        summary = manifest.summary(folder)
        if summary.get("weights_finite", True):
            return it, str(folder), summary
    return None


def _last_checkpoint_note(save_dir: str | None) -> str:
    found = last_finite_checkpoint(save_dir)
    if found is None:
        return (
            "no checkpoint with finite weights exists in checkpoint.save" if save_dir else "nothing was saved"
        )
    it, folder, summary = found
    size = summary.get("max_abs_weight")
    loss = summary.get("lm_loss")
    facts = ", ".join(
        x
        for x in (
            f"lm loss {loss:.4g}" if isinstance(loss, float) else "",
            f"largest |weight| {size:.3g}" if isinstance(size, float) else "",
        )
        if x
    )
    return (
        f"the last checkpoint with finite weights is iteration {it} ({folder}{': ' + facts if facts else ''})"
    )


def _non_finite_message(what: str, value: float, iteration: int, ctx: TrainingContext) -> str:
    if what == "lm loss":
        stopped = "training stopped before the optimizer step could change the weights"
    else:  # Megatron-Core computes the norm inside optimizer.step(): this step was already applied
        stopped = "training stopped; the weights in memory are no longer trusted and are not saved"
    return (
        f"{what} is {value} at iteration {iteration}: {stopped}; {_last_checkpoint_note(ctx.cfg.checkpoint.save)}. "
        "Lower optimizer.lr, check the data, or enable gradient clipping (optimizer.clip_grad), then resume "
        "from that checkpoint (checkpoint.ckpt_step)."
    )


def _weights_summary(model: list) -> dict:
    """Whether every parameter is finite, and the largest finite |weight| (over all ranks)."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    finite, largest = True, 0.0
    with torch.no_grad():
        for chunk in model:
            for p in chunk.parameters():
                ok = bool(torch.isfinite(p).all())
                finite &= ok
                a = p.detach().abs()
                if not ok:
                    a = a[torch.isfinite(a)]
                if a.numel():
                    largest = max(largest, float(a.max()))
    t = torch.tensor([0.0 if finite else 1.0, largest], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return {"weights_finite": bool(t[0].item() == 0.0), "max_abs_weight": float(t[1].item())}


def evaluate(ctx: TrainingContext) -> float:
    """Mean lm loss over validation.eval_iters global batches (forward only)."""
    for chunk in ctx.model:
        chunk.eval()
    sums: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for _ in range(ctx.cfg.validation.eval_iters):
            totals = _reduce_losses(_forward_backward(ctx, ctx.valid_iterators, forward_only=True))
            for k, v in totals.items():
                sums[k] = sums.get(k, 0) + v
            ctx.state.consumed_valid_samples += ctx.cfg.train.global_batch_size
    for chunk in ctx.model:
        chunk.train()
    return _broadcast_loss(sums)


def _sync_params_for(ctx: TrainingContext):
    """With overlapped param all-gather, params are current only after the next forward's hooks run:
    force the gather before saving or evaluating, and re-arm the hooks afterwards."""

    class _Sync:
        def __enter__(self):
            if ctx.overlap_param_gather:
                for chunk in ctx.model:
                    chunk.disable_forward_pre_hook(param_sync=True)

        def __exit__(self, *exc):
            if ctx.overlap_param_gather:
                for chunk in ctx.model:
                    chunk.enable_forward_pre_hook()

    return _Sync()


def save(ctx: TrainingContext, loss: float | None = None) -> str:
    """Save the current iteration (refused, with NonFiniteLossError, when a weight is NaN/inf)."""
    cfg = ctx.cfg.checkpoint
    summary = _weights_summary(ctx.model)
    if not summary["weights_finite"]:
        raise NonFiniteLossError(
            f"weights are not finite at iteration {ctx.state.iteration}: not saved; "
            f"{_last_checkpoint_note(cfg.save)}. Lower optimizer.lr or enable gradient clipping "
            "(optimizer.clip_grad), then resume from that checkpoint."
        )
    if loss is not None and math.isfinite(loss):
        summary["lm_loss"] = float(loss)
    target = checkpoint.checkpoint_dir(cfg.save, ctx.state.iteration)
    if checkpoint.latest_iteration(cfg.save) == ctx.state.iteration and (target / "manifest.json").is_file():
        if torch.distributed.get_rank() == _log_rank():
            logger.info(
                "iteration %d is already saved in %s (a tracked checkpoint is never rewritten)",
                ctx.state.iteration,
                target,
            )
        return str(target)
    with _sync_params_for(ctx):
        path = checkpoint.save_checkpoint(
            cfg.save,
            ctx.state.iteration,
            ctx.model,
            optimizer=ctx.optimizer if cfg.save_optim else None,
            scheduler=ctx.scheduler,
            train_state=ctx.state.to_dict(),
            run_config_yaml=ctx.run_config_yaml,
            save_rng=cfg.save_rng,
            most_recent_k=cfg.most_recent_k,
            summary=summary,
            consolidated=ctx.consolidated,
            fully_parallel=cfg.fully_parallel_save,
        )
    if torch.distributed.get_rank() == _log_rank():
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        what = ", PEFT adapters only" if ctx.cfg.peft.scheme is not None else ""
        logger.info(
            "saved checkpoint at iteration %d to %s (%.2f MB%s)", ctx.state.iteration, path, size / 1e6, what
        )
    return str(path)


class _ExitRequests:
    """SIGTERM, SIGINT and train.exit_signal set a flag (the step in progress finishes); the loop asks
    every iteration whether any rank got one, or train.exit_duration_in_mins has passed, and then
    saves and returns. A second SIGINT interrupts at once (KeyboardInterrupt)."""

    def __init__(self, train_cfg):
        import signal
        import threading

        self.received: str | None = None
        self.started = time.monotonic()
        self.duration_s = (train_cfg.exit_duration_in_mins or 0) * 60.0
        self._previous: dict = {}
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        wanted = {signal.SIGTERM, signal.SIGINT}
        if train_cfg.exit_signal:
            wanted.add(_signal_number(train_cfg.exit_signal))
        for sig in wanted:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        import signal

        name = signal.Signals(signum).name
        if self.received == name and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = name

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def poll(self) -> str | None:
        """The reason to stop now (the same on every rank), or None."""
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        import signal

        code = float(signal.Signals[self.received].value) if self.received else 0.0
        late = 1.0 if self.duration_s and time.monotonic() - self.started >= self.duration_s else 0.0
        t = torch.tensor([code, late], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        if t[0].item():
            return f"received {signal.Signals(int(t[0].item())).name}"
        if t[1].item():
            return f"train.exit_duration_in_mins={self.duration_s / 60:g} reached"
        return None


def _signal_number(value) -> int:
    import signal

    text = str(value).strip().upper()
    if text.isdigit():
        return int(text)
    return int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])


def _memory_note() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    import resource

    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (max RSS)"


def train(ctx: TrainingContext) -> TrainResult:
    cfg = ctx.cfg
    state = ctx.state
    result = TrainResult(iteration=state.iteration, skipped_iterations=state.skipped_iterations)
    if cfg.train.manual_gc:
        gc.disable()
        gc.collect()
    start_iteration = state.iteration  # a resumed run never re-saves the iteration it loaded
    exits = _ExitRequests(cfg.train)
    profiler = None
    if ctx.plan.profiling is not None:  # nothing at all when profiling is off
        from bridge.training.profiling import StepProfiler

        profiler = StepProfiler.for_rank(ctx.plan.profiling, torch.distributed.get_rank())
    try:
        return _loop(ctx, result, exits, start_iteration, start_iteration, profiler)
    finally:
        if profiler is not None:
            profiler.finish()  # an error inside the window: stop and write what was recorded
        exits.restore()
        if cfg.train.manual_gc:
            gc.enable()


def _mfu_device(ctx: TrainingContext, log: bool) -> str | None:
    """The CUDA device name the MFU's peak is looked up by (queried once per run), or None: no CUDA, or
    no peak for it in bridge/training/peak_flops.py (said once, on the logging rank)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    compute = ctx.precision.compute
    if peak_flops.peak_tflops(name, compute) is None:
        if log:
            what = f"{compute} peak FLOP/s" if peak_flops.device_peak(name) is not None else "peak FLOP/s"
            logger.info("MFU not shown: no %s for device %s in bridge/training/peak_flops.py", what, name)
        return None
    return name


def _loop(
    ctx: TrainingContext,
    result: TrainResult,
    exits: _ExitRequests,
    saved_at: int,
    start_iteration: int,
    profiler=None,
) -> TrainResult:
    cfg = ctx.cfg
    state = ctx.state
    is_log_rank = torch.distributed.get_rank() == _log_rank()
    train_iters = cfg.train.train_iters
    gbs = cfg.train.global_batch_size
    log_interval = max(1, cfg.logger.log_interval or 1)
    eval_interval = cfg.validation.eval_interval or 0
    save_interval = cfg.checkpoint.save_interval or 0
    exit_interval = cfg.train.exit_interval or 0
    world = torch.distributed.get_world_size()
    mfu_device = _mfu_device(ctx, is_log_rank) if cfg.logger.log_throughput else None
    window_loss, window_n, window_time, window_skipped = 0.0, 0, 0.0, 0
    total_time, total_iters = 0.0, 0
    for chunk in ctx.model:
        chunk.train()
    while state.iteration < train_iters:
        if profiler is not None:
            profiler.begin(state.iteration + 1)
        start = time.perf_counter()
        loss, grad_norm, ok = train_step(ctx)
        elapsed = time.perf_counter() - start
        if profiler is not None:
            profiler.end(state.iteration + 1)
        state.iteration += 1
        state.consumed_train_samples += gbs
        if not ok:
            state.skipped_iterations += 1
            window_skipped += 1
        it = state.iteration
        lr = ctx.optimizer.param_groups[0]["lr"]
        result.losses[it], result.grad_norms[it], result.learning_rates[it] = loss, grad_norm, lr
        result.iteration_times[it] = elapsed
        window_loss, window_n, window_time = window_loss + loss, window_n + 1, window_time + elapsed
        if total_iters or it > 1 or train_iters == 1:  # the first step includes warm-up: keep it out
            total_time, total_iters = total_time + elapsed, total_iters + 1

        if it % log_interval == 0:
            per_iter = window_time / window_n
            tokens_per_s = gbs * ctx.seq_length / per_iter
            tflops = ctx.flops_per_token * tokens_per_s / world / 1e12
            stats = IterationStats(
                iteration=it,
                train_iters=train_iters,
                consumed_samples=state.consumed_train_samples,
                elapsed_ms=per_iter * 1000.0,
                learning_rate=lr,
                global_batch_size=gbs,
                losses={"lm loss": window_loss / window_n},
                grad_norm=grad_norm,
                loss_scale=float(ctx.optimizer.get_loss_scale().item()) if ctx.precision.fp16 else None,
                tokens_per_second=tokens_per_s if cfg.logger.log_throughput else None,
                tflops_per_gpu=tflops if cfg.logger.log_throughput else None,
                throughput_unit="GPU" if ctx.plan.cuda else "rank",
                mfu=peak_flops.mfu(tflops, mfu_device, ctx.precision.compute) if mfu_device else None,
                skipped_iterations=window_skipped,
                extra={"max memory": _memory_note()} if cfg.logger.log_memory else {},
            )
            if is_log_rank:
                logger.info(format_iteration_line(stats))
                scalars = {
                    "lm loss": stats.losses["lm loss"],
                    "learning-rate": lr,
                    "iteration-time": per_iter,
                    "tokens-per-second": tokens_per_s,
                }
                if grad_norm is not None:
                    scalars["grad-norm"] = grad_norm
                if stats.mfu is not None:
                    scalars["mfu"] = 100.0 * stats.mfu  # percent
                ctx.writers.write(it, scalars)
            window_loss, window_n, window_time, window_skipped = 0.0, 0, 0.0, 0

        if eval_interval and cfg.validation.eval_iters and ctx.valid_iterators and it % eval_interval == 0:
            if cfg.train.manual_gc and cfg.train.manual_gc_eval:
                gc.collect()
            with _sync_params_for(ctx):
                val = evaluate(ctx)
            if cfg.train.manual_gc and cfg.train.manual_gc_eval:
                gc.collect()
            result.validation_losses[it] = val
            if is_log_rank:
                logger.info(format_validation_line(it, {"lm loss": val}))
                ctx.writers.write(it, {"validation lm loss": val})

        if cfg.checkpoint.save and save_interval and it % save_interval == 0:
            result.last_checkpoint, saved_at = save(ctx, loss), it
        if cfg.train.manual_gc and cfg.train.manual_gc_interval and it % cfg.train.manual_gc_interval == 0:
            gc.collect()
        if exit_interval and it % exit_interval == 0:
            if is_log_rank:
                logger.info("exiting at iteration %d (train.exit_interval=%d)", it, exit_interval)
            break
        reason = exits.poll()
        if reason is not None:
            result.exit_reason = reason
            if cfg.checkpoint.save and saved_at != it:
                result.last_checkpoint, saved_at = save(ctx, loss), it
            if is_log_rank:
                what = (
                    f"saved checkpoint {result.last_checkpoint}"
                    if cfg.checkpoint.save
                    else "nothing saved (checkpoint.save is not set)"
                )
                logger.warning("%s at iteration %d: %s; exiting", reason, it, what)
            break

    if profiler is not None:
        profiler.finish()  # the run ended inside the window: the trace leaves out the final save
    if cfg.checkpoint.save and state.iteration > start_iteration and saved_at != state.iteration:
        result.last_checkpoint = save(ctx, result.losses.get(state.iteration))
    result.iteration = state.iteration
    result.skipped_iterations = state.skipped_iterations
    if total_iters:
        result.tokens_per_second = total_iters * gbs * ctx.seq_length / total_time
    return result
