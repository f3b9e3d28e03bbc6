"""pretrain(config): set up distributed, model, optimizer, data and checkpoints, then train.

The same code runs on GPU (NCCL, bf16 as the recipe says) and CPU (gloo, fp32, Megatron-Core's CPU
backend from bridge.parallel): only the backend and precision choices differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from bridge.errors import ConfigError
from bridge.training.state import TrainResult, TrainState


def _model_for_run(provider, precision, dist_cfg):
    """The model section with the run's precision (Megatron-Bridge's bf16_mixed / fp16_mixed / fp32) and
    distributed.activation_checkpointing (full recompute of every layer, as the section documents)."""
    name = precision.name
    changes = dict(bf16=precision.bf16, fp16=precision.fp16, params_dtype=name,
                   pipeline_dtype=name if name != "fp32" else None)  # fmt: skip
    if dist_cfg.activation_checkpointing:
        changes.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    return dataclasses.replace(provider, **changes)


def _resume(cfg: Any, model: list, optimizer, scheduler, layout_line: str) -> TrainState:
    """checkpoint.load resumes everything when it holds a checkpoint; otherwise
    checkpoint.pretrained_checkpoint (if set) loads weights only, as in Megatron-Bridge."""
    from bridge import checkpoint
    from bridge.training.logging import logger

    ck = cfg.checkpoint
    if ck.load and checkpoint.latest_iteration(ck.load) is not None:
        saved = checkpoint.saved_layout(ck.load)
        same_layout = saved == layout_line
        if not same_layout and (ck.load_optim or ck.load_rng):
            raise ConfigError(
                f"checkpoint.load={ck.load!r} was saved with layout {saved} but this run is {layout_line}: "
                "model weights reshard, optimizer and RNG state do not. Set checkpoint.load_optim=False "
                "checkpoint.load_rng=False to continue with fresh optimizer state, or keep the saved layout."
            )
        train_state = checkpoint.load_checkpoint(
            ck.load, model, optimizer if ck.load_optim else None, scheduler, load_rng=ck.load_rng
        )
        if not ck.load_optim:
            optimizer.reload_model_params()
        state = TrainState.from_dict(train_state)
        state.layout = layout_line
        logger.info("resumed from %s at iteration %d", ck.load, state.iteration)
        return state
    if ck.load:
        logger.warning("checkpoint.load=%s holds no checkpoint yet: starting from scratch", ck.load)
    if ck.pretrained_checkpoint:
        checkpoint.load_checkpoint(
            ck.pretrained_checkpoint, model, None, None, load_rng=False, model_config=cfg.model
        )
        optimizer.reload_model_params()
        logger.info("loaded pretrained weights from %s", ck.pretrained_checkpoint)
    return TrainState(layout=layout_line)


def _configure_model_hooks(model: list, optimizer, wrapped, dist_cfg) -> bool:
    """Megatron-LM's wiring of grad scaling, grad-sync overlap and grad finalization into the schedules.
    Returns whether parameter all-gathers are overlapped with the forward pass."""
    from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
    from megatron.core.utils import get_model_config

    config = get_model_config(model[0])
    config.grad_scale_func = optimizer.scale_loss
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = config.grad_sync_func = config.param_sync_func = None

    def one_or_list(fns):
        return fns[0] if len(fns) == 1 else fns

    is_mcore_ddp = isinstance(model[0], DistributedDataParallel)
    if is_mcore_ddp and dist_cfg.overlap_grad_reduce:
        config.no_sync_func = one_or_list([m.no_sync for m in model])
        config.grad_sync_func = one_or_list([m.start_grad_sync for m in model])
    elif not wrapped.megatron_ddp and hasattr(model[0], "no_sync"):
        config.no_sync_func = one_or_list([m.no_sync for m in model])
    overlap_param_gather = bool(is_mcore_ddp and model[0].ddp_config.overlap_param_gather)
    if overlap_param_gather:
        config.param_sync_func = one_or_list([m.start_param_sync for m in model])
    return overlap_param_gather


def pretrain(config: Any, forward_step_func: Callable | None = None) -> TrainResult:
    """Train `config` (a ConfigContainer). Call on every rank (torchrun) or in one plain process."""
    import torch

    from bridge.parallel import runtime

    runtime.quiet_known_warnings()  # before the imports below pull in Megatron-Core (some warn on import)
    from bridge.training.data.loaders import build_datasets, build_iterator, split_sample_counts
    from bridge.training.data.tokenizer import build_tokenizer
    from bridge.training.flops import training_flops_per_token
    from bridge.training.forward_step import forward_step as default_forward_step
    from bridge.training.logging import MetricWriters, ensure_console_logging, logger
    from bridge.training.optim import build_optimizer, build_scheduler
    from bridge.training.precision import resolve_precision
    from bridge.training.strategies import check_strategy_available, wrap_model
    from bridge.training.train import TrainingContext, train

    cfg = config
    cfg.resolve()
    world = (
        torch.distributed.get_world_size()
        if torch.distributed.is_initialized()
        else runtime.world_size_from_env()
    )
    warnings = cfg.validate(world)
    cuda = torch.cuda.is_available()
    if cfg.checkpoint.async_save:
        raise ConfigError(
            "checkpoint.async_save=True is not supported by bridge.training yet: set "
            "checkpoint.async_save=False (saves are synchronous)"
        )
    if cfg.checkpoint.ckpt_format != "torch_dist":
        raise ConfigError(
            f"checkpoint.ckpt_format={cfg.checkpoint.ckpt_format!r}: only torch_dist is supported"
        )
    check_strategy_available(cfg.distributed.strategy, cuda)
    ensure_console_logging()
    for handler in logger.handlers:  # bridge's own console handler (none when the application set up logging)
        runtime.log_on_rank_zero(handler, own_rank=(logger.name,))  # the loop picks its log rank itself
    precision = resolve_precision(cfg.mixed_precision.precision, cuda)
    provider = _model_for_run(cfg.model, precision, cfg.distributed)
    layout = cfg.layout(world)
    runtime.initialize_distributed(layout, seed=cfg.rng.seed, timeout_minutes=cfg.distributed.timeout_minutes)
    for w in warnings:
        if torch.distributed.get_rank() == 0:
            logger.warning("config: %s", w)

    wrapped = wrap_model(
        provider,
        cfg.distributed,
        cfg.optimizer,
        cuda_available=cuda,
        seed=cfg.rng.seed,
        data_parallel_random_init=cfg.rng.data_parallel_random_init,
    )
    model = wrapped.chunks
    optimizer = build_optimizer(
        cfg.optimizer,
        model,
        precision,
        cfg.mixed_precision,
        use_distributed_optimizer=wrapped.use_distributed_optimizer,
    )
    scheduler = build_scheduler(
        optimizer, cfg.optimizer, cfg.scheduler, cfg.train.train_iters, cfg.train.global_batch_size
    )
    overlap_param_gather = _configure_model_hooks(model, optimizer, wrapped, cfg.distributed)
    state = _resume(cfg, model, optimizer, scheduler, layout.describe())

    from megatron.core import parallel_state

    dp_rank = parallel_state.get_data_parallel_rank()
    dp = parallel_state.get_data_parallel_world_size()
    mbs, gbs = cfg.train.micro_batch_size, cfg.train.global_batch_size
    num_microbatches = gbs // (mbs * dp)
    seq_length = cfg.model.seq_length
    tokenizer = build_tokenizer(cfg.tokenizer, provider.padded_vocab_size())
    sizes = split_sample_counts(
        cfg.train.train_iters, gbs, cfg.validation.eval_interval, cfg.validation.eval_iters
    )
    train_ds, valid_ds, _ = build_datasets(cfg.dataset, tokenizer, seq_length, sizes)
    workers = int(cfg.dataset.num_workers or 0)
    if workers and not cuda:
        # Worker processes would compete with the training threads for the same few cores.
        if torch.distributed.get_rank() == 0:
            logger.warning("dataset.num_workers=%d: on CPU the data is read in the training process", workers)
        workers = 0

    def iterators(ds, consumed):
        if ds is None:
            return None
        return [build_iterator(ds, consumed, mbs, dp_rank, dp, workers) for _ in model]

    is_log_rank = torch.distributed.get_rank() == torch.distributed.get_world_size() - 1
    writers = MetricWriters(cfg.logger if is_log_rank else None)  # TensorBoard / W&B on the logging rank
    ctx = TrainingContext(
        cfg=cfg,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        forward_step_func=forward_step_func or default_forward_step,
        train_iterators=iterators(train_ds, state.consumed_train_samples),
        valid_iterators=iterators(valid_ds, state.consumed_valid_samples),
        state=state,
        num_microbatches=num_microbatches,
        seq_length=seq_length,
        megatron_ddp=wrapped.megatron_ddp,
        overlap_param_gather=overlap_param_gather,
        flops_per_token=training_flops_per_token(provider, seq_length),
        writers=writers,
        run_config_yaml=cfg.to_yaml() if cfg.checkpoint.save else None,
        precision=precision,
    )
    try:
        return train(ctx)
    finally:
        writers.close()
