"""4 ranks: strategy fsdp2 (PyTorch fully_shard) against strategy megatron, 3 iterations from the same
seed-initialised weights (tied embeddings, as Llama-3.2). Suite dp_tp: megatron DP=4 vs fsdp2
dp_shard=4, HSDP (dp_replicate=2, dp_shard=2), gradients reduced after every micro batch
(defer_fsdp_grad_sync=False) and CP=2 (sharded over dp_shard*cp); megatron TP=2+SP vs fsdp2 TP=2+SP
(dp_shard=2).
Suite pipeline: PP=2 (1f1b, dp_shard=2), TP=2 x PP=2 x VPP=2 (interleaved, dp_shard=1), and PP=2 with
full activation recompute. Each fsdp2
run also checks its DeviceMesh groups against Megatron-Core's live process groups. Suite moe: a 4-expert
MoE (top-2) with EP=1 (dp_shard=4), EP=2 (experts sharded over ep_shard=2; also with
moe_reshard_after_forward), EP=2 with HSDP 2x2
and TP=2+SP x EP=2 (ETP=1).
usage: fsdp2_equivalence.py WORKDIR SUITE[,SUITE...] (the runs of several suites in one launch)"""

from __future__ import annotations

import contextlib
import sys

from train_common import emit, reset_parallel_state, tiny_config, write_learnable_indexed_data

from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan
from bridge.config.yaml_io import merge_yaml

# NeMo AutoModel's `distributed:` section as the seeds write it (strategy fsdp2, HSDP 2 x 2 on 4 ranks)
SEED_YAML = """
distributed:
  strategy: fsdp2
  dp_size: none
  dp_replicate_size: 2
  tp_size: 1
  pp_size: 1
  cp_size: 1
  ep_size: 1
  sequence_parallel: false
  activation_checkpointing: false
  defer_fsdp_grad_sync: true
"""
FSDP_RESHARD: list[bool] = []  # per fully_shard'ed TransformerLayer of the last fsdp2 run


@contextlib.contextmanager
def counting_reduce_scatters():
    """Count FSDP2's gradient reduce-scatters (torch.distributed.reduce_scatter_single) and record the
    reshard_after_forward each TransformerLayer is sharded with."""
    import torch.distributed as dist
    from torch.distributed import fsdp  # bridge.training.strategies imports fully_shard from here per call

    calls = {"n": 0}
    original, original_shard = dist.reduce_scatter_single, fsdp.fully_shard
    FSDP_RESHARD.clear()

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    def recording_shard(module, **kwargs):
        from megatron.core.transformer.transformer_layer import TransformerLayer

        if isinstance(module, TransformerLayer):
            FSDP_RESHARD.append(bool(kwargs.get("reshard_after_forward", True)))
        return original_shard(module, **kwargs)

    dist.reduce_scatter_single, fsdp.fully_shard = counted, recording_shard
    try:
        yield calls
    finally:
        dist.reduce_scatter_single, fsdp.fully_shard = original, original_shard


def main(workdir: str, suite_names: list[str]) -> None:
    import torch

    from bridge.parallel import runtime
    from bridge.parallel.mesh import build_meshes, check_against_parallel_state
    from bridge.training import pretrain

    data = f"{workdir}/data/count"
    common = [
        "dataset.kind=indexed",
        f"dataset.data_paths=[{data}]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache",
        "train.train_iters=3",  # 3 steps: warm-up, then two steps at the decaying LR
        "optimizer.lr=0.003",
        "optimizer.min_lr=0.0003",
        "optimizer.clip_grad=0.5",  # small enough that clipping acts on some steps
    ]
    cfg = tiny_config(*common)
    runtime.initialize_distributed(run_layout(cfg, 4), seed=cfg.rng.seed)
    if torch.distributed.get_rank() == 0:
        write_learnable_indexed_data(data)
    torch.distributed.barrier()
    reset_parallel_state()

    fsdp2 = ["distributed.strategy=fsdp2", "optimizer.use_distributed_optimizer=False"]
    tp2 = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"]
    pp2 = ["model.pipeline_model_parallel_size=2"]
    vpp2 = [*tp2, *pp2, "model.virtual_pipeline_model_parallel_size=2"]
    suites = {
        "dp_tp": {
            "megatron_dp4": [],
            "fsdp2_dp4": fsdp2,
            "megatron_tp2": tp2,
            "fsdp2_tp2": [*fsdp2, *tp2],
            "fsdp2_dp4_sync_each_microbatch": [*fsdp2, "distributed.defer_fsdp_grad_sync=False"],
            "fsdp2_cp2": [*fsdp2, "model.context_parallel_size=2"],  # dp_shard 2 x cp 2: shards over 4
        },
        "pipeline": {
            "megatron_pp2": pp2,
            "fsdp2_pp2": [*fsdp2, *pp2],
            "megatron_tp2pp2vpp2": vpp2,
            "fsdp2_tp2pp2vpp2": [*fsdp2, *vpp2],
            "fsdp2_pp2_recompute": [*fsdp2, *pp2, "distributed.activation_checkpointing=True"],
        },
    }
    moe = ["model.num_moe_experts=4", "model.moe_ffn_hidden_size=64", "model.moe_router_topk=2"]
    suites["moe"] = {
        "megatron_moe_dp4": moe,
        "fsdp2_moe_dp4": [*fsdp2, *moe],
        "megatron_moe_ep2": [*moe, "model.expert_model_parallel_size=2"],
        "fsdp2_moe_ep2": [*fsdp2, *moe, "model.expert_model_parallel_size=2"],
        "fsdp2_moe_hsdp2x2_ep2_reshard": [
            *fsdp2,
            *moe,
            "model.expert_model_parallel_size=2",
            "distributed.dp_replicate_size=2",
            "distributed.moe_reshard_after_forward=True",
        ],
        "megatron_moe_pp2ep2": [*moe, *pp2, "model.expert_model_parallel_size=2"],
        "fsdp2_moe_pp2ep2": [*fsdp2, *moe, *pp2, "model.expert_model_parallel_size=2"],  # ep_shard = 1
        "megatron_moe_tp2ep2": [*moe, *tp2, "model.expert_model_parallel_size=2"],
        "fsdp2_moe_tp2ep2": [*fsdp2, *moe, *tp2, "model.expert_model_parallel_size=2"],
    }
    suites["dp_tp"]["fsdp2_automodel_yaml_hsdp"] = []  # HSDP 2 x 2 from the seeds' YAML (SEED_YAML)
    runs = {name: extra for suite in suite_names for name, extra in suites[suite].items()}
    for name, extra in runs.items():
        cfg = tiny_config(*common, *extra)
        if name == "fsdp2_automodel_yaml_hsdp":
            cfg, _ = merge_yaml(cfg, SEED_YAML, source="seed.yaml")
        plan = build_plan(cfg, 4, cuda=torch.cuda.is_available())
        with counting_reduce_scatters() as calls:
            result = pretrain(plan)
        record = {"run": name, "losses": result.losses, "grad_norms": result.grad_norms}
        if name.startswith("fsdp2"):
            check_against_parallel_state(build_meshes(plan.layout))
            record["mesh_ok"] = True
            record["reduce_scatters"] = calls["n"]
            record["layers_reshard_after_forward"] = sorted(set(FSDP_RESHARD))
        emit("run", record)
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
