"""Worker for tests/functional/test_peft_parallel.py (torchrun, 2 gloo ranks).

    peft_parallel.py ROOT

ROOT/hf holds a tiny HF Llama. For each layout (tp1: TP=1 with 2 data-parallel replicas of one batch;
tp2; tp2_sp: TP=2 + sequence parallel; pp2: PP=2, 1F1B over 2 microbatches) and scheme (lora, dora):
build the model with the HF weights and apply_peft as a post-build hook, wrap it in Megatron-Core DDP
and run 3 SGD steps on a fixed batch with Megatron-Core's forward_backward schedule. Rank 0 saves to
ROOT/out/<layout>_<scheme>.pt the initial adapters, and per step the loss and the adapter gradients
(gathered over TP / PP into peft's names), then writes the HF adapter folder and the merged HF folder.

Multi-latent attention: the phases mla_tp1 and mla_tp2_sp do the same on ROOT/hf_mla (a tiny DeepSeek-V3:
MLA with query compression, MoE layers, so TP=2 needs sequence parallelism) with adapters on every attention
projection (linear_q_down_proj, linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj, linear_proj), and
also save bridge's logits of tokens() with the trained adapters (gathered over TP).

Checkpoints: tp2_sp/dora and pp2/lora also save their final adapters with dist_checkpointing; the
phases load_tp1 (from tp2_sp/dora) and load_tp2 (from pp2/lora) load them into a model of another
layout whose adapters were seeded differently, and save the adapters they then hold.

Then the hybrids (ROOT/hf_nemotron_h, ROOT/hf_qwen3_5): adapters on Mamba-2 mixers and Gated DeltaNet at TP=2
and their checkpoint loaded at TP=1 (tests/functional/workers/peft_hybrid.py's tp2_phases).
"""

from __future__ import annotations

import functools
import sys
import time
import warnings
from pathlib import Path

START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.functional.workers.convert_models import VOCAB  # noqa: E402

SEQ, MICRO_BATCH, STEPS, LR = 16, 2, 3, 0.5
LAYOUTS = {
    "tp1": dict(),
    "tp2": dict(tensor_model_parallel_size=2),
    "tp2_sp": dict(tensor_model_parallel_size=2, sequence_parallel=True),
    "pp2": dict(pipeline_model_parallel_size=2),
    "mla_tp1": dict(),
    "mla_tp2_sp": dict(tensor_model_parallel_size=2, sequence_parallel=True),
}
SAVES = {("tp2_sp", "dora"): "ckpt_dora", ("pp2", "lora"): "ckpt_lora"}
LOADS = {"load_tp1": ("tp1", "dora", "ckpt_dora"), "load_tp2": ("tp2", "lora", "ckpt_lora")}


def peft_config(scheme: str, layout: str):
    from bridge.config.finetune_rules import mla_attention_targets
    from bridge.config.sections import PeftConfig

    if layout.startswith("mla_"):  # the tiny DeepSeek-V3 compresses its query (q_lora_rank 24)
        return PeftConfig(scheme=scheme, dim=4, alpha=8.0, target_modules=mla_attention_targets(24))
    return PeftConfig(scheme=scheme, dim=4, alpha=8.0)


def build(root: Path, layout: str, scheme: str, seed: int):
    from bridge import AutoBridge
    from bridge.peft import apply_peft

    bridge = AutoBridge.from_hf_pretrained(root / ("hf_mla" if layout.startswith("mla_") else "hf"))
    provider = bridge.to_megatron_provider(load_weights=True)
    for k, v in LAYOUTS[layout].items():
        setattr(provider, k, v)
    peft = peft_config(scheme, layout)
    provider.register_post_build_hook(functools.partial(apply_peft, peft=peft, seed=seed))
    ddp = dict(use_distributed_optimizer=False, grad_reduce_in_fp32=True, overlap_grad_reduce=False)
    chunks = provider.provide_distributed_model(wrap_with_ddp=True, ddp_config=ddp)
    from megatron.core.distributed import finalize_model_grads

    config = chunks[0].config
    config.no_sync_func, config.grad_sync_func = chunks[0].no_sync, None
    config.finalize_model_grads_func = finalize_model_grads
    return bridge, chunks


def batches(n: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        t = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ + 1), generator=gen)
        pos = torch.arange(SEQ).expand(MICRO_BATCH, SEQ).contiguous()
        out.append({"tokens": t[:, :-1].contiguous(), "labels": t[:, 1:].contiguous(), "position_ids": pos})
    return out


def forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"loss": loss.detach().clone()}

    return output, loss_func


def step_loss(chunks, data) -> float:
    """One forward/backward over the microbatches; the mean loss, on every rank."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    for c in chunks:
        c.zero_grad_buffer()
    out = get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=iter(data), model=chunks, num_microbatches=len(data),
        seq_length=SEQ, micro_batch_size=MICRO_BATCH, forward_only=False,
    )  # fmt: skip
    mine = torch.tensor(sum(float(o["loss"]) for o in out) / len(data) if out else float("-inf"))
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # only the last stage has losses
    return float(mine)


def adapters(bridge, chunks, grads: bool = False) -> dict[str, torch.Tensor]:
    from bridge.conversion.hf_adapter import export_adapter_tensors

    it = export_adapter_tensors(chunks, bridge.family, VOCAB, dst=0, grads=grads)
    return {n: t.detach().clone() for n, t in it}


def sgd(chunks) -> None:
    from bridge.peft import adapter_parameters

    with torch.no_grad():
        for p in adapter_parameters(chunks):
            p.add_(p.main_grad.to(p.dtype), alpha=-LR)


def logits(chunks) -> torch.Tensor:
    """Bridge's logits of tokens() (PP=1), the vocabulary gathered over TP and its padding cut off."""
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    from tests.functional.workers.convert_models import tokens

    toks = tokens()
    pos = torch.arange(toks.shape[1]).unsqueeze(0).expand_as(toks)
    chunks[0].eval()
    with torch.no_grad():
        out = gather_from_tensor_model_parallel_region(chunks[0](toks, pos, attention_mask=None))
    chunks[0].train()
    return out[..., :VOCAB].float()


def checkpoint_dict(chunks) -> dict:
    from bridge.checkpoint.save_load import model_sharded_state_dict

    return model_sharded_state_dict(chunks[:1], "adapters")


def train(root: Path, layout: str, scheme: str) -> None:
    from megatron.core import dist_checkpointing

    bridge, chunks = build(root, layout, scheme, seed=11)
    record = {"initial": adapters(bridge, chunks), "losses": [], "grads": []}
    data = batches(2)
    for _ in range(STEPS):
        record["losses"].append(step_loss(chunks, data))
        record["grads"].append(adapters(bridge, chunks, grads=True))
        sgd(chunks)
    record["final"] = adapters(bridge, chunks)
    if layout.startswith("mla_"):
        record["logits"] = logits(chunks)
    name = f"{layout}_{scheme}"
    bridge.save_hf_adapter(chunks, root / "out" / name / "adapter")
    bridge.save_hf_pretrained(chunks, root / "out" / name / "merged", progress=False)
    if (layout, scheme) in SAVES:
        folder = root / "out" / SAVES[(layout, scheme)]
        if dist.get_rank() == 0:
            folder.mkdir(parents=True)
        dist.barrier()
        dist_checkpointing.save(checkpoint_dict(chunks), str(folder))
    if dist.get_rank() == 0:
        torch.save(record, root / "out" / f"{name}.pt")
        print(f"RESULT {name} losses={record['losses']} (at {time.perf_counter() - START:.1f} s)", flush=True)


def load(root: Path, phase: str) -> None:
    from megatron.core import dist_checkpointing

    layout, scheme, ckpt = LOADS[phase]
    bridge, chunks = build(root, layout, scheme, seed=99)  # other initial adapters than the saved ones
    before = adapters(bridge, chunks)
    loaded = dist_checkpointing.load(checkpoint_dict(chunks), str(root / "out" / ckpt))
    result = chunks[0].module.load_state_dict(loaded["model"], strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    after = adapters(bridge, chunks)
    if dist.get_rank() == 0:
        torch.save({"before": before, "after": after}, root / "out" / f"{phase}.pt")
        print(f"RESULT {phase} (at {time.perf_counter() - START:.1f} s)", flush=True)


def main() -> None:
    from bridge.parallel.teardown import release_model_parallel_groups

    root = Path(sys.argv[1])
    dist.init_process_group("gloo")
    for phase in [*LAYOUTS, *LOADS]:
        for scheme in ("lora", "dora"):
            if phase in LOADS:
                if scheme == LOADS[phase][1]:
                    load(root, phase)
            else:
                train(root, phase, scheme)
        # the next layout gets new Megatron-Core groups on the same gloo group
        release_model_parallel_groups()
    from tests.functional.workers.peft_hybrid import tp2_phases

    tp2_phases(root, root / "out")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
