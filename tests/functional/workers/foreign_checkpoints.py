"""2 ranks (DP=2, distributed optimizer): checkpoints in Megatron-LM's and Megatron-Bridge's layouts, written
here with a bare Megatron-Core GPTModel, DDP, DistributedOptimizer and OptimizerParamScheduler, saved by
`dist_checkpointing` with the files each project writes beside it (Megatron-LM: `args` in common.pt and
latest_checkpointed_iteration.txt; Megatron-Bridge: run_config.yaml, train_state.pt, latest_train_state.pt).

1. bridge's own run of the same config records the micro batches each rank reads per iteration;
2. the bare writer trains ITERS_SAVED iterations on them, saves both layouts, then goes on for the rest:
   the reference losses of a continued bare run;
3. bridge resumes each layout (no model field typed: they come from the checkpoint) and must give the
   same losses; a run that starts from the weights (checkpoint.pretrained_checkpoint) must see the bare
   model's loss on its first batch. The worker also leaves the bare model's logits for the export check.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
from train_common import SHORT_RUN, emit, rank, reset_parallel_state

ITERS_SAVED, ITERS_TOTAL = 2, 4
GLOBAL_BATCH, MICRO_BATCH = 8, 1
MODEL = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, num_query_groups=2)
VOCAB, SEQ = 256, 32
RUN = [
    *SHORT_RUN,
    f"train.train_iters={ITERS_TOTAL}",
]  # training settings only: every model field comes from the checkpoint


def bridge_config(*overrides: str):
    from bridge.config.compose import compose
    from recipes.llama import llama32_1b_pretrain_config

    given = {o.split("=")[0] for o in overrides}  # an override replaces RUN's setting of that key
    run = [r for r in RUN if r.split("=")[0] not in given]
    return compose(llama32_1b_pretrain_config(), overrides=[*run, *overrides])[0]


class Recorder:
    """The data iterator a forward step reads, keeping a copy of every micro batch it hands out."""

    def __init__(self, inner, store: list):
        self.inner, self.store = inner, store

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.inner)
        self.store.append({k: v.clone() for k, v in item.items() if torch.is_tensor(v)})
        return item


def record_batches() -> list[dict]:
    """bridge's own run of the config (the model fields typed: no checkpoint yet): its micro batches."""
    from bridge.training import pretrain
    from bridge.training.forward_step import forward_step

    store: list = []
    arch = [f"model.{k}={v}" for k, v in MODEL.items()]
    more = [
        "model.kv_channels=16",
        "model.vocab_size=256",
        "model.seq_length=32",
        "model.should_pad_vocab=false",
    ]
    pretrain(bridge_config(*arch, *more), lambda it, model: forward_step(Recorder(it, store), model))
    reset_parallel_state()
    return store


# ---- the bare Megatron-Core writer -------------------------------------------------------------------


def bare_model_and_optimizer(cfg):
    """A GPTModel of Megatron-Core's local spec in DDP, its DistributedOptimizer and scheduler, with the
    optimizer and schedule values of bridge's config (what a Megatron-LM command line would give)."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        **MODEL, kv_channels=16, normalization="RMSNorm", gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False, hidden_dropout=0.0,
        attention_dropout=0.0, layernorm_epsilon=1e-5, use_cpu_initialization=True,
        bias_activation_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
    )  # fmt: skip
    gpt = GPTModel(
        config, get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=VOCAB, max_sequence_length=SEQ,
        position_embedding_type="rope", share_embeddings_and_output_weights=False,
    )  # fmt: skip
    ddp = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, use_distributed_optimizer=True, average_in_collective=True
    )
    model = DistributedDataParallel(config, ddp, gpt)
    o = cfg.optimizer
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam", lr=o.lr, min_lr=o.min_lr, weight_decay=o.weight_decay, adam_beta1=o.adam_beta1,
            adam_beta2=o.adam_beta2, adam_eps=o.adam_eps, clip_grad=o.clip_grad, use_distributed_optimizer=True,
        ),
        [model],
    )  # fmt: skip
    samples = ITERS_TOTAL * GLOBAL_BATCH
    wd = cfg.scheduler.start_weight_decay
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=o.lr, min_lr=o.min_lr, lr_warmup_steps=GLOBAL_BATCH,
        lr_decay_steps=samples, lr_decay_style="cosine", start_wd=wd, end_wd=wd, wd_incr_steps=samples,
        wd_incr_style="constant", use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=True,
    )  # fmt: skip
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    return model, optimizer, scheduler


def bare_loss_func(loss_mask, output_tensor):
    """Megatron-LM's pretrain_gpt loss: the summed token loss, its token count, the report."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    tokens = mask.sum().to(torch.int)
    return loss, tokens, {"lm loss": torch.stack([loss.detach(), tokens.detach().float()])}


def bare_forward_step(data_iterator, model):
    b = next(data_iterator)
    output = model(b["tokens"], b["position_ids"], b.get("attention_mask"), labels=b["labels"])
    return output, partial(bare_loss_func, b["loss_mask"])


def bare_iteration(model, optimizer, scheduler, batches: list[dict], forward_only: bool = False) -> float:
    """One training iteration (or one forward pass over its batches): the loss over every DP rank."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model.zero_grad_buffer()
    optimizer.zero_grad()
    reports = get_forward_backward_func()(
        forward_step_func=bare_forward_step, data_iterator=iter(batches), model=[model],
        num_microbatches=len(batches), seq_length=SEQ, micro_batch_size=MICRO_BATCH, forward_only=forward_only,
    )  # fmt: skip
    total = torch.stack([r["lm loss"] for r in reports]).sum(0)
    torch.distributed.all_reduce(total)
    if not forward_only:
        optimizer.step()
        scheduler.step(increment=GLOBAL_BATCH)
    return float(total[0] / total[1])


PROBE = (torch.arange(SEQ).unsqueeze(0) * 7) % VOCAB  # a fixed row of tokens for the logits checks


def probe_logits(gpt) -> torch.Tensor:
    with torch.no_grad():
        return gpt(PROBE, torch.arange(SEQ).unsqueeze(0), None)


def megatron_lm_args(consumed: int) -> argparse.Namespace:
    """The fields Megatron-LM's arguments.py records for this model (the names its parser gives them)."""
    return argparse.Namespace(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, group_query_attention=True,
        num_query_groups=2, kv_channels=16, normalization="RMSNorm", norm_epsilon=1e-5, swiglu=True,
        add_bias_linear=False, add_qkv_bias=False, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", rotary_base=10000, rotary_percent=1.0, use_rope_scaling=False,
        padded_vocab_size=VOCAB, make_vocab_size_divisible_by=128, seq_length=SEQ, max_position_embeddings=SEQ,
        hidden_dropout=0.0, attention_dropout=0.0, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        use_distributed_optimizer=True, ckpt_format="torch_dist", consumed_train_samples=consumed,
        consumed_valid_samples=0, iteration=ITERS_SAVED,
    )  # fmt: skip


def megatron_bridge_run_config() -> str:
    """Megatron-Bridge's run_config.yaml as its ConfigContainer.to_yaml writes it (the sections its loader
    reads: model with the provider's _target_, checkpoint's save_optim / save_rng / fully_parallel_save)."""
    return f"""model:
  _target_: megatron.bridge.models.llama.llama_provider.Llama32ModelProvider1B
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 1
  num_layers: 2
  hidden_size: 64
  ffn_hidden_size: 128
  num_attention_heads: 4
  num_query_groups: 2
  kv_channels: 16
  normalization: RMSNorm
  layernorm_epsilon: 1.0e-05
  gated_linear_unit: true
  activation_func:
    _target_: torch.nn.functional.silu
    _call_: false
  add_bias_linear: false
  share_embeddings_and_output_weights: false
  position_embedding_type: rope
  rotary_base: 10000
  rotary_percent: 1.0
  rope_scaling: false
  vocab_size: {VOCAB}
  make_vocab_size_divisible_by: 128
  should_pad_vocab: false
  seq_length: {SEQ}
  hidden_dropout: 0.0
  attention_dropout: 0.0
  params_dtype:
    _target_: torch.float32
    _call_: false
checkpoint:
  save_optim: true
  save_rng: true
  fully_parallel_save: true
  ckpt_format: torch_dist
"""


def megatron_rng_state():
    """Megatron-LM's / Megatron-Bridge's RNG state: one ShardedObject per (PP, TP) rank, DP replicas."""
    import random

    import numpy as np
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    state = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "cuda_rng_state": torch.get_rng_state(),
        "rng_tracker_states": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
    pp, tp = (
        parallel_state.get_pipeline_model_parallel_rank(),
        parallel_state.get_tensor_model_parallel_rank(),
    )
    return ShardedObject(
        "rng_state", [state], (parallel_state.get_pipeline_model_parallel_world_size(),
                               parallel_state.get_tensor_model_parallel_world_size()),
        (pp, tp), replica_id=parallel_state.get_data_parallel_rank(with_context_parallel=True),
    )  # fmt: skip


def save_like(layout: str, root: Path, model, optimizer, scheduler) -> None:
    """A checkpoint of the current state in `layout`'s files (Megatron-Core's dist_checkpointing.save)."""
    from megatron.core import dist_checkpointing

    content_metadata = {
        "distrib_optim_sharding_type": "dp_reshardable", "singleton_local_shards": False,
        "chained_optim_avoid_prefix": True,
    }  # fmt: skip
    folder = root / f"iter_{ITERS_SAVED:07d}"
    if torch.distributed.get_rank() == 0:
        folder.mkdir(parents=True)
    torch.distributed.barrier()
    sd = {"checkpoint_version": 3.0, "model": model.module.sharded_state_dict()}
    sd["optimizer"] = optimizer.sharded_state_dict(sd, metadata=content_metadata)
    sd["opt_param_scheduler"] = scheduler.state_dict()
    sd["rng_state"] = megatron_rng_state()
    sd["num_floating_point_operations_so_far"] = 0
    if layout == "Megatron-LM":
        sd["args"] = megatron_lm_args(ITERS_SAVED * GLOBAL_BATCH)
    if layout != "Megatron-Bridge":
        sd["iteration"] = ITERS_SAVED
    dist_checkpointing.save(sd, str(folder), content_metadata=content_metadata)
    if torch.distributed.get_rank() == 0:
        if layout != "Megatron-Bridge":
            (root / "latest_checkpointed_iteration.txt").write_text(str(ITERS_SAVED))
        else:
            (folder / "run_config.yaml").write_text(megatron_bridge_run_config())
            state = {
                "step": torch.tensor(ITERS_SAVED), "consumed_train_samples": torch.tensor(ITERS_SAVED * GLOBAL_BATCH),
                "skipped_train_samples": torch.tensor(0), "consumed_valid_samples": torch.tensor(0),
                "floating_point_operations_so_far": torch.tensor(0.0, dtype=torch.float64),
                "do_train": torch.tensor(True), "do_valid": torch.tensor(False), "do_test": torch.tensor(False),
            }  # fmt: skip
            torch.save(state, folder / "train_state.pt")
            torch.save(state, root / "latest_train_state.pt")
    torch.distributed.barrier()


def bare_run(work: Path, batches: list[dict]) -> dict:
    """Train, save both layouts (and one without model fields) at ITERS_SAVED, keep training: the
    reference numbers."""
    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=torch.distributed.get_world_size()), seed=77)
    cfg = bridge_config()
    model, optimizer, scheduler = bare_model_and_optimizer(cfg)
    per_iteration = GLOBAL_BATCH // MICRO_BATCH // torch.distributed.get_world_size()
    chunk = [batches[i * per_iteration : (i + 1) * per_iteration] for i in range(ITERS_TOTAL)]
    losses = {}
    for it in range(1, ITERS_SAVED + 1):
        losses[it] = bare_iteration(model, optimizer, scheduler, chunk[it - 1])
    save_like("Megatron-LM", work / "mlm", model, optimizer, scheduler)
    save_like("Megatron-Bridge", work / "mb", model, optimizer, scheduler)
    save_like("no fields", work / "bare", model, optimizer, scheduler)  # neither args nor run_config.yaml
    # the saved weights' loss on the first batch (a weights-only start sees it at its iteration 1) and logits
    first = bare_iteration(model, optimizer, scheduler, chunk[0], forward_only=True)
    at_saved = probe_logits(model.module)
    for it in range(ITERS_SAVED + 1, ITERS_TOTAL + 1):
        losses[it] = bare_iteration(model, optimizer, scheduler, chunk[it - 1])
    if torch.distributed.get_rank() == 0:
        torch.save(
            {"tokens": PROBE, "at_saved": at_saved, "at_end": probe_logits(model.module)},
            work / "bare_logits.pt",
        )
    runtime.destroy_distributed()
    return {"losses": losses, "first_batch_loss_of_saved_weights": first}


def load_like_megatron_bridge(root: Path) -> dict:
    """A bridge checkpoint read back the way Megatron-Bridge's training/checkpointing.py load path reads
    one: the iteration from its tracker, (TP, PP) and save_optim from iter_N/run_config.yaml, the counters
    from iter_N/train_state.pt,
    the optimizer's format from Megatron-Core's content metadata in common.pt, then `model`, `optimizer`
    and `opt_param_scheduler` through dist_checkpointing into a bare model (RNG left out: its layout
    differs, Megatron-Bridge's checkpoint.load_rng=false)."""
    import yaml
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.serialization import load_common_state_dict

    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=torch.distributed.get_world_size()), seed=78)
    model, optimizer, scheduler = bare_model_and_optimizer(bridge_config())
    # its _resolve_checkpoint_iteration: latest_train_state.pt first, else Megatron-LM's .txt tracker
    if (root / "latest_train_state.pt").is_file():
        step = int(torch.load(root / "latest_train_state.pt", weights_only=True)["step"])
    else:
        step = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
    folder = root / f"iter_{step:07d}"
    per_iteration = torch.load(folder / "train_state.pt", weights_only=True)
    run_config = yaml.safe_load((folder / "run_config.yaml").read_text())
    common = load_common_state_dict(str(folder))
    metadata = dist_checkpointing.load_content_metadata(preloaded_state_dict=common)
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):  # a fresh optimizer has no state yet
        sub._init_optimizer_states_with_dummy_values()
    sd = {"model": model.module.sharded_state_dict()}
    sd["optimizer"] = optimizer.sharded_state_dict(sd, is_loading=True, metadata=metadata)
    sd["opt_param_scheduler"] = scheduler.state_dict()
    loaded = dist_checkpointing.load(sd, str(folder))
    with torch.no_grad():  # as Megatron-Bridge loads them (the optimizer copies into parameter views)
        model.module.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optimizer"])
    scheduler.load_state_dict(loaded["opt_param_scheduler"])
    logits = probe_logits(model.module)
    runtime.destroy_distributed()
    return {
        "step": step,
        "train_state_keys": sorted(per_iteration),
        "consumed_train_samples": int(per_iteration["consumed_train_samples"]),
        "tp_pp": [
            run_config["model"]["tensor_model_parallel_size"],
            run_config["model"]["pipeline_model_parallel_size"],
        ],
        "checkpoint_keys": {
            k: run_config["checkpoint"][k] for k in ("save_optim", "save_rng", "fully_parallel_save")
        },
        "checkpoint_version": common.get("checkpoint_version"),
        "iteration": common.get("iteration"),
        "content_metadata": {
            k: v for k, v in (metadata or {}).items() if isinstance(v, (bool, int, float, str))
        },
        "scheduler_steps": int(scheduler.num_steps),
        "logits": logits.tolist() if rank() == 0 else None,
    }


def main(workdir: str) -> None:
    from bridge.errors import ConfigError
    from bridge.training import pretrain

    work = Path(workdir)
    batches = record_batches()
    emit("bare", bare_run(work, batches))
    for name, root in (("megatron_lm", work / "mlm"), ("megatron_bridge", work / "mb")):
        # the first resume also saves (at ITERS_TOTAL): bridge's checkpoint, read back below as Megatron-Bridge would
        save = (
            [f"checkpoint.save={work / 'bridge'}", f"checkpoint.save_interval={ITERS_TOTAL}"]
            if name == "megatron_lm"
            else []
        )
        cfg = bridge_config(f"checkpoint.load={root}", *save)
        fields = {
            k: getattr(cfg.model, k)
            for k in (*MODEL, "vocab_size", "seq_length", "share_embeddings_and_output_weights")
        }
        resumed = pretrain(cfg)
        reset_parallel_state()
        emit(f"resumed_{name}", {"losses": resumed.losses, "fields": fields})
    cfg = bridge_config(f"checkpoint.pretrained_checkpoint={work / 'mlm'}")
    started = pretrain(cfg)
    reset_parallel_state()
    emit("pretrained_start", {"losses": started.losses, "num_layers": cfg.model.num_layers})
    # a checkpoint that records no model fields, started with other ones than its own: one clear error
    small = ["model.num_layers=2", "model.hidden_size=32", "model.ffn_hidden_size=64", "model.kv_channels=8",
             "model.num_attention_heads=4", "model.num_query_groups=2", "model.vocab_size=256", "model.seq_length=32"]  # fmt: skip
    try:
        pretrain(bridge_config(f"checkpoint.pretrained_checkpoint={work / 'bare'}", *small))
        emit("no_fields", None)
    except ConfigError as err:
        emit("no_fields", str(err))
    reset_parallel_state()
    back = load_like_megatron_bridge(work / "bridge")
    if rank() == 0:
        torch.save(torch.tensor(back.pop("logits")), work / "read_back_logits.pt")
    emit("read_back", back)


if __name__ == "__main__":
    main(sys.argv[1])
