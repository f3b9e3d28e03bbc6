"""Whole-checkpoint conversion in little memory: HF <-> torch_dist with one parameter in RAM at a time.

    stream_import("/path/to/hf", "/path/to/megatron")       # same checkpoint as AutoBridge.import_ckpt
    stream_export("/path/to/megatron", "/path/to/out")      # same files as AutoBridge.export_ckpt

The model is built on the meta device (shapes, dtypes, sharding; no data). The import hands
Megatron-Core's own dist_checkpointing.save a sharded save strategy whose planner produces each
tensor from the HF safetensors when torch DCP's writer asks for it (one write item at a time), so
common.pt, metadata.json and .metadata are Megatron-Core's and torch's own. The export feeds the
usual Exporter / ShardedWriter path with each parameter read alone from the checkpoint
(dist_checkpointing.load of a one-entry sharded state dict). Peak memory: about one tensor (two for
a gated MLP's fused weight) plus the libraries. One process only (TP = PP = 1).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
from torch.distributed.checkpoint.planner import LoadPlan, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from bridge.checkpoint import resolve_checkpoint, save_checkpoint
from bridge.checkpoint.atomic import atomic_dir, check_target_dir
from bridge.checkpoint.direct_save import DirectSaveStrategy
from bridge.checkpoint.paths import HF_ASSETS_DIR
from bridge.checkpoint.save_load import model_sharded_state_dict, read_common, verified_for_model
from bridge.conversion.auto_bridge import AutoBridge
from bridge.conversion.fsdp2_refusal import refuse_fsdp2_checkpoint
from bridge.conversion.hf_io import HFCheckpoint
from bridge.conversion.model_params import LocalParam, local_params
from bridge.conversion.saved_run import read_saved_run
from bridge.conversion.stacked_experts import open_checkpoint
from bridge.conversion.unmapped import left_out_mtp
from bridge.conversion.weight_loader import check_all_used, check_tensors, copy_pieces, non_finite
from bridge.errors import ConfigError
from bridge.parallel import ranks

_LOW_MEMORY = "--low-memory conversion (bridge.conversion.streaming)"


def _single_process(what: str) -> None:
    world = ranks.env_world_size()
    if world > 1:
        raise ConfigError(
            f"WORLD_SIZE={world}: the {_LOW_MEMORY} {what} runs in one process; run it with plain python "
            "(not torchrun), or drop --low-memory to convert with several ranks"
        )


def _meta_chunks(bridge: AutoBridge, run=None) -> list:
    provider = bridge.to_megatron_provider(load_weights=False)
    if run is not None and run.model is not None:  # the MTP layers the run trained (as export_ckpt)
        provider.mtp_num_layers = run.model.mtp_num_layers
    return provider.provide_distributed_model(
        wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False, meta_device=True
    )


def _owner(data: torch.Tensor, by_param: dict[int, LocalParam]) -> LocalParam | None:
    """The parameter a sharded-state-dict tensor is (or is a view of, e.g. half of a fused fc1)."""
    return by_param.get(id(data)) or (by_param.get(id(data._base)) if data._base is not None else None)


# ---------------------------------------------------------------------------------------------- import


class HFTensorSource:
    """Each ShardedTensor of the meta model's sharded state dict, computed from the HF safetensors."""

    def __init__(self, params: list[LocalParam], ckpt: HFCheckpoint, allow_non_finite: bool):
        self.ckpt = ckpt
        self.allow_non_finite = allow_non_finite
        self.by_param = {id(lp.param): lp for lp in params}
        # (key, global offset) -> (parameter, view of it: size, stride, storage offset)
        self.views: dict[tuple[str, tuple[int, ...]], tuple[LocalParam, tuple, tuple, int]] = {}
        self._cached: tuple[LocalParam, torch.Tensor] | None = None
        self.error: str | None = None

    def index(self, sharded_state_dict: dict) -> None:
        """Record where every ShardedTensor's data comes from (factories already applied)."""
        from megatron.core.dist_checkpointing.dict_utils import nested_values
        from megatron.core.dist_checkpointing.mapping import ShardedTensor

        for sh in nested_values(sharded_state_dict):
            if not isinstance(sh, ShardedTensor):
                continue  # ShardedObjects (_extra_state): Megatron writes them itself
            lp = _owner(sh.data, self.by_param)
            if lp is None:
                raise ConfigError(
                    f"checkpoint tensor {sh.key!r} (offset {tuple(sh.global_offset)}) is not a mapped model "
                    f"parameter, so the {_LOW_MEMORY} cannot compute it from the HF files; "
                    "convert without --low-memory"
                )
            d = sh.data
            self.views[(sh.key, tuple(sh.global_offset))] = (
                lp,
                tuple(d.shape),
                tuple(d.stride()),
                d.storage_offset() - lp.param.storage_offset(),
            )

    def tensor(self, key: str, offset: tuple[int, ...]) -> torch.Tensor:
        found = self.views.get((key, offset))
        if found is None:
            raise ConfigError(
                f"torch DCP asked for tensor {key!r} at offset {offset}, which is not in the model's sharded "
                f"state dict; the {_LOW_MEMORY} cannot produce it: convert without --low-memory"
            )
        lp, shape, stride, storage_offset = found
        full = self._parameter(lp)
        if shape == tuple(full.shape) and storage_offset == 0 and full.is_contiguous():
            self._cached = None  # the whole parameter: nothing else will need it
            return full
        return torch.as_strided(full, shape, stride, storage_offset).clone()

    def _parameter(self, lp: LocalParam) -> torch.Tensor:
        # The last parameter is kept: the halves of a fused gated-MLP weight come one after the other.
        if self._cached is not None and self._cached[0] is lp:
            return self._cached[1]

        self._cached = None
        out = torch.empty(lp.param.shape, dtype=lp.param.dtype)
        for dst, hf_name in copy_pieces(lp, out, self.ckpt):
            bad = None if self.allow_non_finite else non_finite(dst, hf_name, self.ckpt)
            if bad:
                self.error = bad
                raise ConfigError(bad)
        self._cached = (lp, out)
        return out

    def forget(self) -> None:
        """Drop the kept parameter (the write is over)."""
        self._cached = None


def _streaming_planner(source: HFTensorSource):
    from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner

    class StreamingSavePlanner(MCoreSavePlanner):
        """MCoreSavePlanner whose tensors come from `source` when the writer resolves them."""

        def __init__(self) -> None:
            super().__init__(dedup_replicated_tensors=False, flatten_state_dict=False)
            self._last: torch.Tensor | None = None

        def resolve_data(self, write_item):
            if write_item.type == WriteItemType.BYTE_IO:
                return super().resolve_data(write_item)
            # torch's writer keeps a reference to every tensor of a file until the file is done (its
            # safetensors path needs them); the previous one is written by now, so its memory goes.
            self.release()
            t = source.tensor(write_item.index.fqn, tuple(write_item.index.offset))
            self._last = t.view(write_item.tensor_data.chunk.sizes)  # PyT shards carry the layer axis
            return self._last

        def release(self) -> None:
            if self._last is not None:  # never the source's cached parameter (a clone, or uncached)
                self._last.untyped_storage().resize_(0)
            self._last = None

    return StreamingSavePlanner()


class _StreamingSaveStrategy(DirectSaveStrategy):
    """torch_dist, written serially (one thread, no copy-ahead: the serial loader resolves one write
    item at a time) from a lazy planner that reads each tensor from the HF checkpoint."""

    def __init__(self, source: HFTensorSource) -> None:
        super().__init__(thread_count=1, per_thread_copy_ahead=0)
        self.source = source
        self._planner: Any = None

    def planner(self):
        self._planner = _streaming_planner(self.source)
        return self._planner

    def save(self, sharded_state_dict, checkpoint_dir) -> None:
        self.source.index(sharded_state_dict)
        try:
            super().save(sharded_state_dict, checkpoint_dir)
        except BaseException:  # torch's CheckpointException is a BaseException
            if self.source.error:  # DCP wraps failures of the write; the cause is one clear error
                raise ConfigError(self.source.error) from None
            raise
        finally:
            if self._planner is not None:
                self._planner.release()
            self.source.forget()

    def async_save(self, *args: Any, **kwargs: Any):
        raise ConfigError(
            f"the {_LOW_MEMORY} saves synchronously; call dist_checkpointing.save without async_sharded_save"
        )


def stream_import(
    hf_path: str | os.PathLike,
    megatron_path: str | os.PathLike,
    allow_non_finite: bool = False,
    omit_unmapped: bool = False,
) -> None:
    """HF folder -> torch_dist checkpoint (iteration 0), as AutoBridge.import_ckpt, one tensor in RAM."""
    _single_process("import")
    bridge = AutoBridge.from_hf_pretrained(hf_path)
    target = check_target_dir(megatron_path, "megatron_path")
    ckpt = open_checkpoint(bridge.hf_path, bridge.family)
    chunks = _meta_chunks(bridge)
    params = list(local_params(chunks, bridge.family, bridge._vocab_size()))
    used = check_tensors(params, ckpt)  # every check of the import, before anything is written
    left_out = left_out_mtp(chunks, bridge.family, bridge.text_config, set(ckpt.tensors))
    check_all_used(chunks, ckpt, bridge.family, used, omit_unmapped, left_out)
    strategy = _StreamingSaveStrategy(HFTensorSource(params, ckpt, allow_non_finite))
    try:
        with atomic_dir(target, "megatron_path", all_ranks=True) as staging:
            save_checkpoint(staging, 0, chunks, save_rng=False, sharded_strategy=strategy)
            bridge._write_hf_assets(staging / HF_ASSETS_DIR)
    finally:
        ckpt.close()


# ---------------------------------------------------------------------------------------------- export


def _one_chunk_planner(fqn: str, offsets: tuple[int, ...], sizes: torch.Size):

    class OneChunkLoadPlanner(DefaultLoadPlanner):
        """Reads one chunk (`offsets`, `sizes`) of checkpoint tensor `fqn` into the state dict's tensor."""

        def create_local_plan(self) -> LoadPlan:
            md = self.metadata.state_dict_metadata.get(fqn)
            if md is None:
                raise ConfigError(
                    f"checkpoint tensor {fqn!r} is not in the checkpoint's .metadata; the checkpoint does not "
                    "belong to this model (export with the HF config it was imported with: --hf-config)"
                )
            chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=sizes)
            return LoadPlan(create_read_items_for_chunk_list(fqn, md, [chunk]))

        def lookup_tensor(self, index) -> torch.Tensor:
            return self.state_dict[index.fqn]  # the chunk itself; read items address it relative to it

    return OneChunkLoadPlanner()


class CheckpointTensorReader:
    """`local_tensor` for the Exporter: one parameter, read alone from a torch_dist checkpoint.

    Megatron-Core's own load of a one-entry state dict does not work in one process for a layer of a
    layer-stacked tensor (its PyT ShardedTensor then places the other layers on this rank too), so
    each ShardedTensor of the parameter is read with torch DCP and a one-chunk load plan."""

    def __init__(self, folder: Path, chunks: list):
        self.folder = folder
        self.entries: dict[int, Any] = {}  # id(parameter) -> its ShardedTensor / ShardedTensorFactory
        for sd in model_sharded_state_dict(chunks, "all").values():
            for entry in sd.values():
                data = getattr(entry, "data", None)
                if isinstance(data, torch.Tensor):
                    self.entries[id(data)] = entry

    def __call__(self, lp: LocalParam) -> torch.Tensor:
        from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory

        entry = self.entries.get(id(lp.param))
        if entry is None:
            raise ConfigError(
                f"Megatron parameter {lp.name} has no entry in the model's sharded state dict, so the "
                f"{_LOW_MEMORY} cannot read it; export without --low-memory"
            )
        real = dataclasses.replace(entry, data=torch.empty(lp.param.shape, dtype=lp.param.dtype))
        if isinstance(real, ShardedTensor):
            self._read(real)
            return real.data
        if not isinstance(real, ShardedTensorFactory):
            raise ConfigError(
                f"Megatron parameter {lp.name} is checkpointed as a {type(real).__name__}, which the "
                f"{_LOW_MEMORY} cannot read; export without --low-memory"
            )
        from megatron.core.dist_checkpointing.dict_utils import dict_list_map_inplace

        # a factory (e.g. a gated MLP's fc1 stored as two tensors): read its parts, merge as Megatron does
        parts = real.build()
        dict_list_map_inplace(lambda sh: self._read(sh) if isinstance(sh, ShardedTensor) else sh, parts)
        return real.merge_fn(
            dict_list_map_inplace(lambda sh: sh.data if isinstance(sh, ShardedTensor) else sh, parts)
        )

    def _read(self, sh) -> Any:

        local = sh.data.view((1,) * sh.prepend_axis_num + tuple(sh.local_shape))  # the PyT shard's shape
        planner = _one_chunk_planner(sh.key, tuple(sh.global_offset), local.shape)
        dcp.load({sh.key: local}, storage_reader=dcp.FileSystemReader(str(self.folder)), planner=planner)
        return sh


def _refuse_unsupported(folder: Path) -> None:
    content = read_common(folder).get("checkpoint_content", {})
    run = read_saved_run(folder)
    if content.get("adapters_only") or (run is not None and run.peft.scheme is not None):
        raise ConfigError(
            f"checkpoint {folder} holds PEFT adapters: the {_LOW_MEMORY} exports full torch_dist weights only. "
            "Fix: export it without --low-memory"
        )
    refuse_fsdp2_checkpoint(folder)  # not "without --low-memory": the plain export refuses it too


def stream_export(
    megatron_path: str | os.PathLike,
    hf_path: str | os.PathLike,
    max_shard_size: int | None = None,
    bridge: AutoBridge | None = None,
    omit_unmapped: bool = False,
) -> None:
    """torch_dist checkpoint -> HF folder, the same files as AutoBridge.export_ckpt, one tensor in RAM.

    `bridge`: the HF config to export with (default AutoBridge.from_megatron_checkpoint(megatron_path)).
    """
    _single_process("export")
    target = check_target_dir(hf_path, "hf_path")
    folder, _ = resolve_checkpoint(megatron_path)
    _refuse_unsupported(folder)
    bridge = bridge if bridge is not None else AutoBridge.from_megatron_checkpoint(megatron_path)
    chunks = _meta_chunks(bridge, read_saved_run(folder))
    try:
        folder = verified_for_model(megatron_path, chunks)
    except ConfigError as e:  # as export_ckpt: the config the model was built from is the usual culprit
        source = bridge.hf_path / "config.json" if bridge.hf_path is not None else "the given HF config"
        raise ConfigError(
            f"the model built from {source} does not match the checkpoint {megatron_path} ({e}); "
            "export with the HF config the checkpoint was imported or trained with (--hf-config)"
        ) from None
    exporter = bridge._exporter(
        chunks, local_tensor=CheckpointTensorReader(folder, chunks), omit_unmapped=omit_unmapped
    )
    bridge.write_hf_folder(exporter, target, max_shard_size)
