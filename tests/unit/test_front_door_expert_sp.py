"""TP=2 EP=2 (ETP=1) with sequence parallelism: bridge's local spec never makes Megatron-Core warn
"`sequence_parallel` is set to `True`, but tensor model parallel size is 1. Disabling sequence parallel."

Megatron-Core's ColumnParallelLinear (megatron/core/tensor_parallel/layers.py, 0.16.1 and 0.19.2) says
that for every MoE expert's linear_fc1 when the expert tensor-parallel group has one rank, then turns
sequence parallelism off for that layer only. The experts' spec gets bridge.models.specs'
ExpertColumnParallelLinear, which is built in that end state directly: same module, same numbers, no
message. In one process every group has one rank, which is exactly the experts' situation at ETP=1.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.functional.launch import REPO_ROOT

SCRIPT = textwrap.dedent(
    r"""
    import dataclasses, functools, warnings
    import torch
    from bridge.models.gpt_provider import GPTModelProvider
    from bridge.models.provider_layout import derive_layout
    from bridge.parallel import runtime

    provider = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256,
                                seq_length=32, ffn_hidden_size=128, num_moe_experts=4, moe_ffn_hidden_size=32)
    runtime.initialize_distributed(derive_layout(provider, 1))  # every group, the expert TP group too, has 1 rank
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from bridge.models import specs

    config = provider.transformer_config()
    found = {}
    def find(obj, path):
        if isinstance(obj, functools.partial):
            find(obj.keywords.get("submodules"), path)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                if f.name == "linear_fc1" and isinstance(value, type):
                    found[path] = value.__name__
                find(value, path + (f.name,) if f.name in ("experts", "shared_experts") else path)
    find(specs.gpt_block_spec(config).layer_specs[0], ())

    config.sequence_parallel = True  # as with TP=2: the user's setting, which the expert layer sees
    def build(cls):
        torch.manual_seed(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer = cls(64, 32, config=config, init_method=torch.nn.init.normal_, bias=False, is_expert=True)
        return layer, [str(w.message) for w in caught if "sequence" in str(w.message).lower()]

    theirs, their_warnings = build(ColumnParallelLinear)
    ours, our_warnings = build(specs.ExpertColumnParallelLinear)
    x = torch.randn(5, 64)
    same = torch.equal(theirs(x)[0], ours(x)[0]) and torch.equal(theirs.weight, ours.weight)
    print("RESULT", repr((found, their_warnings, our_warnings, theirs.sequence_parallel,
                          ours.sequence_parallel, ours.config is config, same)))
    """
)


def test_expert_linear_is_built_without_the_disabling_warning():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    found, theirs, ours, their_sp, our_sp, same_config, same = eval(line.removeprefix("RESULT "))  # noqa: S307
    # the local spec: experts get bridge's linear; the shared experts (TP group) keep Megatron-Core's
    assert found == {("experts",): "ExpertColumnParallelLinear", ("shared_experts",): "ColumnParallelLinear"}
    # the real source warns, and ends with sequence parallelism off for that layer ...
    assert theirs and theirs[0].endswith("tensor model parallel size is 1. Disabling sequence parallel."), (
        theirs
    )
    assert their_sp is False
    # ... bridge's layer is in that same state without the message, keeps the user's config object,
    # and computes the same numbers from the same initialisation
    assert ours == [] and our_sp is False and same_config and same
