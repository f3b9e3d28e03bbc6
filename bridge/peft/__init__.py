"""PEFT for Megatron-Core models: LoRA and DoRA adapters, tensor- and pipeline-parallel aware.

    from bridge.peft import apply_peft
    provider.register_post_build_hook(functools.partial(apply_peft, peft=cfg.peft, seed=cfg.rng.seed))
    ...
    bridge.save_hf_pretrained(model, "merged/")   # HF folder with the adapters merged in
    bridge.save_hf_adapter(model, "adapter/")     # HF PEFT adapter folder (peft.PeftModel.from_pretrained)

Modules: names (which parameters are adapters; no torch), adapters (the adapter module), apply (attach
to model chunks). The Hugging Face exports (merged weights: bridge.conversion.peft_merge; the PEFT adapter
folder: bridge.conversion.hf_adapter) belong to conversion. `import bridge.peft` stays light: the names
below load on first use.
"""

import importlib

from bridge.peft.names import is_adapter_param

_LAZY = {
    "apply_peft": "bridge.peft.apply",
    "adapted_linears": "bridge.peft.apply",
    "adapter_parameters": "bridge.peft.apply",
    "named_adapter_parameters": "bridge.peft.apply",
    "has_adapters": "bridge.peft.apply",
    "init_dora_magnitudes": "bridge.peft.apply",
    "ParallelAdapter": "bridge.peft.adapters",
    "adapters_disabled": "bridge.peft.adapters",
}

__all__ = ["is_adapter_param", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge.peft' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
