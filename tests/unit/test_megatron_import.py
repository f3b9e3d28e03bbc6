"""Megatron-Core's `@jit_fuser` kernels run eagerly on CPU (bridge.parallel.megatron_import).

Nemotron's `squared_relu` and GPT-OSS's `quick_gelu` are compiled activations; compiled on CPU,
inductor's generated C++ depends on the vector ISA it picks and gave NaN under
`ATEN_CPU_CAPABILITY=avx2` on an AVX-512 machine. On CPU they must not reach torch.compile at all.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter: the suite's other tests may import Megatron-Core before import_megatron() (their
# jit_fuser is then the real torch.compile), which no bridge entry point does.
CHECK = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from bridge.parallel.megatron_import import import_megatron

    import logging
    import_megatron()
    import megatron.core.optimizer  # 0.19 + emerging-optimizers: absl's implicit basicConfig at import
    # the root logger as found (no handler): bridge's own lines print where no logging is configured
    assert not logging.root.handlers, logging.root.handlers
    from megatron.core.activations import quick_gelu, squared_relu
    from torch._dynamo.utils import counters

    counters.clear()
    x = torch.randn(2, 16, 96, requires_grad=True)
    ref = x.detach().clone().requires_grad_(True)
    y = squared_relu(x) + quick_gelu(x)
    expect = F.relu(ref) ** 2 + ref * torch.sigmoid(1.702 * ref)
    y.sum().backward()
    expect.sum().backward()
    assert not counters["stats"], f"torch.compile ran on CPU tensors: {dict(counters['stats'])}"
    # Same ATen ops in the same order: bit-identical values and gradients.
    assert torch.equal(y, expect) and torch.equal(x.grad, ref.grad)
    print("ok")
    """
)


def test_cpu_activations_are_not_compiled_and_equal_torch():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
