"""Where a run starts: the checkpoint-compatibility policy. A run resumes its checkpoint (checkpoint.load,
or checkpoint.save for a re-run of the same config) when the saved layout and optimizer format allow it,
else one ConfigError says what to set; without one it loads checkpoint.pretrained_checkpoint's weights."""

from __future__ import annotations

import bridge.checkpoint as checkpoint
from bridge.checkpoint.paths import checkpoint_candidates, is_hf_folder
from bridge.config.container import ConfigContainer
from bridge.config.run_plan import RunPlan
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.peft import init_dora_magnitudes
from bridge.training.logging import logger
from bridge.training.state import TrainState


def resume_from(plan: RunPlan) -> str | None:
    """The checkpoint the plan resumes (checkpoint.load, or a re-run's own checkpoint.save)."""
    return plan.resume.load if plan.resume is not None else plan.config.checkpoint.load


def resume(
    cfg: ConfigContainer, load: str | None, model: list, optimizer, scheduler, layout_line: str
) -> TrainState:
    """`load` (the plan's: checkpoint.load, or checkpoint.save for a re-run of the same config) resumes
    everything when it holds a checkpoint (a root: the tracker's, or checkpoint.ckpt_step's; or one
    iter_* folder); otherwise checkpoint.pretrained_checkpoint (if set) loads weights only, as in
    Megatron-Bridge. A damaged checkpoint falls back to the previous complete one
    (checkpoint.fallback_to_previous), with a warning naming what is wrong."""
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
    # HF folders, and torch_dist checkpoints under fsdp2, were loaded at build (_model_provider)
    if (
        ck.pretrained_checkpoint
        and not is_hf_folder(ck.pretrained_checkpoint)
        and not loads_before_fully_shard(cfg)
    ):
        checkpoint.load_checkpoint(
            ck.pretrained_checkpoint, model, None, None, load_rng=False, model_config=cfg.model
        )
        if cfg.peft.scheme == "dora":  # m starts at the row norms of the weights just loaded
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


def loads_before_fully_shard(cfg: ConfigContainer) -> bool:
    """strategy fsdp2 with a torch_dist checkpoint.pretrained_checkpoint: Megatron-Core's sharded
    state dict describes the plain chunks, so those weights load at build, before fully_shard (an
    fsdp2 checkpoint's DTensors load after it, in resume)."""
    from bridge.checkpoint import is_fsdp2_checkpoint

    return cfg.distributed.strategy == "fsdp2" and not is_fsdp2_checkpoint(
        cfg.checkpoint.pretrained_checkpoint
    )
