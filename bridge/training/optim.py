"""Megatron-Core optimizer and LR scheduler from the `optimizer` / `scheduler` config sections.

Like Megatron-LM, the scheduler counts samples (iterations * global batch), so its state in a
checkpoint stays valid when the batch size changes.
"""

from __future__ import annotations

import math

from bridge.config.run_plan import Precision, SchedulePlan
from bridge.config.sections import MixedPrecisionConfig, OptimizerConfig, SchedulerConfig
from bridge.models.expert_grads import count_expert_grads_once_in_norm
from bridge.parallel.mesh import build_meshes


def megatron_optimizer_config(
    opt_cfg: OptimizerConfig,
    precision: Precision,
    mp_cfg: MixedPrecisionConfig,
    use_distributed_optimizer: bool | None = None,
):
    from megatron.core.optimizer import OptimizerConfig as McoreOptimizerConfig

    return McoreOptimizerConfig(
        optimizer=opt_cfg.optimizer,
        **muon_options(opt_cfg),
        lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        weight_decay=float(opt_cfg.weight_decay),
        adam_beta1=float(opt_cfg.adam_beta1),
        adam_beta2=float(opt_cfg.adam_beta2),
        adam_eps=float(opt_cfg.adam_eps),
        sgd_momentum=float(opt_cfg.sgd_momentum),
        clip_grad=float(opt_cfg.clip_grad or 0.0),
        bf16=precision.bf16,
        fp16=precision.fp16,
        params_dtype=precision.torch_dtype,
        loss_scale=mp_cfg.loss_scale,
        initial_loss_scale=float(mp_cfg.initial_loss_scale),
        min_loss_scale=float(mp_cfg.min_loss_scale),
        loss_scale_window=float(mp_cfg.loss_scale_window),
        hysteresis=int(mp_cfg.hysteresis),
        use_distributed_optimizer=bool(
            opt_cfg.use_distributed_optimizer
            if use_distributed_optimizer is None
            else use_distributed_optimizer
        ),
    )


# optimizer=muon: bridge's fields (Megatron-Core 0.19's OptimizerConfig names) passed through as they are;
# the plan (bridge/config/checks/muon.py) refuses muon on the releases that lack them.
MUON_FIELDS = (
    "muon_momentum",
    "muon_split_qkv",
    "muon_nesterov",
    "muon_scale_mode",
    "muon_fp32_matmul_prec",
    "muon_coefficient_type",
    "muon_num_ns_steps",
    "muon_tp_mode",
    "muon_extra_scale_factor",
    "muon_scalar_optimizer",
)


def muon_options(opt_cfg: OptimizerConfig) -> dict:
    """The muon_* options of Megatron-Core's OptimizerConfig ({} for another optimizer)."""
    if opt_cfg.optimizer != "muon":
        return {}
    return {name: getattr(opt_cfg, name) for name in MUON_FIELDS}


def build_optimizer(
    opt_cfg: OptimizerConfig,
    model_chunks: list,
    precision: Precision,
    mp_cfg: MixedPrecisionConfig,
    use_distributed_optimizer: bool | None = None,
    fsdp2_layout=None,
):
    """Megatron-Core's optimizer (for optimizer=muon its chained Muon + Adam); with `fsdp2_layout`
    (strategy fsdp2) the FSDP2 one (Fsdp2Optimizer)."""
    if fsdp2_layout is not None:
        return Fsdp2Optimizer(opt_cfg, model_chunks, fsdp2_layout)
    from megatron.core.optimizer import get_megatron_optimizer

    config = megatron_optimizer_config(opt_cfg, precision, mp_cfg, use_distributed_optimizer)
    optimizer = get_megatron_optimizer(config, model_chunks)
    count_expert_grads_once_in_norm(optimizer)
    return optimizer


def _no_weight_decay(name: str, param) -> bool:
    """Megatron-Core's default weight-decay skip: biases and every 1-D parameter (norm weights)."""
    return name.endswith(".bias") or len(param.shape) == 1


class Fsdp2Optimizer:
    """Megatron-Core's fp32 optimizer, for FSDP2 chunks (DTensor parameters), with its interface:
    `step() -> (update_successful, grad_norm, num_zeros)`, `zero_grad()`, `param_groups`,
    `scale_loss`, `get_loss_scale`.

    The same numbers as Megatron-Core's FP32Optimizer on CPU (which runs torch.optim.AdamW / SGD): its
    param groups (weight decay off for biases and 1-D parameters: `wd_mult` 0, which
    OptimizerParamScheduler reads), its grad norm (L2 over every gradient once: tensor-parallel
    duplicates counted on TP rank 0 only, `shared` parameters skipped, HSDP replicas counted on
    dp_replicate rank 0 only, expert shards on every rank, summed over all ranks) and its clipping (coefficient
    clip_grad / (norm + 1e-6) when below 1). The optimizer state lives on each rank's shards.
    """

    def __init__(self, opt_cfg: OptimizerConfig, model_chunks: list, layout):
        import torch

        decay, no_decay = [], []
        for chunk in model_chunks:
            for name, p in chunk.named_parameters():
                if p.requires_grad:
                    (no_decay if _no_weight_decay(name, p) else decay).append(p)
        groups = [
            {"params": decay, "wd_mult": 1.0, "lr_mult": 1.0},
            {"params": no_decay, "wd_mult": 0.0, "lr_mult": 1.0},
        ]
        groups = [g for g in groups if g["params"]]
        wd = float(opt_cfg.weight_decay)
        if opt_cfg.optimizer == "adam":
            self.optimizer = torch.optim.AdamW(
                groups,
                lr=float(opt_cfg.lr),
                weight_decay=wd,
                betas=(float(opt_cfg.adam_beta1), float(opt_cfg.adam_beta2)),
                eps=float(opt_cfg.adam_eps),
            )
        else:
            self.optimizer = torch.optim.SGD(
                groups, lr=float(opt_cfg.lr), weight_decay=wd, momentum=float(opt_cfg.sgd_momentum)
            )
        self.clip_grad = float(opt_cfg.clip_grad or 0.0)
        self.params = [p for g in groups for p in g["params"]]
        self.layout = layout

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def scale_loss(self, loss):
        return loss  # fp32 / bf16: no loss scaling (fp16 is refused with fsdp2)

    def get_loss_scale(self):
        import torch

        return torch.tensor(1.0)

    def zero_grad(self, set_to_none: bool = True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def reload_model_params(self, state_dict=None):
        pass  # the optimizer updates the model's own (sharded) parameters: nothing to copy

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def _local_grads(self) -> list:
        return [getattr(p.grad, "_local_tensor", p.grad) for p in self.params if p.grad is not None]

    def grad_norm(self) -> float:
        import torch
        from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

        replica = build_meshes(self.layout).dense["dp_replicate"].get_local_rank()
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        total = torch.zeros(1, dtype=torch.float32, device=device)
        for p in self.params:
            if p.grad is None or getattr(p, "shared", False):
                continue
            # Expert parameters (allreduce=False) are sharded over the whole (pp, ep_shard, ep) mesh:
            # every rank's shard is distinct. Dense ones repeat over TP (non-TP-split ones) and HSDP
            # replicas.
            expert = not getattr(p, "allreduce", True)
            if not expert and (replica != 0 or not param_is_not_tensor_parallel_duplicate(p)):
                continue
            g = getattr(p.grad, "_local_tensor", p.grad)
            total += torch.sum(g.float() * g.float())
        torch.distributed.all_reduce(total)
        return math.sqrt(total.item())  # the root in double, as Megatron-Core's get_grad_norm_fp32

    def step(self):
        import torch

        norm = self.grad_norm()
        if self.clip_grad > 0.0:
            coeff = self.clip_grad / (norm + 1.0e-6)
            if coeff < 1.0:
                with torch.no_grad():
                    for g in self._local_grads():
                        g.mul_(coeff)
        self.optimizer.step()
        return True, norm, None


def build_scheduler(optimizer, opt_cfg: OptimizerConfig, sched_cfg: SchedulerConfig, schedule: SchedulePlan):
    """Megatron-Core's scheduler over the plan's sample counts (validated: warmup < decay)."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    override = sched_cfg.override_opt_param_scheduler
    wd = float(opt_cfg.weight_decay)
    start_wd = wd if sched_cfg.start_weight_decay is None else float(sched_cfg.start_weight_decay)
    end_wd = wd if sched_cfg.end_weight_decay is None else float(sched_cfg.end_weight_decay)
    return OptimizerParamScheduler(
        optimizer,
        init_lr=float(sched_cfg.lr_warmup_init),
        max_lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        lr_warmup_steps=schedule.warmup_samples,
        lr_decay_steps=schedule.decay_samples,
        lr_decay_style=sched_cfg.lr_decay_style,
        start_wd=start_wd,
        end_wd=end_wd,
        wd_incr_steps=schedule.total_samples,
        wd_incr_style=sched_cfg.weight_decay_incr_style,
        use_checkpoint_opt_param_scheduler=not override,
        override_opt_param_scheduler=override,
    )
