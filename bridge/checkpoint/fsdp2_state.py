"""The tensors of a strategy-fsdp2 checkpoint: parameters and optimizer state as torch DCP shards.

FSDP2 parameters are DTensors sharded over the (dp_replicate, dp_shard*cp) mesh; each one is a
Megatron-Core local tensor, i.e. one TP rank's slice of one pipeline stage's tensor. torch's
distributed checkpoint (DCP) saves a DTensor under one key by its global shape and, on load, reshards
it onto the mesh of the loading run: a checkpoint reloads under another data-parallel, context-parallel
or HSDP size. What makes a tensor unique beyond that mesh is in its key: the pipeline stage and TP rank
for dense tensors, the pipeline stage and EP rank for expert tensors (the same on every TP rank: fsdp2
runs experts with etp = 1), then the virtual-pipeline chunk and Megatron-Core's parameter name:

    model/pp0.tp1/chunk0/decoder.layers.0.self_attention.linear_qkv.weight
    optim/pp0.ep1/chunk0/decoder.layers.1.mlp.experts.linear_fc1.weight0/exp_avg

So TP, PP, EP and VPP must be the saving run's (`check_model_parallel_sizes`). Optimizer state is
each parameter's state tensors (Adam's step and moments, SGD's momentum); the hyperparameters come from
the run's config and the scheduler's state, as for the `megatron` strategy. Buffers are not saved
(GPTModel's are computed: RoPE frequencies).
"""

from __future__ import annotations

from pathlib import Path

import torch

from bridge.errors import ConfigError

DCP_DIR = "fsdp2"  # the DCP folder inside a checkpoint folder
MODEL_PARALLEL_SIZES = ("tp", "pp", "ep", "vpp")  # what the keys depend on


def is_fsdp2(model_chunks: list) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return bool(model_chunks) and isinstance(model_chunks[0], FSDPModule)


def _is_expert(param) -> bool:
    return not getattr(param, "allreduce", True)  # Megatron-Core's mark of expert-parallel weights


def _namespaces() -> tuple[str, str]:
    """(dense, expert) key prefixes of this rank."""
    from megatron.core import parallel_state as ps

    pp = ps.get_pipeline_model_parallel_rank()
    dense = f"pp{pp}.tp{ps.get_tensor_model_parallel_rank()}"
    expert = f"pp{pp}.ep{ps.get_expert_model_parallel_rank()}"
    return dense, expert


def _named_params(model_chunks: list) -> list[tuple[str, torch.nn.Parameter]]:
    dense, expert = _namespaces()
    out = []
    for i, chunk in enumerate(model_chunks):
        for name, p in chunk.named_parameters():
            out.append((f"{expert if _is_expert(p) else dense}/chunk{i}/{name}", p))
    return out


def current_sizes(model_chunks: list) -> dict[str, int | None]:
    """This run's parallel sizes, recorded with the checkpoint (the model-parallel ones must match)."""
    from megatron.core import parallel_state as ps

    return {
        "tp": ps.get_tensor_model_parallel_world_size(),
        "pp": ps.get_pipeline_model_parallel_world_size(),
        "ep": ps.get_expert_model_parallel_world_size(),
        "vpp": len(model_chunks) if len(model_chunks) > 1 else None,
        "cp": ps.get_context_parallel_world_size(),
        "dp": ps.get_data_parallel_world_size(),
    }


def check_model_parallel_sizes(target: Path, saved: dict, current: dict) -> None:
    """A ConfigError when the checkpoint's TP / PP / EP / VPP differ from this run's."""
    wrong = [
        f"{k} {saved.get(k)} -> {current.get(k)}"
        for k in MODEL_PARALLEL_SIZES
        if saved.get(k) != current.get(k)
    ]
    if wrong:
        have = " ".join(f"{k}={saved.get(k)}" for k in MODEL_PARALLEL_SIZES)
        raise ConfigError(
            f"checkpoint {target} was saved by strategy fsdp2 with {have}; this run changes {', '.join(wrong)}. "
            "An fsdp2 checkpoint reshards over data parallelism (dp, dp_replicate_size, cp) only: keep its "
            "model-parallel sizes, or start from its consolidated Hugging Face copy "
            "(checkpoint.save_consolidated=true) as checkpoint.pretrained_checkpoint"
        )


def state_dict(model_chunks: list, optimizer=None) -> dict:
    """The DCP state dict of the model's parameters (and the optimizer's per-parameter state)."""
    out: dict = {}
    for key, p in _named_params(model_chunks):
        out[f"model/{key}"] = p
        if optimizer is not None:
            for name, value in optimizer.optimizer.state.get(p, {}).items():
                out[f"optim/{key}/{name}"] = value
    return out


def save(folder: Path, model_chunks: list, optimizer=None) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save(state_dict(model_chunks, optimizer), checkpoint_id=str(folder / DCP_DIR))


def load(folder: Path, model_chunks: list, optimizer=None) -> None:
    """Load the parameters (and optimizer state) in place, resharded onto this run's data-parallel mesh.

    The optimizer's state tensors are created from the checkpoint's metadata (names, dtypes; DTensors
    laid out like their parameter) before DCP fills them, so any torch optimizer's state loads."""
    import torch.distributed.checkpoint as dcp

    path = str(folder / DCP_DIR)
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    sd: dict = {}
    for key, p in _named_params(model_chunks):
        if f"model/{key}" not in saved:
            raise ConfigError(
                f"checkpoint {folder} has no tensor model/{key}: it was saved from another model "
                "(architecture, number of layers or experts); load it into the model it was trained with"
            )
        sd[f"model/{key}"] = p
        if optimizer is None:
            continue
        state = {}
        prefix = f"optim/{key}/"
        for name, meta in saved.items():
            if name.startswith(prefix):
                shape = tuple(meta.size) if hasattr(meta, "size") else None
                if shape is None:  # a non-tensor value
                    continue
                like = torch.zeros_like(p.detach(), dtype=meta.properties.dtype)
                state[name[len(prefix) :]] = (
                    like if shape == tuple(p.shape) else torch.zeros(shape, dtype=meta.properties.dtype)
                )
        for name, tensor in state.items():
            sd[prefix + name] = tensor
        if state:
            optimizer.optimizer.state[p] = state
    with torch.no_grad():
        dcp.load(sd, checkpoint_id=path)
