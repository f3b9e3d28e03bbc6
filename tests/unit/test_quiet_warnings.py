"""bridge.parallel.quiet_warnings hides exactly the known third-party messages, from their modules.

In-process: each message as Megatron-Core / torch word it, issued from its module, is hidden; the
same text from another module, an unrelated warning and (on GPU) the CPU-only ones still show.
Subprocess: the real sources (Megatron-Core imports, torch.distributed, the distributed optimizer's
zero_grad through the CPU backend's mode) warn before install() and are quiet after it.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
import warnings

import pytest

from bridge.parallel import quiet_warnings
from tests.functional.launch import REPO_ROOT

# (message, category, module) as the warnings appear in a CPU training run (megatron-core 0.16.1, torch 2.13)
SEEN = {
    "apex_norm_backends": (
        "Apex is not installed. Falling back to Torch Norm", UserWarning, "megatron.core.models.backends"),
    "apex_norm_specs": (
        "Apex is not installed. Falling back to Torch Norm", UserWarning,
        "megatron.core.models.gpt.gpt_layer_specs"),
    "te_apex_optimizer": (
        "Transformer Engine and Apex are not installed. Falling back to Torch optimizers.", UserWarning,
        "megatron.core.optimizer"),
    "te_apex_clip_grads": (
        "Transformer Engine and Apex are not installed. Falling back to local implementations of "
        "multi_tensor_applier, multi_tensor_l2norm, and multi_tensor_scale", UserWarning,
        "megatron.core.optimizer.clip_grads"),
    "te_apex_fsdp": (
        "Transformer Engine and Apex are not installed. Falling back to local implementations of "
        "multi_tensor_applier and multi_tensor_scale", UserWarning,
        "megatron.core.distributed.fsdp.src.megatron_fsdp.mixed_precision"),
    "non_leaf_grad": (
        "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute "
        "won't be populated during autograd.backward().", UserWarning, "megatron.core.optimizer.optimizer"),
    "all_gather_into_tensor": (
        "`torch.distributed.all_gather_into_tensor` is deprecated. Please use "
        "`torch.distributed.all_gather_single` instead.", FutureWarning, "torch.distributed.c10d_logger"),
    "reduce_scatter_tensor": (
        "`torch.distributed.reduce_scatter_tensor` is deprecated. Please use "
        "`torch.distributed.reduce_scatter_single` instead.", FutureWarning, "torch.distributed.c10d_logger"),
    "cuda_device_max_connections": (
        "When using sequence parallelism it is recommended to set the environment variable "
        "CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup", UserWarning,
        "megatron.core.tensor_parallel.layers"),
    "core_attn_recompute": (
        "If you are using transformer_engine as the transformer implementation, the core_attn is from "
        "transformer_engine and may be the fused version. For fused attention, you have no need to set "
        "'core_attn' to recompute. Please check that the core_attn recompute is really needed.", UserWarning,
        "megatron.core.transformer.transformer_config"),
    "full_scope": (  # megatron-core 0.16
        "full scope is deprecated. Use empty cuda_graph_scope to capture the whole layer.", UserWarning,
        "megatron.core.transformer.transformer_config"),
    "full_scope_modules": (  # megatron-core 0.19
        "full scope is deprecated. Use empty cuda_graph_modules to capture the whole layer.", UserWarning,
        "megatron.core.transformer.transformer_config"),
    "mimo_experimental": (  # megatron-core 0.19
        "MimoModelConfig is experimental and still under active development. The API may change without "
        "notice in future releases.", UserWarning, "megatron.core.models.mimo.config.base_configs"),
    "dcp_single_process_load": (  # megatron-core 0.19 reading a checkpoint's common state
        "torch.distributed is disabled, unavailable or uninitialized, assuming the intent is to load in a "
        "single process.", UserWarning, "torch.distributed.checkpoint.utils"),
    "dcp_load_argument_order": (  # megatron-core 0.19's load_common_state_dict
        "The argument order of load has been changed. Please check the document to avoid future breakages.",
        UserWarning, "torch.distributed.checkpoint.logger"),
    "sharded_tensor": (
        "Please use DTensor instead and we are deprecating ShardedTensor.", FutureWarning,
        "torch.distributed.checkpoint.state_dict_saver"),
}  # fmt: skip
CPU_ONLY = {
    "te_apex_optimizer",
    "te_apex_clip_grads",
    "te_apex_fsdp",
    "cuda_device_max_connections",
    "core_attn_recompute",
}


def shown(cpu: bool, message: str, category: type[Warning], module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:  # restores the process's filters afterwards
        warnings.simplefilter("always")
        quiet_warnings.add_filters(cpu)
        warnings.warn_explicit(
            message, category, filename=module.replace(".", "/") + ".py", lineno=1, module=module
        )
    return len(caught) == 1


@pytest.mark.parametrize("name", sorted(SEEN))
def test_known_warning_is_hidden_on_cpu(name):
    assert not shown(True, *SEEN[name])


@pytest.mark.parametrize("name", sorted(SEEN))
def test_cpu_only_warnings_still_show_with_cuda(name):
    assert shown(False, *SEEN[name]) == (name in CPU_ONLY)


@pytest.mark.parametrize(
    "message, category, module",
    [
        ("mixed_precision.precision=bf16_mixed needs CUDA; training in fp32 on CPU", UserWarning, "bridge.training"),
        ("TP=16 exceeds gpus_per_node=8", UserWarning, "bridge.parallel.layout"),
        ("something new from Megatron-Core", UserWarning, "megatron.core.models.backends"),
        # the same texts from the user's code, or in another category
        ("Apex is not installed. Falling back to Torch Norm", UserWarning, "my_training_script"),
        ("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed.", UserWarning, "__main__"),
        ("full scope is deprecated. Use empty cuda_graph_scope", DeprecationWarning,
         "megatron.core.transformer.transformer_config"),
        # a module name that only starts like a listed one
        ("Apex is not installed. Falling back to Torch Norm", UserWarning, "megatron.core.models.backends_extra"),
    ],
)  # fmt: skip
def test_other_warnings_still_show(message, category, module):
    assert shown(True, message, category, module)


def test_every_filter_has_a_reason_and_compiles():
    import re

    for known in quiet_warnings.KNOWN_WARNINGS:
        re.compile(known.message)
        re.compile(known.module)
        assert known.why


REAL_SOURCES = textwrap.dedent(
    r"""
    import importlib, sys, warnings
    import torch
    import torch.distributed as dist

    def record(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.filterwarnings("always", append=True)  # behind quiet_warnings' filters, once installed
            fn()
        return [(str(w.message)[:40], w.filename.rsplit("site-packages/", 1)[-1]) for w in caught]

    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
    x = torch.ones(4, requires_grad=True)
    y = x * 2  # a non-leaf tensor

    def sources(first):
        from megatron.core.models import backends
        from megatron.core.models.gpt import gpt_layer_specs
        from megatron.core.optimizer import clip_grads
        from megatron.core.optimizer.optimizer import _zero_grad_group_helper
        from megatron.core.transformer import TransformerConfig
        if not first:  # import-time warnings: run the module code again
            for module in (backends, gpt_layer_specs, clip_grads):
                importlib.reload(module)
        TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1)  # the default warns
        TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, recompute_granularity="selective")
        dist.all_gather_into_tensor(torch.zeros(2), torch.ones(2))
        _zero_grad_group_helper([y], set_to_none=False)  # reads y.grad, as the distributed optimizer does
        y.grad  # this script's own read of a non-leaf .grad
        warnings.warn("an unrelated warning")

    from bridge.parallel import cpu_backend, quiet_warnings
    before = record(lambda: sources(True))
    cpu_backend.install()  # the mode forwards the .grad reads
    quiet_warnings.install(cpu=True)
    after = record(lambda: sources(False))
    print("BEFORE", before)
    print("AFTER", after)
    """
)


def test_real_sources_warn_before_and_are_quiet_after():
    proc = subprocess.run(
        [sys.executable, "-c", REAL_SOURCES], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = dict(
        line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("BEFORE", "AFTER"))
    )
    before, after = eval(lines["BEFORE"]), eval(lines["AFTER"])  # noqa: S307 (our own repr of str tuples)
    before_text = " ".join(m for m, _ in before)
    for fragment in ("Apex is not installed", "full scope is deprecated", "`torch.distributed.all_gather_into",
                     "The .grad attribute of a Tensor that is", "If you are using transformer_engine"):  # fmt: skip
        assert fragment in before_text, before
    grad = "The .grad attribute of a Tensor that is"
    assert any(m.startswith(grad) and f == "megatron/core/optimizer/optimizer.py" for m, f in before), before
    # After: only this script's own warnings, located in the script (not in bridge's CPU mode).
    assert len(after) == 2, after
    assert any(m.startswith(grad) and f == "<string>" for m, f in after), after
    assert ("an unrelated warning", "<string>") in after, after


@pytest.mark.parametrize(
    "rank, level, name, printed",
    [
        ("0", logging.INFO, "bridge.training.precision", True),
        ("1", logging.INFO, "bridge.training.precision", False),  # every rank says the same: rank 0 does
        ("1", logging.WARNING, "bridge.parallel.runtime", False),
        ("1", logging.ERROR, "bridge.training.precision", True),  # errors from any rank
        ("1", logging.INFO, "bridge.training", True),  # the loop's own logger picks its rank itself
    ],
)
def test_rank_zero_filter(monkeypatch, rank, level, name, printed):
    from bridge.parallel import runtime

    monkeypatch.setenv("RANK", rank)
    handler = logging.StreamHandler(io.StringIO())
    runtime.log_on_rank_zero(handler, own_rank=("bridge.training",))
    runtime.log_on_rank_zero(handler, own_rank=("bridge.training",))  # once
    assert len(handler.filters) == 1
    record = logging.LogRecord(name, level, __file__, 1, "a line", None, None)
    handler.handle(record)
    assert (handler.stream.getvalue() == "a line\n") == printed


CONVERSION_IMPORTS = textwrap.dedent(
    r"""
    import sys, warnings
    caught = []
    def show(message, category, filename, lineno, file=None, line=None):
        caught.append((str(message), filename.rsplit("site-packages/", 1)[-1]))
    warnings.showwarning = show
    warnings.simplefilter("always")  # every warning, every time, unless a filter in front ignores it
    if sys.argv[1] == "conversion":
        from bridge import AutoBridge  # the conversion front door (convert_checkpoint.py imports it first)
        AutoBridge
    # what conversion pulls in: the optimizer (checkpoint state), DDP / FSDP (wrappers), the layer specs
    import megatron.core.distributed, megatron.core.optimizer, megatron.core.models.gpt.gpt_layer_specs
    print("CAUGHT", repr(caught))
    """
)
TE_APEX_SOURCES = {
    "megatron/core/optimizer/__init__.py",
    "megatron/core/optimizer/optimizer.py",
    "megatron/core/optimizer/clip_grads.py",
    "megatron/core/distributed/fsdp/src/megatron_fsdp/mixed_precision.py",
}


def _conversion_imports(mode: str) -> list[tuple[str, str]]:
    proc = subprocess.run(
        [sys.executable, "-c", CONVERSION_IMPORTS, mode], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=240, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT "))
    return eval(line.removeprefix("CAUGHT "))  # noqa: S307 (our own repr of str tuples)


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="the TE/Apex fallbacks are CPU-only filters"
)
def test_conversion_installs_the_filters_before_megatron_core_is_imported():
    # Without bridge: the installed Megatron-Core's own modules (0.16.1 and 0.19.2 alike) warn ...
    plain = _conversion_imports("plain")
    te_apex = {f for m, f in plain if m.startswith("Transformer Engine and Apex are not installed. Falling")}
    assert te_apex == TE_APEX_SOURCES, plain
    assert any(m.startswith("Apex is not installed. Falling back to Torch Norm") for m, _ in plain), plain
    # ... and importing AutoBridge first installs the filters, whose module regexes match those modules.
    quiet = _conversion_imports("conversion")
    assert not [m for m, _ in quiet if "Apex is not installed" in m or "Apex are not installed" in m], quiet


# each known log record as its library words it (megatron-core 0.19.2, torch 2.13)
LOGGED = {
    "megatron.core.models.gpt.gpt_model":
        "GPTModel IS DEPRECATED. GPTModel is only accepting critical bug fixes, no new features.",
    "megatron.core.distributed.distributed_data_parallel":
        "DistributedDataParallel: full_param_layout not provided with use_distributed_optimizer=True. "
        "Auto-computing layout inside DDP. Callers should pre-compute layouts via "
        "DistributedOptimizer.compute_full_param_layout() and pass them in.",
    "megatron.core.dist_checkpointing.strategies.torch":
        "MCore's async save is deprecated and will be removed in the future releases. Please, use NVRx "
        "async solution by setting `async_strategy` to `nvrx`.",
    "torch.utils.cpp_extension": "No CUDA runtime is found, using CUDA_HOME='/usr/local'",
}  # fmt: skip


def test_every_known_log_record_has_a_sample():
    assert sorted(LOGGED) == sorted({known.logger for known in quiet_warnings.KNOWN_LOG_RECORDS})


@pytest.mark.parametrize("logger_name", sorted(LOGGED))
def test_known_log_records_are_dropped_and_others_kept(logger_name):
    import logging

    log = logging.getLogger(logger_name)
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())
    log.addHandler(handler)
    try:
        quiet_warnings.add_log_filters()
        log.warning(LOGGED[logger_name])
        log.warning("something new from the same logger")  # the same logger, another message: kept
    finally:
        log.removeHandler(handler)
        log.filters.clear()
    assert seen == ["something new from the same logger"]
