"""HF's YaRN rope_parameters read into the provider's yarn_rope_* fields (transformers' defaults), for the
families whose config.json carries YaRN in rope_parameters (bridge.models.hf_translation.write's
yarn_rope_parameters writes them back). Pure data."""

from __future__ import annotations

import math
from typing import Any

from bridge.models.hf_translation.common import get, refuse


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_rope_fields(params: dict[str, Any], cfg: Any, where: str = "rope_parameters") -> dict[str, Any]:
    """The provider's yarn_rope_* fields of a yarn `params` dict found at `where` in the config `cfg`
    (its max_position_embeddings gives the factor when params has none)."""
    if not params.get("truncate", True):
        raise refuse(
            f"{where}.truncate",
            params["truncate"],
            "the provider's YaRN rounds its ramp bounds to whole channels (truncate=true)",
            "convert a model with truncate unset or true",
        )
    original = int(params["original_max_position_embeddings"])
    factor = params.get("factor")
    factor = float(factor) if factor is not None else int(get(cfg, "max_position_embeddings")) / original
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention = _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
        else:
            attention = _mscale(factor)
    return dict(
        yarn_rope_factor=factor,
        yarn_rope_original_max_position_embeddings=original,
        yarn_rope_beta_fast=float(params.get("beta_fast") or 32),
        yarn_rope_beta_slow=float(params.get("beta_slow") or 1),
        yarn_rope_attention_factor=float(attention),
    )
