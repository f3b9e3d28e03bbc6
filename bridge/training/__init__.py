"""Training on Megatron-Core: `pretrain(config, forward_step_func=None)`.

Imported lazily so `import bridge.training` stays free of torch and megatron.core.
"""

__all__ = ["pretrain"]


def __getattr__(name: str):
    if name == "pretrain":
        from bridge.training.pretrain import pretrain

        # Importing the submodule bound `bridge.training.pretrain` to the module: rebind the function.
        globals()["pretrain"] = pretrain
        return pretrain
    raise AttributeError(f"module 'bridge.training' has no attribute {name!r}")
