"""Import Megatron-Core for conversion without paying for torch.compile's machinery up front.

Megatron-Core decorates its fused kernels with `torch.compile` at import time (`megatron.core.jit`),
which imports torch._dynamo and inductor: about half of Megatron-Core's import time, and conversion
never runs those kernels. While Megatron-Core imports, `torch.compile` is replaced by a wrapper that
calls the real `torch.compile` on first use, so a model that later runs compiles exactly as before.
"""

from __future__ import annotations

import functools
import sys


def import_megatron() -> None:
    """Import the Megatron-Core modules conversion uses (a no-op once megatron.core is imported)."""
    if "megatron.core" in sys.modules:
        return
    import torch

    from bridge.parallel.runtime import quiet_known_warnings

    quiet_known_warnings()  # some of Megatron-Core's warnings fire on import
    real = torch.compile

    def deferred_compile(model=None, **kwargs):
        if model is None:  # used as @torch.compile(...)
            return lambda fn: deferred_compile(fn, **kwargs)
        compiled = None

        @functools.wraps(model)
        def call(*args, **kw):
            nonlocal compiled
            if compiled is None:
                compiled = real(model, **kwargs)
            return compiled(*args, **kw)

        return call

    torch.compile = deferred_compile
    try:
        import megatron.core.dist_checkpointing  # noqa: F401
        import megatron.core.models.gpt.gpt_model  # noqa: F401
        from megatron.core import parallel_state  # noqa: F401
    finally:
        torch.compile = real
