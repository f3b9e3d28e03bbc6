"""The `mixed_precision` section (the one source of the training dtype) and fp8's needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config.checks.rules import one_of, positive
from bridge.config.sections import FP8_PRECISIONS, PRECISION_DTYPES
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.environment import Environment


def check_precision(cfg: ConfigContainer) -> list[str]:
    p, m = cfg.mixed_precision, cfg.model
    one_of("mixed_precision.precision", p.precision, tuple(PRECISION_DTYPES))
    for flag, wanted in (("bf16", "bf16_mixed"), ("fp16", "fp16_mixed")):
        if getattr(m, flag) and p.precision != wanted:
            raise config_error(
                f"model.{flag}",
                True,
                f"mixed_precision.precision = {p.precision!r} is the one source of the training dtype",
                f"set mixed_precision.precision={wanted}, or model.{flag}=false",
            )
    if p.loss_scale is not None and p.loss_scale <= 0:
        raise config_error(
            "mixed_precision.loss_scale", p.loss_scale, "must be > 0 or null (dynamic)", "use null"
        )
    if p.initial_loss_scale <= 0 or p.min_loss_scale <= 0:
        raise config_error(
            "mixed_precision.initial_loss_scale",
            p.initial_loss_scale,
            "loss scales must be > 0",
            "use 2**32 and 1.0",
        )
    positive("mixed_precision.loss_scale_window", p.loss_scale_window)
    positive("mixed_precision.hysteresis", p.hysteresis)
    if p.loss_scale is not None and p.precision != "fp16_mixed":
        return [
            f"mixed_precision.loss_scale={p.loss_scale} has no effect with precision {p.precision} (fp16 only)."
        ]
    return []


def check_fp8(cfg: ConfigContainer, env: Environment) -> None:
    """The fp8 precisions run on Transformer Engine on a GPU that has the recipe's tensor cores. (On CPU
    every precision trains in fp32: the plan warns.)"""
    precision = cfg.mixed_precision.precision
    if precision not in FP8_PRECISIONS or not env.cuda:
        if cfg.model.fp8 is not None and precision not in FP8_PRECISIONS:
            raise config_error(
                "model.fp8",
                cfg.model.fp8,
                f"mixed_precision.precision = {precision!r} is the one source of the training dtype",
                "choose an fp8 precision (bf16_with_fp8_delayed_scaling_mixed, "
                "bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed) and leave model.fp8 null",
            )
        return
    if not env.has("transformer_engine"):
        raise config_error(
            "mixed_precision.precision",
            precision,
            "fp8 training runs on Transformer Engine, which is not installed",
            "pip install --no-build-isolation 'transformer-engine[pytorch]', or use precision bf16_mixed",
        )
    needed, _ = FP8_PRECISIONS[precision]
    have = env.compute_capability
    if have is not None and have < needed:
        raise config_error(
            "mixed_precision.precision",
            precision,
            f"needs a GPU of compute capability >= {needed[0]}.{needed[1]}; {env.device_name} has "
            f"{have[0]}.{have[1]}",
            "use bf16_mixed on this GPU"
            + (", or bf16_with_fp8_current_scaling_mixed on Ada / Hopper" if needed >= (10, 0) else ""),
        )
