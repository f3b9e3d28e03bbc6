"""Import Megatron-Core without paying for torch.compile's machinery up front.

Megatron-Core decorates its fused kernels with `torch.compile` at import time (`megatron.core.jit`
binds `jit_fuser = torch.compile` when it is first imported), which imports inductor's compiler
(compile_fx, lowering, templates): about half of Megatron-Core's import time, about 3 CPU-seconds
of every rank of every run (a tiny CPU training run: 12.4 -> 9.2 s user time), for kernels that
conversion never runs and a CPU run never fuses. While Megatron-Core imports, `torch.compile` is
replaced by a wrapper that calls the real `torch.compile` on first use, so a kernel that runs (on
GPU with the fusions on) compiles exactly as before. Conversion (bridge.conversion.auto_bridge) and
`runtime.initialize_distributed` call it before anything else imports Megatron-Core.
"""

from __future__ import annotations

import functools
import sys

from bridge.parallel import quiet_warnings


def import_megatron() -> None:
    """Import the Megatron-Core modules bridge builds models with (a no-op once megatron.core is
    imported); kernel modules imported later keep the deferred `jit_fuser`."""
    if "megatron.core" in sys.modules:
        return
    import torch

    quiet_warnings.install(
        cpu=not torch.cuda.is_available()
    )  # some of Megatron-Core's warnings fire on import
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
        import megatron.core.jit  # noqa: F401  (binds jit_fuser while torch.compile is deferred)
        import megatron.core.models.gpt.gpt_model  # noqa: F401
        from megatron.core import parallel_state  # noqa: F401
    finally:
        torch.compile = real
