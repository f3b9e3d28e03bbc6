"""Warning filters for third-party messages that tell a bridge user nothing.

Each entry names the exact message (a regex on its start), its category and the module that issues
it, and says why it is noise. Anything else, including the same text from another module, still
shows. `install()` is called (through bridge.parallel.runtime.quiet_known_warnings) before Megatron-Core
is imported, since some of these fire at import time: by pretrain() and initialize_distributed, and by
conversion when bridge.conversion.auto_bridge / weight_loader are imported. No torch or megatron import
happens here. The module regexes match where megatron-core 0.16.1 and 0.19.2 both issue each message
(tests/unit/test_quiet_warnings.py imports the real modules of the installed release).
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownWarning:
    message: str  # regex matched against the start of the message (case-insensitive, as warnings does)
    category: type[Warning]
    module: str  # regex for the whole name of the module whose code issues the warning
    why: str
    cpu_only: bool = False  # says something on a GPU machine, nothing on CPU


KNOWN_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        r"Apex is not installed\. Falling back to Torch Norm",
        UserWarning,
        r"megatron\.core\.models\.(backends|gpt\.gpt_layer_specs)",
        "bridge's specs never use Apex's norm (local spec: bridge.models.norms; GPU: Transformer Engine)",
    ),
    KnownWarning(
        r"Transformer Engine and Apex are not installed\. Falling back to ",
        UserWarning,
        r"megatron\.core\.(optimizer(\.\w+)*|distributed\.fsdp\.src\.megatron_fsdp\.mixed_precision)"
        r"|megatron_fsdp\.mixed_precision",
        "neither runs without CUDA: the torch implementations are the only ones on CPU",
        cpu_only=True,
    ),
    KnownWarning(
        r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed",
        UserWarning,
        r"megatron\.core\.optimizer\.optimizer",
        "the distributed optimizer's zero_grad reads .grad of its shard views (marked in Megatron-Core's source)",
    ),
    KnownWarning(
        r"FSDP2-wrapped module \(FSDPGPTModel\) returned a view tensor",
        UserWarning,
        r"torch\.distributed\.fsdp\._fully_shard\._fsdp_state",
        "GPTModel returns its per-token loss as a transposed view, which bridge's loss function only reads "
        "out of place (fsdp2's gradients equal strategy megatron's: tests/functional/test_fsdp2*.py)",
    ),
    KnownWarning(
        r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
        FutureWarning,
        r"torch\.distributed\.c10d_logger",
        "Megatron-Core's collectives use the old names; nothing for a user to change",
    ),
    KnownWarning(
        r"When using sequence parallelism it is recommended to set the environment variable "
        r"CUDA_DEVICE_MAX_CONNECTIONS",
        UserWarning,
        r"megatron\.core\.tensor_parallel\.layers",
        "a CUDA stream setting: meaningless without CUDA",
        cpu_only=True,
    ),
    KnownWarning(
        r"full scope is deprecated\. Use empty cuda_graph_(scope|modules)",  # 0.16 | 0.19 wording
        UserWarning,
        r"megatron\.core\.transformer\.transformer_config",
        "raised for Megatron-Core's own default ('full': cuda_graph_scope in 0.16, cuda_graph_modules in 0.19)",
    ),
    KnownWarning(
        r"Please use DTensor instead and we are deprecating ShardedTensor",
        FutureWarning,
        r"(torch\.distributed|megatron\.core)(\.\w+)*",
        "torch_dist checkpoints go through torch.distributed.checkpoint's own ShardedTensor support",
    ),
    KnownWarning(
        r"Please use DTensor instead and we are deprecating ShardedTensor",
        FutureWarning,
        r"bridge\.parallel\.cpu_device_mode",
        "the same Megatron-Core ShardedTensor call, seen through the CPU device mode that forwards it",
        cpu_only=True,
    ),
    KnownWarning(
        r"`load_state_dict` is deprecated and will be removed in future versions\. Please use `load`",
        FutureWarning,
        r"megatron\.core\.dist_checkpointing\.strategies\.torch",
        "Megatron-Core's torch_dist loader calls torch.distributed.checkpoint's old name; bridge calls "
        "dist_checkpointing.load, nothing for a user to change",
    ),
    KnownWarning(
        r"If you are using transformer_engine as the transformer implementation, the core_attn is from "
        r"transformer_engine",
        UserWarning,
        r"megatron\.core\.transformer\.transformer_config",
        "issued for every selective recompute of core_attn (Megatron-Core's default module), once per rank: "
        "a hint about Transformer Engine's fused attention, which a CPU run never has",
        cpu_only=True,
    ),
    KnownWarning(
        r"When using async grad allreduce it is recommended to set the environment variable "
        r"CUDA_DEVICE_MAX_CONNECTIONS",
        UserWarning,
        r"megatron\.core\.tensor_parallel\.layers",
        "a CUDA stream setting: meaningless without CUDA",
        cpu_only=True,
    ),
    KnownWarning(
        r"torch\.distributed is disabled, unavailable or uninitialized, assuming the intent is to load in a "
        r"single process",
        UserWarning,
        r"torch\.distributed\.checkpoint\.utils",
        "megatron-core 0.19 reads a torch_dist checkpoint's common state through torch.distributed.checkpoint's "
        "load; bridge reads it in one process on purpose, before any process group exists (an export's checks "
        "of what the checkpoint holds)",
    ),
    KnownWarning(
        r"The argument order of load has been changed\. Please check the document",
        UserWarning,
        r"torch\.distributed\.checkpoint\.logger",
        "megatron-core 0.19 calls torch.distributed.checkpoint's load with the storage reader as a positional "
        "argument (its load_common_state_dict); nothing for a user to change",
    ),
    KnownWarning(
        r"MimoModelConfig is experimental and still under active development",
        UserWarning,
        r"megatron\.core\.models\.mimo\.config\.base_configs",
        "megatron-core 0.19 warns when its multimodal package is imported (by its checkpoint code); bridge "
        "builds no MIMO model",
    ),
)


@dataclass(frozen=True)
class KnownLogRecord:
    """A log record (not a warning) of a third-party logger that tells a bridge user nothing."""

    logger: str  # the exact logger name
    message: str  # regex matched against the start of the formatted message
    why: str


KNOWN_LOG_RECORDS: tuple[KnownLogRecord, ...] = (
    KnownLogRecord(
        "megatron.core.models.gpt.gpt_model",
        r"GPTModel IS DEPRECATED\. GPTModel is only accepting critical bug fixes",
        "megatron-core 0.19 logs it for every GPTModel built (once per model chunk); bridge builds GPTModel "
        "on purpose (HybridModel is a different model class) and the user has nothing to change",
    ),
    KnownLogRecord(
        "megatron.core.distributed.distributed_data_parallel",
        r"DistributedDataParallel: full_param_layout not provided with use_distributed_optimizer=True",
        "megatron-core 0.19 then computes the layout itself with DistributedOptimizer.compute_full_param_layout, "
        "from the bucket size and groups only DDP knows: the same layout a caller would pass",
    ),
    KnownLogRecord(
        "megatron.core.dist_checkpointing.strategies.torch",
        r"MCore's async save is deprecated and will be removed in the future releases",
        "megatron-core 0.19's synchronous torch_dist save goes through its own 'mcore' async request and logs "
        "this on every first save; NVRx (nvidia-resiliency-ext) is a GPU-cluster package bridge does not install",
    ),
    KnownLogRecord(
        "torch.utils.cpp_extension",
        r"No CUDA runtime is found, using CUDA_HOME=",
        "a CUDA build of torch on a machine without a GPU (Megatron-Core imports cpp_extension); bridge "
        "compiles no extension there",
    ),
)


class _DropKnownRecords(logging.Filter):
    def __init__(self, patterns: list[re.Pattern]):
        super().__init__()
        self.patterns = patterns

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.match(message) for p in self.patterns)


def add_log_filters() -> None:
    """A filter on each listed logger dropping exactly its listed records; other records still show."""
    by_logger: dict[str, list[re.Pattern]] = {}
    for known in KNOWN_LOG_RECORDS:
        by_logger.setdefault(known.logger, []).append(re.compile(known.message))
    for name, patterns in by_logger.items():
        logging.getLogger(name).addFilter(_DropKnownRecords(patterns))


_lock = threading.Lock()
_installed: set[bool] = set()  # the `cpu` values installed so far


def filters_for(cpu: bool) -> list[KnownWarning]:
    return [w for w in KNOWN_WARNINGS if cpu or not w.cpu_only]


def add_filters(cpu: bool) -> None:
    """Put an "ignore" filter for each known warning (the CPU-only ones when `cpu`) in front of the
    existing filters; filters added later (a user's "error", say) still win."""
    for known in filters_for(cpu):
        warnings.filterwarnings(
            "ignore", message=known.message, category=known.category, module=known.module + r"\Z"
        )


def install(cpu: bool) -> None:
    """add_filters(cpu) and add_log_filters(), once per process (a second call would move the warning
    filters back in front)."""
    with _lock:
        if not _installed:
            add_log_filters()
        if cpu not in _installed:
            add_filters(cpu)
            _installed.add(cpu)
