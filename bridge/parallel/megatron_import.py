"""Import Megatron-Core without paying for torch.compile's machinery up front.

Megatron-Core decorates its fused kernels with `torch.compile` at import time (`megatron.core.jit`
binds `jit_fuser = torch.compile` when it is first imported), which imports inductor's compiler
(compile_fx, lowering, templates): about half of Megatron-Core's import time, about 3 CPU-seconds
of every rank of every run (a tiny CPU training run: 12.4 -> 9.2 s user time). While Megatron-Core
imports, `torch.compile` is replaced by a wrapper that calls the real `torch.compile` on first use
with CUDA tensors, so a kernel that runs on GPU compiles exactly as before.

On CPU the wrapped functions run eagerly. Some are not optional fusions: Megatron-Core's
`squared_relu` (Nemotron) and `quick_gelu` (GPT-OSS) are `@jit_fuser` activations that every MLP
calls. Compiled on CPU, inductor generates C++ for the vector ISA it picks (from the processor and
`ATEN_CPU_CAPABILITY`) and caches it on disk; with `ATEN_CPU_CAPABILITY=avx2` on an AVX-512
machine this gave NaN logits and gradients where the eager ops (ATen's own kernels for that
capability) give transformers' numbers. Eager is also ~18 s cheaper per rank (the first compile). Conversion (bridge.conversion.auto_bridge) and
`runtime.initialize_distributed` call it before anything else imports Megatron-Core.

The import also leaves the root logger as it found it. On megatron-core 0.19 with `emerging-optimizers`
installed (its Muon), `megatron.core.optimizer` calls that package's registry at import, which logs through
absl, and absl's `log` runs `logging.basicConfig()` when the root logger has no handler: the process would
then look as if its application had configured logging, at WARNING, and bridge's own lines (the layout
line, the iteration lines: bridge.parallel.runtime prints them only where nothing is configured) would
vanish. Handlers the import added to a root logger that had none are removed.

The cyclic garbage collector is paused while Megatron-Core imports. The import creates a few hundred
thousand objects (modules, classes, functions) and none of them is garbage, but each full collection
it triggers walks every object torch's own import left behind: on a 2-core machine that was a third
of Megatron-Core's import (1.04 -> 0.61 s, megatron-core 0.19.2), in every conversion and on every rank
of every run. The objects alive once it has imported (torch's, Megatron-Core's, bridge's modules) are
then frozen (`gc.freeze`: later collections skip them), so a full collection afterwards walks only
what the run itself allocates: one such collection during an import conversion cost 0.12 s. A
collector the caller had disabled stays disabled and nothing is frozen.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys

from bridge.parallel import quiet_warnings


def _on_cuda(args: tuple, kwargs: dict) -> bool:
    """Whether any tensor argument lives on a CUDA device (where the fused kernel is wanted)."""
    import torch

    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in (*args, *kwargs.values()))


def import_megatron() -> None:
    """Import the Megatron-Core modules bridge builds models with (a no-op once megatron.core is
    imported); kernel modules imported later keep the deferred `jit_fuser`."""
    if "megatron.core" in sys.modules:
        return
    import torch

    # some of Megatron-Core's warnings fire on import
    quiet_warnings.install(cpu=not torch.cuda.is_available())
    real = torch.compile

    def deferred_compile(model=None, **kwargs):
        if model is None:  # used as @torch.compile(...)
            return lambda fn: deferred_compile(fn, **kwargs)
        compiled = None

        @functools.wraps(model)
        def call(*args, **kw):
            nonlocal compiled
            if not _on_cuda(args, kw):  # CPU: ATen's eager kernels (see the module docstring)
                return model(*args, **kw)
            if compiled is None:
                compiled = real(model, **kwargs)
            return compiled(*args, **kw)

        return call

    torch.compile = deferred_compile
    root_had_handlers = bool(logging.root.handlers)
    collecting = gc.isenabled()
    gc.disable()  # nothing the import creates is garbage (see the module docstring)
    try:
        import megatron.core.dist_checkpointing  # noqa: F401
        import megatron.core.jit  # noqa: F401  (binds jit_fuser while torch.compile is deferred)
        import megatron.core.models.gpt.gpt_model  # noqa: F401
        from megatron.core import parallel_state  # noqa: F401
    finally:
        if collecting:
            gc.freeze()  # the modules live as long as the process (see the module docstring)
            gc.enable()
        torch.compile = real
        if not root_had_handlers:  # an import's implicit logging.basicConfig() (see the module docstring)
            for handler in list(logging.root.handlers):
                logging.root.removeHandler(handler)
