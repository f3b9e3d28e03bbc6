"""Worker for tests/functional/test_peft_experts_ep.py (torchrun, 2 gloo ranks).

    peft_experts_ep.py ROOT

ROOT/hf holds a tiny Qwen3-MoE (every layer MoE, 4 experts). For ep1 (2 data-parallel replicas holding
every expert) and ep2 (expert parallelism 2: each rank 2 experts; data parallel 2 for the rest), LoRA on
all four targets (linear_fc1 / linear_fc2: every routed expert) is trained 3 SGD steps on the same batches
(peft_parallel's step); rank 0 saves ROOT/out/<layout>.pt (initial adapters, losses, adapter gradients and
final adapters in peft's names), the HF adapter folder and the merged folder. ep2 also saves its adapters
with dist_checkpointing, which `load_ep1` loads into an ep1 model seeded otherwise.
"""

from __future__ import annotations

import functools
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.functional.workers.peft_parallel import (  # noqa: E402
    START,
    STEPS,
    adapters,
    batches,
    checkpoint_dict,
    sgd,
    step_loss,
)

LAYOUTS = {"ep1": {}, "ep2": {"expert_model_parallel_size": 2}}


def build(root: Path, layout: str, seed: int):
    from bridge import AutoBridge
    from bridge.config.sections import PeftConfig
    from bridge.peft import apply_peft

    bridge = AutoBridge.from_hf_pretrained(root / "hf")
    provider = bridge.to_megatron_provider(load_weights=True)
    for k, v in LAYOUTS[layout].items():
        setattr(provider, k, v)
    peft = PeftConfig(scheme="lora", dim=4, alpha=8.0)
    provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=seed))
    ddp = dict(use_distributed_optimizer=False, grad_reduce_in_fp32=True, overlap_grad_reduce=False)
    chunks = provider.provide_distributed_model(wrap_with_ddp=True, ddp_config=ddp)
    from megatron.core.distributed import finalize_model_grads

    config = chunks[0].config
    config.no_sync_func, config.grad_sync_func = chunks[0].no_sync, None
    config.finalize_model_grads_func = finalize_model_grads
    return bridge, chunks


def train(root: Path, layout: str) -> None:
    from megatron.core import dist_checkpointing

    bridge, chunks = build(root, layout, seed=11)
    record = {"initial": adapters(bridge, chunks), "losses": [], "grads": []}
    data = batches(2)
    for _ in range(STEPS):
        record["losses"].append(step_loss(chunks, data))
        record["grads"].append(adapters(bridge, chunks, grads=True))
        sgd(chunks)
    record["final"] = adapters(bridge, chunks)
    bridge.save_hf_adapter(chunks, root / "out" / layout / "adapter")
    bridge.save_hf_pretrained(chunks, root / "out" / layout / "merged", progress=False)
    if layout == "ep2":
        folder = root / "out" / "ckpt_ep2"
        if dist.get_rank() == 0:
            folder.mkdir(parents=True)
        dist.barrier()
        dist_checkpointing.save(checkpoint_dict(chunks), str(folder))
    if dist.get_rank() == 0:
        torch.save(record, root / "out" / f"{layout}.pt")
        print(
            f"RESULT {layout} losses={record['losses']} (at {time.perf_counter() - START:.1f} s)", flush=True
        )


def load_ep1(root: Path) -> None:
    from megatron.core import dist_checkpointing

    bridge, chunks = build(root, "ep1", seed=99)  # other initial adapters than the saved ones
    loaded = dist_checkpointing.load(checkpoint_dict(chunks), str(root / "out" / "ckpt_ep2"))
    result = chunks[0].module.load_state_dict(loaded["model"], strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    after = adapters(bridge, chunks)
    if dist.get_rank() == 0:
        torch.save({"after": after}, root / "out" / "load_ep1.pt")
        print(f"RESULT load_ep1 (at {time.perf_counter() - START:.1f} s)", flush=True)


def main() -> None:
    from bridge.parallel.teardown import release_model_parallel_groups

    root = Path(sys.argv[1])
    dist.init_process_group("gloo")
    for layout in LAYOUTS:
        train(root, layout)
        release_model_parallel_groups()
    load_ep1(root)
    release_model_parallel_groups()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
