"""AutoBridge: Hugging Face checkpoints in and out of Megatron-Core models (Megatron-Bridge's API).

    bridge = AutoBridge.from_hf_pretrained("/path/to/hf")
    provider = bridge.to_megatron_provider()           # GPTModelProvider filled from config.json
    provider.tensor_model_parallel_size = 2
    model = provider.provide_distributed_model()       # this rank's chunks, holding the HF weights
    bridge.save_hf_pretrained(model, "/path/to/out")   # gathered back; tensors bit-identical

    AutoBridge.import_ckpt("/path/to/hf", "/path/to/megatron")      # HF -> torch_dist checkpoint
    AutoBridge.from_hf_pretrained("/path/to/hf").export_ckpt("/path/to/megatron", "/path/to/out")

Works in one process and under torchrun (every rank calls the same methods).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bridge.checkpoint import CheckpointDamaged, load_checkpoint, resolve_checkpoint, save_checkpoint
from bridge.checkpoint.atomic import atomic_dir, check_target_dir
from bridge.checkpoint.paths import (
    HF_ASSETS_DIR,  # import_ckpt writes it, export_ckpt reads it
    is_hf_folder,
)
from bridge.conversion import registry
from bridge.conversion.foreign_export import bridge_for_foreign
from bridge.conversion.fsdp2_refusal import refuse_fsdp2_checkpoint
from bridge.conversion.hf_adapter import save_hf_adapter
from bridge.conversion.hf_io import DTYPES, HFCheckpoint, OutTensor, ShardedWriter
from bridge.conversion.hf_module_names import module_name_renamer
from bridge.conversion.peft_merge import merged_local_tensor
from bridge.conversion.progress import progress_bar
from bridge.conversion.saved_run import read_saved_run
from bridge.conversion.stacked_experts import open_checkpoint, stacked_exporter, written_name
from bridge.conversion.unmapped import complete_export, left_out_mtp
from bridge.conversion.vlm_config import split as split_vlm_config
from bridge.conversion.weight_exporter import Exporter
from bridge.conversion.weight_loader import load_hf_weights
from bridge.errors import ConfigError
from bridge.models.dtypes import DTYPES as TRAINING_DTYPES
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hf_translation import common as hf_common
from bridge.models.hf_translation import read as hf_read
from bridge.models.hf_translation import registry as hf_registry
from bridge.models.hf_translation import vlm as hf_vlm
from bridge.models.hf_translation import write as hf_write
from bridge.models.provider_kinds import provider_class
from bridge.parallel import ranks
from bridge.parallel.megatron_import import import_megatron
from bridge.parallel.runtime import quiet_known_warnings
from bridge.peft import apply_peft
from bridge.peft.apply import has_adapters

quiet_known_warnings()  # before conversion first imports Megatron-Core (some of its warnings fire on import)

# Non-weight files of an HF folder that an export carries over unchanged.
ASSET_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "processor_config.json",  # a vision-language model's processor (image processor settings)
    "preprocessor_config.json",
)
SOURCE_TENSORS = "source_tensors.json"  # HF name -> [file, dtype, shape] of the source checkpoint


def _config_get(config: Any, name: str, default: Any = None) -> Any:
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def _set_conversion_layout(provider: GPTModelProvider, provider_fields: dict[str, Any]) -> None:
    """The layout a conversion runs with (import_ckpt / export_ckpt: --tp, --pp, --ep). A MoE model at
    TP > 1 gets sequence parallelism, which Megatron-Core requires there, unless the caller sets it: a
    conversion moves weights and runs no forward, and sequence parallelism shards activations only (no
    weight, no checkpoint tensor), so the result is the same and `export --tp 2` works for every MoE
    checkpoint, whatever its run used (issue 42)."""
    for name, value in provider_fields.items():
        setattr(provider, name, value)
    if (
        "sequence_parallel" not in provider_fields
        and provider.num_moe_experts
        and (provider.tensor_model_parallel_size or 1) > 1
    ):
        provider.sequence_parallel = True


class AutoBridge:
    """Conversion between one Hugging Face architecture and Megatron-Core GPTModel chunks."""

    def __init__(self, hf_config: Any, hf_path: str | os.PathLike | None = None):
        self.hf_config = hf_config
        self.hf_path = Path(hf_path) if hf_path is not None else None
        self.family = registry.family_for(_config_get(hf_config, "architectures"))
        # The language model's config (a vision-language checkpoint's text part) and its family.
        self.text_config, text_family, vlm_config = hf_config, self.family, None
        if self.family.text_config_key is not None:
            vlm_fields = hf_vlm.vlm_fields(hf_config, self.family)
            self.family, self.text_config, text_family, vlm_config = split_vlm_config(hf_config, self.family)
        # Validate the translation now: a config we cannot express fails here, not at build time.
        self._provider_fields = hf_read.provider_fields(self.text_config, text_family)
        if vlm_config is not None:
            self._provider_fields |= vlm_fields
            self._provider_fields["vlm_config"] = vlm_config

    # ---- construction ---------------------------------------------------------------------------

    @classmethod
    def from_hf_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> AutoBridge:
        """A local HF folder (config.json + safetensors), or a Hub model id ("org/name") that is not a
        local path: its snapshot in the local Hugging Face cache (offline), else downloaded (`hub_snapshot`).
        kwargs go to transformers' AutoConfig.

        config.json is read as JSON completed with the transformers class defaults of its model type
        (each family folder's hf_config.CLASS_DEFAULTS); transformers is imported only with kwargs or
        for a model type not listed there.
        """
        folder = Path(path)
        if not folder.exists() and HUB_REPO_ID.fullmatch(str(path)):
            folder = hub_snapshot(str(path))
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"hf_path={str(path)!r} has no config.json; point it at a folder written by "
                "save_pretrained, or give a Hub model id (org/name)"
            )
        config = hf_common.read_config_json(folder / "config.json")  # a malformed file is one clear error
        merged = None if kwargs else hf_registry.with_class_defaults(config)
        if merged is not None:  # the JSON with transformers' class defaults: no transformers import
            return cls(merged, hf_path=folder)
        from transformers import AutoConfig

        return cls(AutoConfig.from_pretrained(str(folder), **kwargs), hf_path=folder)

    @classmethod
    def from_hf_config(cls, config: Any) -> AutoBridge:
        """From a transformers PretrainedConfig (or its dict): no weights attached."""
        return cls(config)

    @classmethod
    def from_provider(cls, provider: GPTModelProvider, architecture: str) -> AutoBridge:
        """For a model trained from scratch: the config.json of `provider` as `architecture`.

        Raises ConfigError when the architecture cannot express a math field of the provider.
        """
        config = hf_write.hf_config_dict(provider, registry.family_for([architecture]), architecture)
        return cls(config)

    @classmethod
    def supports(cls, config: Any) -> bool:
        archs = _config_get(config, "architectures") or ()
        return any(a in registry.families() for a in archs)

    @classmethod
    def list_supported_models(cls) -> list[str]:
        return registry.supported_architectures()

    # ---- provider ---------------------------------------------------------------------------------

    def to_megatron_provider(
        self,
        load_weights: bool = True,
        hf_path: str | os.PathLike | None = None,
        allow_non_finite: bool = False,
        omit_unmapped: bool = False,
    ) -> GPTModelProvider:
        """A GPTModelProvider with every math-relevant field from the HF config.

        With load_weights, the provider's provide_distributed_model() returns chunks holding the HF
        weights (from `hf_path`, default the folder this bridge was made from). A checkpoint tensor no
        parameter maps is an error unless `omit_unmapped` (then listed in the log).
        """
        import_megatron()  # before the provider builds a model
        if not load_weights:
            return self._new_provider()
        source = self._weights_path(hf_path)
        bridge = AutoBridge(self.hf_config, hf_path=source) if source != self.hf_path else self
        provider = self._new_provider()
        hook = bridge.load_hf_weights
        if allow_non_finite or omit_unmapped:
            hook = functools.partial(
                bridge.load_hf_weights, allow_non_finite=allow_non_finite, omit_unmapped=omit_unmapped
            )
        provider.register_post_build_hook(hook, replaces_weights=True)
        return provider

    def _weights_path(self, hf_path: str | os.PathLike | None) -> Path:
        path = Path(hf_path) if hf_path is not None else self.hf_path
        if path is None:
            raise ConfigError(
                "hf_path=None: this bridge was made from a config alone, so it has no weights; "
                "pass hf_path=<folder with safetensors> or use load_weights=False"
            )
        return path

    # ---- weights ----------------------------------------------------------------------------------

    def load_hf_weights(
        self,
        model: list,
        hf_path: str | os.PathLike | None = None,
        progress: bool = True,
        allow_non_finite: bool = False,
        omit_unmapped: bool = False,
    ) -> list[str]:
        """Copy the HF safetensors into this rank's model chunks (checks everything first); returns the
        checkpoint tensors left out of the model (each one logged).

        A NaN / Inf in a weight is a ConfigError naming the tensor and file unless allow_non_finite; a
        checkpoint tensor no parameter maps is a ConfigError naming them unless omit_unmapped.
        """
        ckpt = open_checkpoint(self._weights_path(hf_path), self.family)
        chunks = _as_list(model)
        return load_hf_weights(
            chunks,
            ckpt,
            self.family,
            self._vocab_size(),
            progress=progress,
            allow_non_finite=allow_non_finite,
            omit_unmapped=omit_unmapped,
            left_out=left_out_mtp(chunks, self.family, self.text_config, set(ckpt.tensors)),
        )

    def export_hf_weights(self, model: list, cpu: bool = True) -> Iterator[tuple[str, Any]]:
        """Yield (hf_name, tensor) for the whole model on every rank, gathered across TP/PP/EP."""
        exporter = self._exporter(_as_list(model))
        for name, tensor in exporter.iterate(dst=None):
            yield name, (tensor.cpu() if cpu else tensor)

    def save_hf_pretrained(
        self,
        model: list,
        path: str | os.PathLike,
        max_shard_size: int | None = None,
        progress: bool = True,
        omit_unmapped: bool = False,
    ) -> None:
        """Write an HF folder: config + tokenizer files from the source, safetensors shards (+ index).

        Dtypes are the source checkpoint's; shards follow the source's file layout when the tensor
        names match, else `max_shard_size` bytes (default: one file up to 5 GB, as transformers).
        Written to a hidden folder renamed onto `path` when complete; rank 0 writes.
        With PEFT adapters (bridge.peft) the weights are merged: W + s·BA (DoRA: m / ||W + s·BA||_row ·
        (W + s·BA)), one merged copy per weight while it is written; the model itself is not changed.
        Every tensor of the source checkpoint is written: one no parameter holds is carried unchanged from
        the source folder, else an error unless omit_unmapped (bridge.conversion.unmapped).
        """
        target = check_target_dir(path, "path")  # every rank: all raise together
        exporter = self._exporter(_as_list(model), merge_adapters=True, omit_unmapped=omit_unmapped)
        if not ranks.is_rank_zero():
            for _ in exporter.iterate(dst=0):
                pass
            ranks.barrier()
            return
        self.write_hf_folder(exporter, target, max_shard_size, progress)
        ranks.barrier()

    def write_hf_folder(
        self, exporter: Any, target: Path, max_shard_size: int | None = None, progress: bool = True
    ) -> None:
        """Rank 0's part of save_hf_pretrained: `exporter`'s tensors (a weight_exporter.Exporter) as
        safetensors shards, with the assets, published atomically at `target`."""
        tensors = [OutTensor(n, s, d) for n, s, d in exporter.hf_tensors()]
        assignment = {n: f for n, (f, *_) in self._source_tensors().items()} or None
        max_bytes = max_shard_size if max_shard_size is not None else 5 * 1024**3
        bar = progress_bar(len(tensors), "writing HF weights", "tensor", enabled=progress)
        with atomic_dir(target, "path") as staging:
            writer = ShardedWriter(
                staging, tensors, max_bytes, assignment if max_shard_size is None else None
            )
            try:
                for name, tensor in exporter.iterate(dst=0):
                    writer.write(name, tensor)
                    bar.update(1)
            except BaseException:
                writer.abort()
                raise
            writer.close()
            self._write_assets(staging)
        bar.close()

    def save_hf_adapter(self, model: list, path: str | os.PathLike) -> None:
        """Write the model's PEFT adapters as an HF PEFT folder (adapter_config.json +
        adapter_model.safetensors, peft's names), for peft.PeftModel.from_pretrained on the HF base.

        Gathered across TP / PP; every rank calls it, rank 0 writes (atomically, as save_hf_pretrained).
        """
        base = str(self.hf_path) if self.hf_path is not None else None
        names = module_name_renamer(self.hf_config, self.hf_path) if ranks.is_rank_zero() else None
        save_hf_adapter(
            _as_list(model), path, self.family, self._vocab_size(), base_model=base, module_name=names
        )

    # ---- whole checkpoints (torch_dist) ------------------------------------------------------------

    @classmethod
    def import_ckpt(
        cls,
        hf_path: str | os.PathLike,
        megatron_path: str | os.PathLike,
        allow_non_finite: bool = False,
        omit_unmapped: bool = False,
        **provider_fields: Any,
    ) -> None:
        """HF folder -> Megatron torch_dist checkpoint (iteration 0) at `megatron_path`.

        provider_fields (e.g. tensor_model_parallel_size=2) set the layout the conversion runs with;
        the checkpoint itself loads under any layout. A checkpoint tensor no parameter maps is an error
        unless omit_unmapped (then listed; an export carries it back from the source folder).
        """
        bridge = cls.from_hf_pretrained(hf_path)
        target = check_target_dir(megatron_path, "megatron_path")
        provider = bridge.to_megatron_provider(
            load_weights=True, allow_non_finite=allow_non_finite, omit_unmapped=omit_unmapped
        )
        _set_conversion_layout(provider, provider_fields)
        chunks = provider.provide_distributed_model(
            wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False
        )
        from bridge.checkpoint.direct_save import DirectSaveStrategy

        with atomic_dir(target, "megatron_path", all_ranks=True) as staging:
            # written by this process's threads: Megatron-Core's forked writers are for saves beside training
            save_checkpoint(staging, 0, chunks, save_rng=False, sharded_strategy=DirectSaveStrategy())
            if ranks.is_rank_zero():
                bridge._write_hf_assets(staging / HF_ASSETS_DIR)

    def export_ckpt(
        self,
        megatron_path: str | os.PathLike,
        hf_path: str | os.PathLike,
        max_shard_size: int | None = None,
        adapter_only: bool = False,
        omit_unmapped: bool = False,
        **provider_fields: Any,
    ) -> None:
        """Megatron torch_dist checkpoint -> HF folder with this bridge's config and source layout.

        A PEFT run's checkpoint (adapters only) is exported on its base (the run's
        checkpoint.pretrained_checkpoint, from the run_config.yaml saved with it): merged weights by
        default, or with `adapter_only` a Hugging Face PEFT adapter folder.
        """
        import_megatron()  # before reading the checkpoint imports Megatron-Core: torch.compile deferred
        target = check_target_dir(hf_path, "hf_path")
        folder, _ = resolve_checkpoint(
            megatron_path
        )  # a missing / incomplete checkpoint fails before building
        refuse_fsdp2_checkpoint(folder)
        run = read_saved_run(folder)
        peft = run.peft if run is not None and run.peft.scheme is not None else None
        if adapter_only and peft is None:
            raise ConfigError(
                f"--adapter-only: checkpoint {folder} holds no PEFT adapters (its run had peft.scheme=null); "
                "export it without --adapter-only"
            )
        provider = self._new_provider()
        if run is not None and run.model is not None:
            # the MTP layers the run trained (a training choice: e.g. a finetune with mtp_num_layers=0,
            # whose export carries the source's MTP layers back unchanged)
            provider.mtp_num_layers = run.model.mtp_num_layers
        _set_conversion_layout(provider, provider_fields)
        base = run.pretrained_checkpoint if peft is not None else None
        if peft is not None:
            if not base or not os.path.exists(base):
                raise ConfigError(
                    f"checkpoint {folder} holds PEFT adapters whose base (checkpoint.pretrained_checkpoint="
                    f"{base!r} in its run_config.yaml) is not there; restore that folder to export"
                )
            if is_hf_folder(base):
                provider.register_post_build_hook(
                    AutoBridge.from_hf_pretrained(base).load_hf_weights, replaces_weights=True
                )
                base = None  # loaded at build
            provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=run.seed))
        chunks = provider.provide_distributed_model(  # every weight comes from the checkpoint (strict load)
            wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False
        )
        try:
            if base is not None:  # a torch_dist base: its weights, then the adapters
                load_checkpoint(base, chunks, load_rng=False, strict=True)
            load_checkpoint(megatron_path, chunks, load_rng=False, strict=True)
        except CheckpointDamaged:  # the files, not the config: its message names them and the fix
            raise
        except ConfigError as e:  # name the config the model was built from: it is the usual culprit
            source = self.hf_path / "config.json" if self.hf_path is not None else "the given HF config"
            raise ConfigError(
                f"the model built from {source} does not match the checkpoint {megatron_path} ({e}); "
                "export with the HF config the checkpoint was imported or trained with (--hf-config)"
            ) from None
        if adapter_only:
            self.save_hf_adapter(chunks, target)
        else:
            self.save_hf_pretrained(
                chunks, target, max_shard_size=max_shard_size, omit_unmapped=omit_unmapped
            )

    @classmethod
    def from_megatron_checkpoint(cls, megatron_path: str | os.PathLike) -> AutoBridge:
        """The bridge recorded by import_ckpt in `<megatron_path>/hf_assets`; for a training run's
        checkpoints, its checkpoint.hf_architecture (config.json generated from the saved run config's
        model), else that of the run's checkpoint.pretrained_checkpoint (its run_config.yaml)."""
        assets = Path(megatron_path) / HF_ASSETS_DIR
        if (assets / "config.json").is_file():
            return cls.from_hf_pretrained(assets)
        if (
            theirs := bridge_for_foreign(megatron_path, cls.from_provider)
        ) is not None:  # Megatron-LM's / Megatron-Bridge's
            return theirs
        run = _run_of(megatron_path)
        if run is not None and run.hf_architecture and run.model is not None:
            return cls.from_provider(run.model, run.hf_architecture)
        start = run.pretrained_checkpoint if run is not None else None
        if start is not None:
            if is_hf_folder(start):
                return cls.from_hf_pretrained(start)
            if (Path(start) / HF_ASSETS_DIR / "config.json").is_file():
                return cls.from_hf_pretrained(Path(start) / HF_ASSETS_DIR)
        raise ConfigError(
            f"megatron_path={str(megatron_path)!r} has no {HF_ASSETS_DIR}/config.json (it was not "
            "written by import_ckpt, nor trained from a Hugging Face folder or an imported checkpoint, and its "
            "run set no checkpoint.hf_architecture); pass the HF config folder explicitly (--hf-config)"
        )

    # ---- helpers -----------------------------------------------------------------------------------

    def _vocab_size(self) -> int:
        return int(_config_get(self.text_config, "vocab_size"))

    def _new_provider(self) -> GPTModelProvider:
        """The provider of this checkpoint: a VLMModelProvider for a vision-language one."""
        kind = "vlm" if "vlm_config" in self._provider_fields else self.family.provider_kind
        return provider_class(kind)(**self._provider_fields)

    def _exporter(
        self,
        chunks: list,
        merge_adapters: bool = False,
        local_tensor: Any = None,
        omit_unmapped: bool = False,
    ):
        sources = self._source_tensors()
        source = {n: DTYPES[d] for n, (_, d, _) in sources.items()}
        default = DTYPES[TRAINING_DTYPES[hf_common.hf_dtype_name(self.hf_config)].safetensors]

        def dtype_for(name: str, _param_dtype) -> Any:
            return source.get(written_name(self.family, name), default)

        given, local_tensor = local_tensor, None
        if _has_dtensor_params(chunks):  # strategy fsdp2: each holder gathers its data-parallel shards
            local_tensor = _full_tensor
        if merge_adapters:
            if has_adapters(chunks):
                local_tensor = merged_local_tensor(chunks)
        if given is not None:  # the caller's source of each parameter's tensor (a streaming export)
            local_tensor = given
        exporter = Exporter(chunks, self.family, self._vocab_size(), dtype_for, local_tensor=local_tensor)
        exporter = stacked_exporter(exporter, self.family, {n: s for n, (_, _, s) in sources.items() if s})
        return complete_export(exporter, chunks, self.family, sources, self.hf_path, omit_unmapped)

    def _source_tensors(self) -> dict[str, tuple[str, str, tuple[int, ...] | None]]:
        """HF name -> (file, safetensors dtype, shape) of the source checkpoint, if there is one (shape None
        in a record written before bridge recorded it)."""
        if self.hf_path is None:
            return {}
        recorded = self.hf_path / SOURCE_TENSORS
        if recorded.is_file():
            return {
                k: (v[0], v[1], tuple(v[2]) if len(v) > 2 else None)
                for k, v in json.loads(recorded.read_text()).items()
            }
        try:
            ckpt = HFCheckpoint(self.hf_path)
        except ConfigError:
            return {}
        return {n: (i.file, i.dtype, tuple(i.shape)) for n, i in ckpt.tensors.items()}

    def _write_assets(self, folder: Path) -> None:
        copied = False
        if self.hf_path is not None:
            for name in ASSET_FILES:
                src = self.hf_path / name
                if src.is_file():
                    shutil.copy2(src, folder / name)
                    copied |= name == "config.json"
        if not copied:
            if isinstance(self.hf_config, dict):
                (folder / "config.json").write_text(json.dumps(self.hf_config, indent=2) + "\n")
            else:
                self.hf_config.to_json_file(str(folder / "config.json"))

    def _write_hf_assets(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._write_assets(folder)
        tensors = self._source_tensors()
        (folder / SOURCE_TENSORS).write_text(
            json.dumps({k: list(v) for k, v in sorted(tensors.items())}, indent=1)
        )


def _run_of(megatron_path: str | os.PathLike):
    """The run config saved with the checkpoint at `megatron_path` (None: not a training run's)."""
    try:
        folder, _ = resolve_checkpoint(megatron_path)
    except ConfigError:
        return None
    return read_saved_run(folder)


HUB_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# what a checkpoint folder needs: config, weights (+ index), tokenizer files, chat template
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def hub_snapshot(repo_id: str) -> Path:
    """The local folder of Hub model `repo_id`: the cached snapshot of its main revision, or (unless
    HF_HUB_OFFLINE is set) a download of its config, safetensors and tokenizer files into the cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConfigError(
            f"hf_path={repo_id!r} is not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE "
            "is set. Fix: download it first (huggingface-cli download REPO), or give a local folder"
        )
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except Exception as err:  # noqa: BLE001 - network, auth, missing repo: one message
        raise ConfigError(
            f"hf_path={repo_id!r} is not a local folder or a cached model, and downloading it failed "
            f"({type(err).__name__}: {err}). Fix: check the model id and your access, or give a local folder"
        ) from None


def _has_dtensor_params(chunks: list) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for c in chunks for p in c.parameters())


def _full_tensor(lp) -> Any:
    """The Megatron-Core local tensor of an FSDP2 parameter (a collective over its dp mesh, which is
    what the exporter's holders of one parameter are)."""
    return lp.param.detach().full_tensor()


def _as_list(model: Any) -> list:
    return list(model) if isinstance(model, (list, tuple)) else [model]
