"""One training step, evaluation, and the iteration loop, on Megatron-Core's pipeline schedules or (the
plan's torch schedules: gpipe, looped_bfs, dfs, zero_bubble) on torch.distributed.pipelining's
(bridge/training/pipelining.py). The loop is a sequence of named steps (`_loop`); saving lives in
bridge/training/saves.py, the exit signals in bridge/training/exit_requests.py."""

from __future__ import annotations

import gc
import math
import resource
import time
from dataclasses import dataclass

import torch

from bridge.config.container import ConfigContainer
from bridge.parallel.ranks import env_local_world_size, node_echo_ranks
from bridge.training import peak_flops
from bridge.training.benchmarks import format_benchmark_line, run_benchmarks
from bridge.training.context import TrainingContext
from bridge.training.exit_requests import ExitRequests
from bridge.training.logging import (
    IterationStats,
    format_iteration_line,
    format_validation_line,
    logger,
)
from bridge.training.mtp_metrics import mtp_step_losses
from bridge.training.profiling import StepProfiler
from bridge.training.qk_clip import clip_qk
from bridge.training.saves import finish_pending, log_rank, non_finite_message, save, sync_params_for
from bridge.training.source_losses import source_means
from bridge.training.state import NonFiniteLossError, TrainResult
from bridge.training.stragglers import StragglerDetector
from bridge.training.watchdog import Heartbeat, Watchdog, job_store


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


# the loss a step minimises, by the name its loss function reports (distillation reports lm loss too)
OBJECTIVES = ("distill loss", "dpo loss", "lm loss")


def _broadcast_loss(totals: dict[str, torch.Tensor]) -> float:
    """The objective (OBJECTIVES: the first one reported) from the logging rank to every rank, so all ranks take the
    same decisions."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    value = torch.zeros(1, dtype=torch.float64, device=device)
    key = next((k for k in OBJECTIVES if k in totals), None)
    if key is not None:
        s, n = totals[key].tolist()
        value[0] = s / max(n, 1.0)
    torch.distributed.broadcast(value, src=log_rank())
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
        micro_batch_size=ctx.cfg.train.micro_batch_size * ctx.rows_per_sample,
        decoder_seq_length=ctx.seq_length,
        forward_only=forward_only,
    )


def train_step(ctx: TrainingContext) -> tuple[float, float | None, bool]:
    """One global batch: forward/backward over all microbatches, then (if finite) the optimizer step."""
    if ctx.megatron_ddp:
        for chunk in ctx.model:
            chunk.zero_grad_buffer()
    ctx.optimizer.zero_grad()
    ctx.heartbeat.beat("forward/backward", ctx.state.iteration + 1)
    losses_reduced = _forward_backward(ctx, ctx.step_iterators(ctx.train_iterators), forward_only=False)
    ctx.heartbeat.beat("loss all-reduce")
    totals = _reduce_losses(losses_reduced)
    loss = _broadcast_loss(totals)
    if ctx.frozen_pass is not None:
        ctx.step_metrics = ctx.frozen_pass.metrics(totals)
    mtp_layers = getattr(ctx.plan.provider, "mtp_num_layers", None)
    if mtp_layers:  # the MTP losses beside the LM loss (bridge/training/mtp_metrics.py)
        mtp = mtp_step_losses(mtp_layers, ctx.num_microbatches, log_rank())
        ctx.step_metrics = {**(ctx.step_metrics if ctx.frozen_pass is not None else {}), **mtp}
    iteration = ctx.state.iteration + 1
    if not math.isfinite(loss):
        raise NonFiniteLossError(non_finite_message(ctx.objective, loss, iteration, ctx))
    ctx.heartbeat.beat("optimizer step")
    update_successful, grad_norm, _ = ctx.optimizer.step()
    model_cfg = ctx.cfg.model
    if model_cfg.qk_clip or model_cfg.log_max_attention_logit:
        # QK-clip right after the step, on the logits of the step's forward passes (Megatron-Bridge's order)
        largest = clip_qk(ctx.model, clip=bool(model_cfg.qk_clip and update_successful))
        ctx.step_metrics = {**ctx.step_metrics, "max-attention-logit": largest}
    if update_successful:
        ctx.scheduler.step(increment=ctx.cfg.train.global_batch_size)
    elif grad_norm is None:
        pass  # the fp16 loss scaler found inf/nan gradients: Megatron-Core skips this step
    if grad_norm is not None and not math.isfinite(grad_norm):
        raise NonFiniteLossError(non_finite_message("grad norm", grad_norm, iteration, ctx))
    return loss, grad_norm, bool(update_successful)


def _broadcast_source_losses(ctx: TrainingContext, sums: dict[str, torch.Tensor]) -> dict[str, float]:
    """Blended validation data: each source's mean objective (bridge.training.source_losses), from the
    logging rank to every rank; {} for unblended data."""
    names = ctx.plan.data.paths if ctx.plan.data.weights else ()
    if not names:
        return {}
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    values = torch.full((len(names),), float("nan"), dtype=torch.float64, device=device)
    means = source_means(sums, ctx.objective, names)
    for j, name in enumerate(names):
        if name in means:
            values[j] = means[name]
    torch.distributed.broadcast(values, src=log_rank())
    return {name: v for name, v in zip(names, values.tolist(), strict=True) if math.isfinite(v)}


def evaluate(ctx: TrainingContext) -> tuple[float, dict[str, float]]:
    """Mean objective over validation.eval_iters global batches (forward only), and with blended data
    each source's (by path)."""
    for chunk in ctx.model:
        chunk.eval()
    sums: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for _ in range(ctx.cfg.validation.eval_iters):
            iterators = ctx.step_iterators(ctx.valid_iterators)
            totals = _reduce_losses(_forward_backward(ctx, iterators, forward_only=True))
            for k, v in totals.items():
                sums[k] = sums.get(k, 0) + v
            ctx.state.consumed_valid_samples += ctx.cfg.train.global_batch_size
    for chunk in ctx.model:
        chunk.train()
    return _broadcast_loss(sums), _broadcast_source_losses(ctx, sums)


def _memory_note() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"

    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (max RSS)"


def train(ctx: TrainingContext) -> TrainResult:
    cfg = ctx.cfg
    state = ctx.state
    result = TrainResult(iteration=state.iteration, skipped_iterations=state.skipped_iterations)
    if cfg.train.manual_gc:
        gc.disable()
        gc.collect()
    start_iteration = state.iteration  # a resumed run never re-saves the iteration it loaded
    exits = ExitRequests(cfg.train)
    profiler = None
    if ctx.plan.profiling is not None:  # nothing at all when profiling is off
        profiler = StepProfiler.for_rank(ctx.plan.profiling, torch.distributed.get_rank())
    watchdog = _watch(ctx)
    try:
        return _loop(ctx, result, exits, start_iteration, start_iteration, profiler)
    finally:
        if watchdog is not None:
            watchdog.stop()
        if profiler is not None:
            profiler.finish()  # an error inside the window: stop and write what was recorded
        if ctx.async_saves is not None:  # an error: its write in flight is not published
            ctx.async_saves.abandon()
        exits.restore()
        if cfg.train.manual_gc:
            gc.enable()


def _watch(ctx: TrainingContext) -> Watchdog | None:
    """The heartbeat (data reads timed and beaten when hang or straggler detection is on), and the hung-rank
    watchdog when ft.rank_heartbeat_timeout is set."""
    plan = ctx.plan
    ctx.heartbeat = Heartbeat(ctx.state.iteration)
    if plan.hang is None and plan.stragglers is None:
        return None
    ctx.train_iterators = [ctx.heartbeat.wrap(it) for it in ctx.train_iterators]
    if plan.hang is None:
        return None
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    store = job_store() if world > 1 else None
    return Watchdog(
        ctx.heartbeat, plan.hang.timeout_s, plan.hang.initial_timeout_s, rank, world, store
    ).start()


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


@dataclass
class _LoopState:
    """What the loop carries from one iteration to the next, besides the checkpointed TrainState."""

    saved_at: int  # the last iteration saved (a resumed run's loaded one counts: it is never re-saved)
    is_log_rank: bool
    mfu_device: str | None
    # multi-node: the logging rank's iteration line is sent to every rank and the first rank of each
    # other node prints it too, so that every node's log (a scheduler's per-node file) shows the run
    multi_node: bool = False
    echoes: bool = False
    stragglers: StragglerDetector | None = None
    # the log line's window: sums since the last line
    window_loss: float = 0.0
    window_n: int = 0
    window_time: float = 0.0
    window_skipped: int = 0
    # the run's throughput, without the first step (it includes the warm-up)
    total_time: float = 0.0
    total_iters: int = 0

    def reset_window(self) -> None:
        self.window_loss, self.window_n, self.window_time, self.window_skipped = 0.0, 0, 0.0, 0


def _loop(
    ctx: TrainingContext,
    result: TrainResult,
    exits: ExitRequests,
    saved_at: int,
    start_iteration: int,
    profiler=None,
) -> TrainResult:
    cfg = ctx.cfg
    is_log_rank = torch.distributed.get_rank() == log_rank()
    mfu_device = _mfu_device(ctx, is_log_rank) if cfg.logger.log_throughput else None
    echo_ranks = node_echo_ranks(torch.distributed.get_world_size(), env_local_world_size(), log_rank())
    loop = _LoopState(
        saved_at=saved_at,
        is_log_rank=is_log_rank,
        mfu_device=mfu_device,
        multi_node=bool(echo_ranks),
        echoes=torch.distributed.get_rank() in echo_ranks,
    )
    if ctx.plan.stragglers is not None:
        loop.stragglers = StragglerDetector(ctx.plan.stragglers, ctx.heartbeat, ctx.writers, is_log_rank)
    beat = ctx.heartbeat.beat
    log_interval = max(1, cfg.logger.log_interval or 1)
    for chunk in ctx.model:
        chunk.train()
    while ctx.state.iteration < cfg.train.train_iters:
        loss, grad_norm = _run_iteration(ctx, result, loop, profiler)
        it = ctx.state.iteration
        ctx.heartbeat.steps_done += 1
        if loop.stragglers is not None:
            beat("straggler report (all-gather)")
            found = loop.stragglers.maybe_report(it)
            if found is not None:
                result.stragglers[it] = [(s.rank, s.what) for s in found]
        beat("logging")
        if it % log_interval == 0:
            _log_iteration(ctx, loop, it, grad_norm, result.learning_rates[it])
        beat("evaluation")
        _maybe_evaluate(ctx, result, loop, it)
        _maybe_benchmark(ctx, result, loop, it)
        beat("checkpoint save")
        _maybe_save(ctx, result, loop, it, loss)
        _maybe_collect_garbage(cfg, it)
        beat("exit check (all-reduce)")
        if _exit_interval_reached(cfg, loop, it) or _exit_requested(ctx, result, loop, exits, it, loss):
            break
    beat("final checkpoint save")
    if profiler is not None:
        profiler.finish()  # the run ended inside the window: the trace leaves out the final save
    return _finish(ctx, result, loop, start_iteration)


def _run_iteration(
    ctx: TrainingContext, result: TrainResult, loop: _LoopState, profiler
) -> tuple[float, float | None]:
    """One train step, timed (and profiled), counted in the TrainState and recorded in the result."""
    state = ctx.state
    if profiler is not None:
        profiler.begin(state.iteration + 1)
    start = time.perf_counter()
    loss, grad_norm, ok = train_step(ctx)
    elapsed = time.perf_counter() - start
    if profiler is not None:
        profiler.end(state.iteration + 1)
    state.iteration += 1
    state.consumed_train_samples += ctx.cfg.train.global_batch_size
    if not ok:
        state.skipped_iterations += 1
        loop.window_skipped += 1
    it = state.iteration
    lr = ctx.optimizer.param_groups[0]["lr"]
    result.losses[it], result.grad_norms[it], result.learning_rates[it] = loss, grad_norm, lr
    result.iteration_times[it] = elapsed
    if ctx.step_metrics:
        result.metrics[it] = dict(ctx.step_metrics)
    loop.window_loss, loop.window_n = loop.window_loss + loss, loop.window_n + 1
    loop.window_time += elapsed
    if loop.stragglers is not None:
        loop.stragglers.record_step(elapsed)
    if loop.total_iters or it > 1 or ctx.cfg.train.train_iters == 1:  # the first step includes warm-up
        loop.total_time, loop.total_iters = loop.total_time + elapsed, loop.total_iters + 1
    return loss, grad_norm


def _log_iteration(
    ctx: TrainingContext, loop: _LoopState, it: int, grad_norm: float | None, lr: float
) -> None:
    """The iteration line over the window since the last one (logging rank), its scalars to TensorBoard /
    W&B; then a new window."""
    cfg = ctx.cfg
    gbs = cfg.train.global_batch_size
    per_iter = loop.window_time / loop.window_n
    tokens_per_s = gbs * ctx.seq_length / per_iter
    tflops = ctx.flops_per_token * tokens_per_s / torch.distributed.get_world_size() / 1e12
    throughput = cfg.logger.log_throughput
    stats = IterationStats(
        iteration=it,
        train_iters=cfg.train.train_iters,
        consumed_samples=ctx.state.consumed_train_samples,
        elapsed_ms=per_iter * 1000.0,
        learning_rate=lr,
        global_batch_size=gbs,
        # the objective over the window; DPO's rewards and accuracy of the window's last step
        losses={ctx.objective: loop.window_loss / loop.window_n, **ctx.step_metrics},
        grad_norm=grad_norm,
        loss_scale=float(ctx.optimizer.get_loss_scale().item()) if ctx.precision.fp16 else None,
        tokens_per_second=tokens_per_s if throughput else None,
        tflops_per_gpu=tflops if throughput else None,
        throughput_unit="GPU" if ctx.plan.cuda else "rank",
        mfu=peak_flops.mfu(tflops, loop.mfu_device, ctx.precision.compute) if loop.mfu_device else None,
        skipped_iterations=loop.window_skipped,
        extra={"max memory": _memory_note()} if cfg.logger.log_memory else {},
    )
    line = format_iteration_line(stats) if loop.is_log_rank else None
    if loop.multi_node:
        box = [line]
        torch.distributed.broadcast_object_list(box, src=log_rank())
        line = box[0]
    if loop.is_log_rank or loop.echoes:
        logger.info(line)
    if loop.is_log_rank:
        scalars = {
            **stats.losses,
            "learning-rate": lr,
            "iteration-time": per_iter,
            "tokens-per-second": tokens_per_s,
        }
        if grad_norm is not None:
            scalars["grad-norm"] = grad_norm
        if stats.mfu is not None:
            scalars["mfu"] = 100.0 * stats.mfu  # percent
        ctx.writers.write(it, scalars)
    loop.reset_window()


def _maybe_evaluate(ctx: TrainingContext, result: TrainResult, loop: _LoopState, it: int) -> None:
    """Every validation.eval_interval iterations (with validation data), the validation loss."""
    cfg = ctx.cfg
    interval = cfg.validation.eval_interval or 0
    if not (interval and cfg.validation.eval_iters and ctx.valid_iterators and it % interval == 0):
        return
    collect = cfg.train.manual_gc and cfg.train.manual_gc_eval
    if collect:
        gc.collect()
    with sync_params_for(ctx):
        val, per_source = evaluate(ctx)
    if collect:
        gc.collect()
    result.validation_losses[it] = val
    if per_source:
        result.validation_source_losses[it] = per_source
    if loop.is_log_rank:
        logger.info(format_validation_line(it, {ctx.objective: val}))
        scalars = {f"validation {ctx.objective}": val}
        for name, loss in per_source.items():  # Megatron-LM's multiple validation sets' names
            logger.info(format_validation_line(it, {ctx.objective: loss}, name))
            scalars[f"{ctx.objective} validation-{name}"] = loss
        ctx.writers.write(it, scalars)


def _maybe_benchmark(ctx: TrainingContext, result: TrainResult, loop: _LoopState, it: int) -> None:
    """Every benchmarks.interval iterations (validation.lm_eval_tasks), lm-eval's scores, logged beside
    the validation loss."""
    bench = ctx.plan.benchmarks
    if bench is None or it % bench.interval != 0:
        return

    with sync_params_for(ctx):
        scores = run_benchmarks(ctx.model, ctx.plan)
    result.benchmark_scores[it] = scores
    if loop.is_log_rank:
        logger.info(format_benchmark_line(it, scores))
        ctx.writers.write(it, {f"lm-eval/{k}": v for k, v in scores.items()})


def _maybe_save(ctx: TrainingContext, result: TrainResult, loop: _LoopState, it: int, loss: float) -> None:
    """Every checkpoint.save_interval iterations, a checkpoint (and an async write that has finished
    everywhere is published)."""
    finish_pending(ctx, blocking=False)
    interval = ctx.cfg.checkpoint.save_interval or 0
    if ctx.cfg.checkpoint.save and interval and it % interval == 0:
        result.last_checkpoint, loop.saved_at = save(ctx, loss), it


def _maybe_collect_garbage(cfg: ConfigContainer, it: int) -> None:
    if cfg.train.manual_gc and cfg.train.manual_gc_interval and it % cfg.train.manual_gc_interval == 0:
        gc.collect()


def _exit_interval_reached(cfg: ConfigContainer, loop: _LoopState, it: int) -> bool:
    interval = cfg.train.exit_interval or 0
    if interval and it % interval == 0:
        if loop.is_log_rank:
            logger.info("exiting at iteration %d (train.exit_interval=%d)", it, interval)
        return True
    return False


def _exit_requested(
    ctx: TrainingContext, result: TrainResult, loop: _LoopState, exits: ExitRequests, it: int, loss: float
) -> bool:
    """A signal on any rank, or train.exit_duration_in_mins passed: save (unless this iteration is saved)
    and stop."""
    reason = exits.poll()
    if reason is None:
        return False
    result.exit_reason = reason
    save_dir = ctx.cfg.checkpoint.save
    if save_dir and loop.saved_at != it:  # the step in flight has finished: it is what gets saved
        result.last_checkpoint, loop.saved_at = save(ctx, loss, announce=False), it
    finish_pending(ctx, blocking=True)  # an async write: published before the ranks exit
    if loop.is_log_rank:
        what = (
            f"saved checkpoint {result.last_checkpoint}"
            if save_dir
            else "nothing saved (checkpoint.save is not set)"
        )
        logger.warning("%s at iteration %d: %s; exiting", reason, it, what)
    return True


def _finish(ctx: TrainingContext, result: TrainResult, loop: _LoopState, start_iteration: int) -> TrainResult:
    """The final save (when this run trained past its start and has not saved its last iteration), and the
    result's totals."""
    state = ctx.state
    if ctx.cfg.checkpoint.save and state.iteration > start_iteration and loop.saved_at != state.iteration:
        result.last_checkpoint = save(ctx, result.losses.get(state.iteration))
    finish_pending(ctx, blocking=True)  # an async write: published before the run returns
    result.save_stalls = dict(ctx.save_stalls)
    result.iteration = state.iteration
    result.skipped_iterations = state.skipped_iterations
    if loop.total_iters:
        gbs = ctx.cfg.train.global_batch_size
        result.tokens_per_second = loop.total_iters * gbs * ctx.seq_length / loop.total_time
    return result
