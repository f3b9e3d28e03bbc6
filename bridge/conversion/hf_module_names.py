"""Checkpoint names -> transformers module names, as transformers renames them when it loads a checkpoint.

A model's tensors are stored under its checkpoint's names, which transformers' model class may rename when
it loads them (its conversion mapping: Qwen2.5-VL's `model.layers.*` -> `model.language_model.layers.*`,
LLaVA's `language_model.model.*` -> `model.language_model.*`). A peft adapter is keyed by the loaded
model's module names, and peft applies only some of those renamings itself, so an adapter exported under
the checkpoint's names may load nothing. The renaming here is transformers' own: the model class is built
on the meta device and its conversion mapping's renamings (`WeightRenaming`; converters that fuse or split
tensors do not name adapter modules) are applied to each name.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _identity(name: str) -> str:
    return name


def module_name_renamer(hf_config: Any, hf_path: str | Path | None = None) -> Callable[[str], str]:
    """A function from a checkpoint tensor name to the name transformers' model class gives that tensor
    (identity when transformers renames nothing or has no class of this architecture). The config is the
    folder's config.json read by transformers when `hf_path` is given, else `hf_config` (a transformers
    config, or a config.json dict)."""
    import torch
    import transformers
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    if hf_path is not None and (Path(hf_path) / "config.json").is_file():
        config = transformers.AutoConfig.from_pretrained(str(hf_path))
    elif isinstance(hf_config, dict):  # read as its config.json would be (transformers' own encodings)
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "config.json").write_text(json.dumps(hf_config))
            config = transformers.AutoConfig.from_pretrained(folder)
    else:
        config = hf_config
    archs = getattr(config, "architectures", None) or []
    cls = getattr(transformers, archs[0], None) if archs else None
    if cls is None:
        return _identity
    with torch.device("meta"):
        model = cls(config)
    renamings = [t for t in get_model_conversion_mapping(model) if isinstance(t, WeightRenaming)]
    if not renamings:
        return _identity
    known = model.state_dict()  # on the meta device: names only

    def rename(name: str) -> str:
        return rename_source_key(name, renamings, [], model.base_model_prefix, known)[0]

    return rename
