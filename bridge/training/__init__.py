"""Training on Megatron-Core: `pretrain(config, forward_step_func=None)` and `finetune(...)`.

Imported lazily so `import bridge.training` stays free of torch and megatron.core.
"""

import importlib

__all__ = ["finetune", "pretrain"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module("bridge.training.pretrain")

        # Importing the submodule bound `bridge.training.pretrain` to the module: rebind the functions.
        globals().update(pretrain=module.pretrain, finetune=module.finetune)
        return globals()[name]
    raise AttributeError(f"module 'bridge.training' has no attribute {name!r}")
