"""What every family's config.json translation shares: reading a field from a config object or dict,
the refusal message, transformers' class defaults common to the decoder families, the dtype names and
reading a config.json file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bridge.errors import ConfigError
from bridge.models.dtypes import BY_TORCH_NAME

# transformers' config-class defaults shared by every family read here (checked against transformers
# in tests/unit/test_conversion_hf_config.py, with each family's own defaults).
BASE_DEFAULTS: dict[str, Any] = dict(
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    tie_word_embeddings=False,
    rope_theta=10000.0,
    rms_norm_eps=1e-06,
)
# ... and those of the mixture-of-experts families, merged with BASE_DEFAULTS by their folders.
MOE_DEFAULTS: dict[str, Any] = dict(router_aux_loss_coef=0.001)

# HF `dtype` / `torch_dtype` -> provider dtype names.
HF_DTYPES = {torch_name: d.name for torch_name, d in BY_TORCH_NAME.items()}


def get(cfg: Any, name: str, default: Any = None) -> Any:
    """`cfg.name` of a PretrainedConfig or `cfg[name]` of a config.json dict."""
    return getattr(cfg, name, default) if not isinstance(cfg, dict) else cfg.get(name, default)


def refuse(field: str, value: Any, rule: str, fix: str) -> ConfigError:
    """The one error for an HF config value a family cannot express."""
    return ConfigError(f"HF config {field}={value!r}: {rule}. Fix: {fix}.")


def hf_dtype_name(cfg: Any) -> str:
    """The checkpoint's dtype by provider name (fp32 when the config does not say)."""
    dtype = get(cfg, "dtype") or get(cfg, "torch_dtype") or "float32"
    dtype = str(dtype).removeprefix("torch.")
    if dtype not in HF_DTYPES:
        raise refuse(
            "dtype", dtype, f"must be one of {list(HF_DTYPES)}", "save the checkpoint in one of those"
        )
    return HF_DTYPES[dtype]


def read_config_json(path: str | Path) -> dict[str, Any]:
    """config.json as a dict, or a ConfigError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read ({e}); fix or replace the file") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg}); fix or replace the file"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: a config.json holds a JSON object, this one holds {type(config).__name__}"
        )
    return config


_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def mtp_layer_tensors(cfg: Any, names: set[str], keep: int) -> set[str]:
    """The tensors of the checkpoint's multi-token-prediction layers of depth >= keep: a config with
    num_nextn_predict_layers holds depth k as model.layers.<num_hidden_layers + k>.* (DeepSeek-V3's layout)."""
    if not int(get(cfg, "num_nextn_predict_layers", 0) or 0):
        return set()
    first = int(get(cfg, "num_hidden_layers")) + keep
    return {n for n in names if (m := _HF_LAYER.match(n)) and int(m.group(1)) >= first}
