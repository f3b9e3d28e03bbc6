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

import functools
import os
import time
from collections.abc import Callable

from bridge.checkpoint.async_writes import AsyncSaves
from bridge.config.container import ConfigContainer
from bridge.config.run_plan import RunPlan
from bridge.errors import ConfigError
from bridge.training.state import TrainResult, TrainState


def _resume_from(plan: RunPlan) -> str | None:
    """The checkpoint the plan resumes (checkpoint.load, or a re-run's own checkpoint.save)."""
    return plan.resume.load if plan.resume is not None else plan.config.checkpoint.load


def _resume(
    cfg: ConfigContainer, load: str | None, model: list, optimizer, scheduler, layout_line: str
) -> TrainState:
    """`load` (the plan's: checkpoint.load, or checkpoint.save for a re-run of the same config) resumes
    everything when it holds a checkpoint (a root: the tracker's, or checkpoint.ckpt_step's; or one
    iter_* folder); otherwise checkpoint.pretrained_checkpoint (if set) loads weights only, as in
    Megatron-Bridge. A damaged checkpoint falls back to the previous complete one
    (checkpoint.fallback_to_previous), with a warning naming what is wrong."""
    import bridge.checkpoint as checkpoint
    from bridge.checkpoint.paths import checkpoint_candidates
    from bridge.parallel import ranks
    from bridge.training.logging import logger

    ck = cfg.checkpoint
    candidates = checkpoint_candidates(load, ck.ckpt_step)[0] if load else []
    if candidates:
        saved, saved_format = None, None
        for target, _ in candidates:  # the layout of the first readable one (one run's layout)
            try:
                saved = checkpoint.saved_layout(target)
                saved_format = checkpoint.saved_optimizer_format(target)
                break
            except Exception:  # noqa: BLE001 - a damaged one: load_checkpoint reports it
                continue
        same_layout = saved == layout_line
        # fsdp2's optimizer state is DTensors in torch DCP: it reshards with the weights (over dp / cp);
        # the distributed optimizer's fully_reshardable format over any size, dp_reshardable over DP
        optim_reshards = cfg.distributed.strategy == "fsdp2" or optimizer_reshards(
            saved, layout_line, saved_format
        )
        if saved is not None and not same_layout and ck.load_rng and optim_reshards:
            raise ConfigError(
                f"checkpoint.load={load!r} was saved with layout {saved} but this run is {layout_line}: "
                "weights and optimizer state reshard, the per-rank RNG state does not. Set "
                "checkpoint.load_rng=False to continue with fresh RNG state, or keep the saved layout."
            )
        if saved is not None and not same_layout and not optim_reshards and (ck.load_optim or ck.load_rng):
            raise ConfigError(
                f"checkpoint.load={load!r} was saved with layout {saved} but this run is {layout_line}: "
                f"model weights reshard, optimizer and RNG state do not (its optimizer state is {saved_format}"
                f"{', which reshards over the data-parallel size only' if saved_format == 'dp_reshardable' else ''}"
                "). Set checkpoint.load_optim=False checkpoint.load_rng=False to continue with fresh optimizer "
                "state, or keep the saved layout; a run saving with "
                "checkpoint.dist_ckpt_optim_fully_reshardable=true writes optimizer state that reshards."
            )
        # the config's lr settings, restored after the load when override_opt_param_scheduler is set:
        # the optimizer's param groups carry max_lr/min_lr, and Megatron-Core's scheduler prefers those
        lr_fields = [{k: g[k] for k in ("max_lr", "min_lr") if k in g} for g in optimizer.param_groups]

        def warn(message: str) -> None:
            if ranks.is_rank_zero():
                logger.warning("%s", message)

        train_state = checkpoint.load_checkpoint(
            load,
            model,
            optimizer if ck.load_optim else None,
            scheduler,
            iteration=ck.ckpt_step,
            load_rng=ck.load_rng,
            fallback=ck.fallback_to_previous,
            on_fallback=warn,
            lr_from_config=cfg.scheduler.override_opt_param_scheduler,
        )
        if cfg.scheduler.override_opt_param_scheduler:
            for group, fields in zip(optimizer.param_groups, lr_fields, strict=True):
                group.update(fields)
            scheduler.step(increment=0)  # recompute lr / wd from the config's schedule
        if not ck.load_optim:
            optimizer.reload_model_params()
        state = TrainState.from_dict(train_state)
        state.layout = layout_line
        if ranks.is_rank_zero():  # bridge.training logs on every rank (the loop picks its own)
            logger.info("resumed from %s at iteration %d", train_state["checkpoint_dir"], state.iteration)
            for note in ignored_on_resume(cfg, state.iteration, scheduler):
                logger.warning("%s", note)
        return state
    if load and ranks.is_rank_zero():
        logger.warning("checkpoint.load=%s holds no checkpoint yet: starting from scratch", load)
    from bridge.checkpoint.paths import is_hf_folder

    # HF folders, and torch_dist checkpoints under fsdp2, were loaded at build (_model_provider)
    if (
        ck.pretrained_checkpoint
        and not is_hf_folder(ck.pretrained_checkpoint)
        and not _loads_before_fully_shard(cfg)
    ):
        checkpoint.load_checkpoint(
            ck.pretrained_checkpoint, model, None, None, load_rng=False, model_config=cfg.model
        )
        if cfg.peft.scheme == "dora":  # m starts at the row norms of the weights just loaded
            from bridge.peft import init_dora_magnitudes

            init_dora_magnitudes(model)
        optimizer.reload_model_params()
        if ranks.is_rank_zero():
            logger.info("loaded pretrained weights from %s", ck.pretrained_checkpoint)
    return TrainState(layout=layout_line)


def optimizer_reshards(saved: str | None, current: str, optimizer_format: str | None) -> bool:
    """Whether a distributed optimizer's state saved under layout line `saved` in `optimizer_format` loads
    under `current`: fully_reshardable always, dp_reshardable when only the data-parallel sizes differ."""
    if saved is None or optimizer_format is None:
        return False
    if optimizer_format == "fully_reshardable":
        return True

    def model_parallel(line: str) -> list[str]:  # "TP=2 PP=1 ... DP=1 EDP=1 world=2" without DP / world
        return [part for part in line.split() if part.split("=")[0] not in ("DP", "EDP", "world")]

    return optimizer_format == "dp_reshardable" and model_parallel(saved) == model_parallel(current)


def ignored_on_resume(cfg: ConfigContainer, iteration: int, scheduler) -> list[str]:
    """What this resume leaves as the checkpoint had it although the config asks otherwise."""
    notes = []
    if cfg.train.train_iters < iteration:
        notes.append(
            f"train.train_iters={cfg.train.train_iters} is below the checkpoint's iteration {iteration}: "
            "nothing is trained and nothing is saved (raise train.train_iters to continue)"
        )
    if not cfg.scheduler.override_opt_param_scheduler:
        for name, asked, kept in (
            ("optimizer.lr", cfg.optimizer.lr, scheduler.max_lr),
            ("optimizer.min_lr", cfg.optimizer.min_lr, scheduler.min_lr),
        ):
            if float(asked) != float(kept):
                notes.append(
                    f"{name}={asked} is not used: the checkpoint's learning-rate schedule ({kept}) is kept "
                    "because scheduler.override_opt_param_scheduler=false (set it true to apply the new value)"
                )
    return notes


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
        from bridge.training.strategies import finalize_fsdp2_grads, fsdp2_no_sync

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


# where a loaded GPU driver shows: NVIDIA's on Linux, WSL 2's GPU device, AMD's (ROCm builds of torch)
_GPU_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/dxg", "/dev/kfd")


def plan_for_this_process(config: ConfigContainer) -> RunPlan:
    """Validate `config` for this launch (torchrun's world size, this machine's CUDA)."""
    from bridge.parallel import ranks

    return config.validate(ranks.world_size(), cuda=cuda_available())


def cuda_available() -> bool:
    """torch.cuda.is_available(), without importing torch where no GPU driver is loaded: CUDA needs one
    (NVIDIA's; WSL's GPU device; AMD's for ROCm builds), so a config refused on a CPU machine is said
    before the seconds of torch's import, on every rank of the launch. The run then checks the plan
    against torch itself (_check_plan_matches_process)."""
    if not any(os.path.exists(path) for path in _GPU_DRIVER_PATHS):
        return False
    import torch

    return torch.cuda.is_available()


def _check_plan_matches_process(plan: RunPlan) -> None:
    import torch

    from bridge.parallel import ranks

    cuda, world = torch.cuda.is_available(), ranks.world_size()
    if plan.cuda != cuda or plan.world_size != world:
        raise ConfigError(
            f"the plan was made for world_size={plan.world_size} {'with' if plan.cuda else 'without'} CUDA, "
            f"but this process has world_size={world} {'with' if cuda else 'without'} CUDA. Fix: make the "
            "plan in the launched process (config.validate(world_size, cuda=torch.cuda.is_available()))"
        )


def pretrain(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None = None) -> TrainResult:
    """Train a RunPlan (or a ConfigContainer, validated here once for this launch).

    Call on every rank (torchrun) or in one plain process.
    """
    return _run(plan, forward_step_func)


def finetune(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None = None) -> TrainResult:
    """Finetune from checkpoint.pretrained_checkpoint (or resume checkpoint.load): full-parameter SFT,
    or PEFT adapters when peft.scheme is set. Same loop as pretrain(); call on every rank."""
    from bridge.config.finetune_rules import check_finetune_start

    check_finetune_start(plan.config if isinstance(plan, RunPlan) else plan)
    return _run(plan, forward_step_func)


def _loads_before_fully_shard(cfg: ConfigContainer) -> bool:
    """strategy fsdp2 with a torch_dist checkpoint.pretrained_checkpoint: Megatron-Core's sharded
    state dict describes the plain chunks, so those weights load at build, before fully_shard (an
    fsdp2 checkpoint's DTensors load after it, in _resume)."""
    from bridge.checkpoint import is_fsdp2_checkpoint

    return cfg.distributed.strategy == "fsdp2" and not is_fsdp2_checkpoint(
        cfg.checkpoint.pretrained_checkpoint
    )


def _model_provider(plan: RunPlan):
    """The plan's provider with the build-time steps of this run: Hugging Face weights streamed in,
    then PEFT adapters attached (the hooks run in that order, before any DDP wrapper)."""
    import copy
    import functools

    from bridge.checkpoint.paths import is_hf_folder

    cfg = plan.config
    provider = copy.deepcopy(plan.provider)
    pretrained = cfg.checkpoint.pretrained_checkpoint
    if is_hf_folder(pretrained):
        from bridge.training.hf_start import stream_hf_weights

        stream_hf_weights(provider, pretrained)
    elif pretrained and _loads_before_fully_shard(cfg):
        import bridge.checkpoint as checkpoint

        def load_pretrained(chunks: list) -> None:  # into the plain chunks: fully_shard keeps the values
            checkpoint.load_checkpoint(pretrained, chunks, None, None, load_rng=False, model_config=cfg.model)

        provider.register_post_build_hook(load_pretrained, replaces_weights=True)
    if cfg.peft.scheme is not None:
        from bridge.peft import apply_peft

        provider.register_post_build_hook(functools.partial(apply_peft, peft=cfg.peft, seed=cfg.rng.seed))
    return provider


def _run(plan: RunPlan | ConfigContainer, forward_step_func: Callable | None) -> TrainResult:
    import torch

    from bridge.config import performance
    from bridge.parallel import runtime

    runtime.quiet_known_warnings()  # before the imports below pull in Megatron-Core (some warn on import)
    from bridge.training.logging import ensure_console_logging, logger
    from bridge.training.memory_check import check_memory_fits
    from bridge.training.optim import build_optimizer, build_scheduler
    from bridge.training.strategies import release_model, wrap_model

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
        from bridge.training.comm_overlap import initialize_tp_userbuffers

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
    from bridge.checkpoint.preflight import prepare_save_dir

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
    import torch

    from bridge.training.consolidated import consolidated_writer
    from bridge.training.data.loaders import build_datasets, build_iterator
    from bridge.training.data.tokenizer import build_tokenizer
    from bridge.training.flops import training_flops_per_token
    from bridge.training.forward_step import forward_step as default_forward_step
    from bridge.training.logging import MetricWriters, logger
    from bridge.training.train import TrainingContext, train

    cfg = plan.config
    is_rank_zero = torch.distributed.get_rank() == 0
    for note in notes if is_rank_zero else ():
        logger.info("checkpoint.save: %s", note)
    state = _resume(cfg, _resume_from(plan), model, optimizer, scheduler, plan.layout.describe())
    if plan.resume is not None and plan.resume.source == "checkpoint.save" and is_rank_zero:
        logger.info(
            "checkpoint.load is not set: this re-run resumed its own checkpoint.save (%s)",
            cfg.checkpoint.save,
        )
    if state.iteration >= cfg.train.train_iters and _resume_from(plan):
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
    from bridge.training.pipelining import build_runner

    frozen_pass = None  # DPO's reference, distillation's teacher: run before each step's pass
    if plan.dpo is not None:
        from bridge.training.preference import dpo_forward_step, reference_pass

        if state.iteration and plan.dpo.reference == "frozen_copy":  # the rules refuse checkpoint.load
            raise ConfigError(
                "dpo.reference = 'frozen_copy': this run resumed at iteration "
                f"{state.iteration}, whose weights are no longer the reference's; start it again without "
                "the saved checkpoints (a fresh checkpoint.save), or train LoRA (peft.scheme=lora)"
            )
        frozen_pass = reference_pass(plan, model)  # before the first step: the starting weights
        default_forward_step = functools.partial(dpo_forward_step, plan.dpo)
    elif plan.distill is not None:
        from bridge.training.distill import distill_forward_step, teacher_pass

        frozen_pass = teacher_pass(plan)
        default_forward_step = functools.partial(distill_forward_step, plan.distill, plan.provider.vocab_size)
    forward_step_func = forward_step_func or default_forward_step
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
        flops_per_token=training_flops_per_token(plan.provider, plan.data.seq_length),
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
