"""pretrain(plan) and finetune(plan): build exactly what the RunPlan describes (distributed, model,
optimizer, data, checkpoints), then train.

finetune is the same loop, schedules, checkpoints and logging, started from trained weights
(checkpoint.pretrained_checkpoint: a Hugging Face folder or a torch_dist checkpoint; or checkpoint.load
to resume), with PEFT adapters when peft.scheme is set (base weights frozen, checkpoints hold only the
adapters). A Hugging Face folder streams into each rank's shards while the model is built, in either entry.

The same code runs on GPU (NCCL, bf16 as the recipe says) and CPU (gloo, fp32, Megatron-Core's CPU
backend from bridge.parallel): the plan says which. Nothing here re-validates the configuration.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable

import torch

import bridge.checkpoint as checkpoint
from bridge.checkpoint.async_writes import AsyncSaves
from bridge.checkpoint.paths import is_hf_folder
from bridge.checkpoint.preflight import prepare_save_dir
from bridge.config import performance
from bridge.config.container import ConfigContainer
from bridge.config.finetune_rules import check_finetune_start
from bridge.config.run_plan import RunPlan
from bridge.errors import ConfigError
from bridge.parallel import ranks, runtime
from bridge.parallel.planner.speed import model_flops_per_token
from bridge.peft import apply_peft
from bridge.training.comm_overlap import initialize_tp_userbuffers
from bridge.training.consolidated import consolidated_writer
from bridge.training.context import TrainingContext
from bridge.training.data.loaders import build_datasets, build_iterator
from bridge.training.data.tokenizer import build_tokenizer
from bridge.training.distill import distill_forward_step, teacher_pass
from bridge.training.forward_step import forward_step as default_forward_step
from bridge.training.hf_start import stream_hf_weights
from bridge.training.logging import MetricWriters, ensure_console_logging, logger
from bridge.training.memory_check import check_memory_fits
from bridge.training.optim import build_optimizer, build_scheduler
from bridge.training.pipelining import build_runner
from bridge.training.preference import dpo_forward_step, reference_pass
from bridge.training.process_plan import plan_for_this_process
from bridge.training.resume import loads_before_fully_shard, resume, resume_from
from bridge.training.state import TrainResult
from bridge.training.strategies import finalize_fsdp2_grads, fsdp2_no_sync, release_model, wrap_model
from bridge.training.train import train


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

    if getattr(wrapped, "fsdp2", False):
        config.finalize_model_grads_func = finalize_fsdp2_grads  # FSDP2 reduced over dp*cp in backward
        if dist_cfg.defer_fsdp_grad_sync:  # one reduce-scatter per step, after the last micro batch
            config.no_sync_func = one_or_list([fsdp2_no_sync(m) for m in model])
        return False

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


def _check_plan_matches_process(plan: RunPlan) -> None:
    cuda, world = torch.cuda.is_available(), ranks.world_size()
    if plan.cuda != cuda or plan.world_size != world:
        raise ConfigError(
            f"the plan was made for world_size={plan.world_size} {'with' if plan.cuda else 'without'} CUDA, "
            f"but this process has world_size={world} {'with' if cuda else 'without'} CUDA. Fix: make the "
            "plan in the launched process (build_plan(config, world_size, cuda=torch.cuda.is_available()))"
        )


def pretrain(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None = None) -> TrainResult:
    """Train a RunPlan (or a ConfigContainer, validated here once for this launch).

    Call on every rank (torchrun) or in one plain process.
    """
    return _run(plan, forward_step_func)


def finetune(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None = None) -> TrainResult:
    """Finetune from checkpoint.pretrained_checkpoint (or resume checkpoint.load): full-parameter SFT,
    or PEFT adapters when peft.scheme is set. Same loop as pretrain(); call on every rank."""
    check_finetune_start(plan.config if isinstance(plan, RunPlan) else plan)
    return _run(plan, forward_step_func)


def _model_provider(plan: RunPlan):
    """The plan's provider with the build-time steps of this run: Hugging Face weights streamed in,
    then PEFT adapters attached (the hooks run in that order, before any DDP wrapper)."""
    cfg = plan.config
    provider = copy.deepcopy(plan.provider)
    pretrained = cfg.checkpoint.pretrained_checkpoint
    if is_hf_folder(pretrained):
        stream_hf_weights(provider, pretrained)
    elif pretrained and loads_before_fully_shard(cfg):

        def load_pretrained(chunks: list) -> None:  # into the plain chunks: fully_shard keeps the values
            checkpoint.load_checkpoint(pretrained, chunks, None, None, load_rng=False, model_config=cfg.model)

        provider.register_post_build_hook(load_pretrained, replaces_weights=True)
    if cfg.peft.scheme is not None:
        provider.register_post_build_hook(functools.partial(apply_peft, peft=cfg.peft, seed=cfg.rng.seed))
    return provider


def _run(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None) -> TrainResult:
    runtime.quiet_known_warnings()  # before the imports below pull in Megatron-Core (some warn on import)

    if isinstance(plan, ConfigContainer):
        plan = plan_for_this_process(plan)
    _check_plan_matches_process(plan)
    cfg = plan.config
    ensure_console_logging()
    verbose = cfg.logger.verbose
    runtime.set_verbosity(verbose)  # before initialize_distributed installs the CPU backend (a detail line)
    for handler in logger.handlers:  # bridge's own console handler (none when the application set up logging)
        runtime.log_on_rank_zero(handler, own_rank=(logger.name,))  # the loop picks its log rank itself
    runtime.initialize_distributed(
        plan.layout, seed=cfg.rng.seed, timeout_minutes=cfg.distributed.timeout_minutes
    )
    is_rank_zero = torch.distributed.get_rank() == 0
    if is_rank_zero:
        for w in plan.warnings:
            if verbose or w not in plan.detail_warnings:
                logger.warning("config: %s", w)
        # on CPU every GPU setting is inactive for the same reason: the dry run and -v list them
        for line in performance.summary(plan.performance) if verbose or plan.cuda else ():
            logger.info("%s", line)

    # Transformer Engine's userbuffers communicators must exist before its layers are built
    if performance.is_active(plan.performance, "tp_comm_overlap"):
        initialize_tp_userbuffers(plan)
    check_memory_fits(plan, skip=not cfg.train.check_memory, log=is_rank_zero)

    started = time.perf_counter()
    if is_rank_zero and verbose:
        logger.info(
            "building the model (%d layers, hidden %d) ...",
            plan.provider.num_layers,
            plan.provider.hidden_size,
        )
    wrapped = wrap_model(
        _model_provider(plan),
        cfg.distributed,
        cfg.optimizer,
        cuda_available=plan.cuda,
        seed=cfg.rng.seed,
        data_parallel_random_init=cfg.rng.data_parallel_random_init,
        layout=plan.layout,
        precision=plan.precision,
    )
    model = wrapped.chunks
    if is_rank_zero:
        local = sum(p.numel() for chunk in model for p in chunk.parameters())
        trainable = sum(p.numel() for chunk in model for p in chunk.parameters() if p.requires_grad)
        peft = f", {trainable / 1e6:.3f} M trainable ({cfg.peft.scheme} adapters)" if cfg.peft.scheme else ""
        logger.info(
            "model built in %.1f s: %.2f M parameters on rank 0%s",
            time.perf_counter() - started,
            local / 1e6,
            peft,
        )
    optimizer = build_optimizer(
        cfg.optimizer,
        model,
        plan.precision,
        cfg.mixed_precision,
        use_distributed_optimizer=wrapped.use_distributed_optimizer,
        fsdp2_layout=plan.layout if wrapped.fsdp2 else None,
    )
    scheduler = build_scheduler(optimizer, cfg.optimizer, cfg.scheduler, plan.schedule)
    overlap_param_gather = _configure_model_hooks(model, optimizer, wrapped, cfg.distributed)

    save_dir = prepare_save_dir(plan)  # lock, leftovers cleaned, writable with room (ConfigError)
    try:  # the lock is released on every way out, a failed resume included
        return _resume_and_train(plan, model, optimizer, scheduler, wrapped, overlap_param_gather,
                                 forward_step_func, save_dir.notes)  # fmt: skip
    finally:
        save_dir.release()
        release_model(model)


def _resume_and_train(
    plan: RunPlan, model: list, optimizer, scheduler, wrapped, overlap_param_gather: bool,
    forward_step_func: Callable | None, notes: list[str],
) -> TrainResult:  # fmt: skip

    cfg = plan.config
    is_rank_zero = torch.distributed.get_rank() == 0
    for note in notes if is_rank_zero else ():
        logger.info("checkpoint.save: %s", note)
    state = resume(cfg, resume_from(plan), model, optimizer, scheduler, plan.layout.sizes_line())
    if plan.resume is not None and plan.resume.source == "checkpoint.save" and is_rank_zero:
        logger.info(
            "checkpoint.load is not set: this re-run resumed its own checkpoint.save (%s)",
            cfg.checkpoint.save,
        )
    if state.iteration >= cfg.train.train_iters and resume_from(plan):
        if is_rank_zero:
            logger.info(
                "the run is finished: iteration %d is saved and train.train_iters=%d; nothing to train",
                state.iteration,
                cfg.train.train_iters,
            )
        return TrainResult(iteration=state.iteration, skipped_iterations=state.skipped_iterations)

    from megatron.core import parallel_state

    dp_rank = parallel_state.get_data_parallel_rank()
    dp = plan.layout.dp
    mbs = cfg.train.micro_batch_size
    tokenizer = build_tokenizer(cfg.tokenizer, plan.provider.padded_vocab_size())
    train_ds, valid_ds, _ = build_datasets(plan.data, tokenizer)

    def iterators(ds, consumed):
        if ds is None:
            return None
        return [build_iterator(ds, consumed, mbs, dp_rank, dp, plan.data.num_workers) for _ in model]

    is_log_rank = torch.distributed.get_rank() == torch.distributed.get_world_size() - 1
    writers = MetricWriters(cfg.logger if is_log_rank else None)  # TensorBoard / W&B on the logging rank

    frozen_pass = None  # DPO's reference, distillation's teacher: run before each step's pass
    objective_step = default_forward_step
    if plan.dpo is not None:
        if state.iteration and plan.dpo.reference == "frozen_copy":  # the rules refuse checkpoint.load
            raise ConfigError(
                "dpo.reference = 'frozen_copy': this run resumed at iteration "
                f"{state.iteration}, whose weights are no longer the reference's; start it again without "
                "the saved checkpoints (a fresh checkpoint.save), or train LoRA (peft.scheme=lora)"
            )
        frozen_pass = reference_pass(plan, model)  # before the first step: the starting weights
        objective_step = functools.partial(dpo_forward_step, plan.dpo)
    elif plan.distill is not None:
        frozen_pass = teacher_pass(plan)
        objective_step = functools.partial(distill_forward_step, plan.distill, plan.provider.vocab_size)
    forward_step_func = forward_step_func or objective_step
    ctx = TrainingContext(
        plan=plan,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        forward_step_func=forward_step_func,
        train_iterators=iterators(train_ds, state.consumed_train_samples),
        valid_iterators=iterators(valid_ds, state.consumed_valid_samples),
        state=state,
        megatron_ddp=wrapped.megatron_ddp,
        overlap_param_gather=overlap_param_gather,
        # the planner's FLOPs model: Mamba, Gated DeltaNet, MLA and MTP layers counted as it plans them
        flops_per_token=model_flops_per_token(plan.layout.model, plan.data.seq_length),
        writers=writers,
        run_config_yaml=cfg.to_yaml() if cfg.checkpoint.save else None,
        pipeline_runner=build_runner(plan, model, forward_step_func),  # None: Megatron-Core's schedules
        consolidated=consolidated_writer(cfg, plan.provider, model),
        async_saves=AsyncSaves() if cfg.checkpoint.async_save else None,
        frozen_pass=frozen_pass,
    )
    try:
        return train(ctx)
    finally:
        writers.close()
