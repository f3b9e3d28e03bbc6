"""optimizer.optimizer=muon and model.qk_clip (MuonClip): what Megatron-Core's Muon and QK-clip run
under, checked before launch.

Megatron-Core builds Muon (`megatron.core.optimizer`, `optimizer="muon"`) on the `emerging_optimizers`
package: Muon for the 2-D hidden weights, Adam for embeddings, the output layer, norms and biases, each
wrapped in Megatron-Core's FP32 / bf16 optimizer over Megatron-Core DDP's gradient buffers. What follows
from that is refused here, each with its reason: another release, another strategy, the distributed
optimizer, fp16. Pure Python: versions come from package metadata.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.rules import one_of, positive
from bridge.errors import config_error
from bridge.models.transformer_fields import INSTALLED_RELEASE

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.environment import Environment

# The first emerging_optimizers release Megatron-Core 0.19's Muon calls correctly (newton_schulz_tp's
# tp_mode, OrthogonalizedOptimizer's `nesterov`); PyPI has 0.3.0, for Python >= 3.12.
EMERGING_OPTIMIZERS_MIN = (0, 3)
MEGATRON_CORE_MIN = (0, 19)


def _release(version: str | None) -> tuple[int, int]:
    if not version:
        return (0, 0)
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def emerging_optimizers_version() -> str | None:
    try:
        return metadata.version("emerging-optimizers")
    except metadata.PackageNotFoundError:
        return None


def check_muon(cfg: ConfigContainer, release: str | None = None, emerging: str | None = None) -> None:
    """Raise ConfigError when optimizer=muon cannot run as configured. `release` / `emerging`: the
    megatron-core and emerging-optimizers versions (None: the installed ones; tests pass others)."""
    o = cfg.optimizer
    if o.optimizer != "muon":
        return
    release = release or INSTALLED_RELEASE
    if _release(release) < MEGATRON_CORE_MIN:
        raise config_error(
            "optimizer.optimizer",
            "muon",
            f"megatron-core {release}'s Muon (megatron/core/optimizer/muon.py) calls the pre-0.3 interface "
            "of emerging_optimizers (momentum_beta / use_nesterov, newton_schulz_tp(mode=)), which the "
            "only release on PyPI (emerging-optimizers 0.3.0) does not have, and that release needs Python >= 3.12; "
            "Muon runs with megatron-core >= 0.19",
            "use Python >= 3.12 (pip then installs megatron-core 0.19 and emerging-optimizers), or "
            "optimizer.optimizer=adam",
        )
    emerging = emerging or emerging_optimizers_version()
    if _release(emerging) < EMERGING_OPTIMIZERS_MIN:
        raise config_error(
            "optimizer.optimizer",
            "muon",
            "Megatron-Core's Muon comes from the emerging-optimizers package "
            f"(>= {'.'.join(map(str, EMERGING_OPTIMIZERS_MIN))}), which "
            + (f"is {emerging} here" if _release(emerging) > (0, 0) else "is not installed"),
            "pip install 'emerging-optimizers>=0.3' (bridge's dependencies install it on Python >= 3.12)",
        )
    strategy = cfg.distributed.strategy
    if strategy != "megatron":
        raise config_error(
            "distributed.strategy",
            strategy,
            "optimizer.optimizer=muon runs on Megatron-Core's optimizer wrappers over Megatron-Core "
            "DDP's gradient buffers (strategy megatron) with each weight's whole matrix on a rank for "
            "Newton-Schulz; Megatron-Core has no Muon for PyTorch FSDP2's or DDP's sharded or wrapped "
            "parameters (fsdp2, ddp) nor for Megatron-FSDP (which needs the distributed optimizer)",
            "set distributed.strategy=megatron, or optimizer.optimizer=adam",
        )
    if o.use_distributed_optimizer:
        raise config_error(
            "optimizer.use_distributed_optimizer",
            True,
            "Megatron-Core's Muon keeps whole matrices on each data-parallel rank (Newton-Schulz needs "
            "them): its Adam part is built without the distributed optimizer and cannot follow "
            "gradient buffers laid out for it",
            "set optimizer.use_distributed_optimizer=false",
        )
    if S.PRECISION_DTYPES.get(cfg.mixed_precision.precision) == "fp16":
        raise config_error(
            "mixed_precision.precision",
            cfg.mixed_precision.precision,
            "Megatron-Core's Muon has no fp16 (loss-scaled) form",
            "use mixed_precision.precision=bf16_mixed (or fp32)",
        )
    one_of("optimizer.muon_scale_mode", o.muon_scale_mode, S.MUON_SCALE_MODES)
    one_of("optimizer.muon_fp32_matmul_prec", o.muon_fp32_matmul_prec, S.MUON_FP32_MATMUL_PRECS)
    one_of("optimizer.muon_coefficient_type", o.muon_coefficient_type, S.MUON_COEFFICIENT_TYPES)
    one_of("optimizer.muon_tp_mode", o.muon_tp_mode, S.MUON_TP_MODES)
    one_of("optimizer.muon_scalar_optimizer", o.muon_scalar_optimizer, S.MUON_SCALAR_OPTIMIZERS)
    positive("optimizer.muon_num_ns_steps", o.muon_num_ns_steps)
    if not 0 <= o.muon_momentum < 1:
        raise config_error("optimizer.muon_momentum", o.muon_momentum, "must be in [0, 1)", "use e.g. 0.95")
    if not o.muon_extra_scale_factor > 0:
        raise config_error(
            "optimizer.muon_extra_scale_factor", o.muon_extra_scale_factor, "must be > 0", "use 1.0 (or 0.2)"
        )


def check_qk_clip(cfg: ConfigContainer, env: Environment) -> None:
    """model.qk_clip (and model.log_max_attention_logit): the per-head max logits must be recorded and the
    clipped weights must be the ones the optimizer steps (bridge.training.qk_clip)."""
    m = cfg.model
    if not (m.qk_clip or m.log_max_attention_logit):
        return
    field = "model.qk_clip" if m.qk_clip else "model.log_max_attention_logit"
    te = env.cuda and env.has("transformer_engine")
    backend = getattr(m.attention_backend, "name", m.attention_backend)
    if te and env.version("transformer_engine") < (2, 9):
        raise config_error(
            field, True, f"Transformer Engine {env.packages['transformer_engine']}'s attention returns no max "
            "logits (Megatron-Core needs Transformer Engine >= 2.9 for them)", "upgrade transformer-engine",
        )  # fmt: skip
    if not te and backend not in ("auto", "flash", "fused") and not m.multi_latent_attention:
        raise config_error(
            field, True, f"model.attention_backend={backend} keeps Megatron-Core's DotProductAttention, which "
            "records no max attention logits (bridge's sdpa attention and Transformer Engine's do)",
            "set model.attention_backend=auto",
        )  # fmt: skip
    if not m.qk_clip:
        return
    strategy = cfg.distributed.strategy
    if strategy in ("fsdp2", "megatron_fsdp"):
        raise config_error(
            "model.qk_clip", True, f"strategy {strategy} shards W_q / W_k over data-parallel ranks, and "
            "Megatron-Core's clip_qk scales whole per-head row blocks of them", "use distributed.strategy=megatron",
        )  # fmt: skip
    if strategy == "megatron" and cfg.optimizer.use_distributed_optimizer:
        raise config_error(
            "model.qk_clip", True, "Megatron-Core's clip_qk rescales the model's weights (and the fp32 main "
            "copy the non-distributed optimizer keeps beside them) but not the distributed optimizer's "
            "sharded main weights, whose next step would undo the clip",
            "set optimizer.use_distributed_optimizer=false (as Kimi K2's Muon recipes do)",
        )  # fmt: skip
