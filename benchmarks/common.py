"""Pieces the training benchmarks share (train_throughput.py, finetune_throughput.py, gpu_throughput.py).

- TIMED_RUN_OVERRIDES: what turns a recipe into a short timed run (no evaluation, checkpoints or
  TensorBoard, a log line per step, no LR warm-up; none of them changes a step's work);
- the Hugging Face baseline: its LlamaConfig from the same GPTModelProvider the bridge side trains
  (AutoBridge.from_provider: the same shape by construction), AdamW with Megatron's parameter groups,
  and one training step (micro batches with gradient accumulation, clip, step);
- the fresh-process protocol: a worker prints one `RESULT {json}` line, run_worker() returns it;
- peak_memory(): the CUDA allocator's peak, or the process's max RSS on CPU.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from typing import Any

TIMED_RUN_OVERRIDES = [
    "scheduler.lr_warmup_iters=0", "validation.eval_interval=0", "validation.eval_iters=0",
    "checkpoint.save=null", "checkpoint.save_interval=0", "logger.tensorboard_dir=null", "logger.log_interval=1",
]  # fmt: skip

RESULT_PREFIX = "RESULT "


def hf_llama_config(provider: Any, attn_implementation: str = "sdpa"):
    """transformers.LlamaConfig of `provider` (the config.json AutoBridge would export for it)."""
    from transformers import LlamaConfig

    from bridge.conversion.auto_bridge import AutoBridge

    fields = dict(AutoBridge.from_provider(provider, "LlamaForCausalLM").hf_config)
    return LlamaConfig(**fields, attn_implementation=attn_implementation)


def adamw(
    model, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, fused: bool | None = None
):
    """torch.optim.AdamW with Megatron's groups: weight decay on matrices, none on norms and biases."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def hf_train_step(model, optimizer, micro_batches, clip: float, device="cpu", autocast_dtype=None):
    """One global batch on a Hugging Face causal LM: forward/backward per micro batch (loss / count, so
    the gradients are the batch mean), clip, step, zero. Megatron-Core's batches carry already-shifted
    labels: the loss is taken over the same seq_length predictions per row as bridge's. Returns the
    batch loss as a tensor on `device` (reading it is the caller's one host sync)."""
    import torch

    device_type = torch.device(device).type
    amp = (
        torch.autocast(device_type=device_type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    total = torch.zeros((), device=device)
    for batch in micro_batches:
        tokens = batch["tokens"].to(device, non_blocking=True)
        position_ids = batch["position_ids"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        with amp:
            logits = model(input_ids=tokens, position_ids=position_ids, use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1)
            ) / len(micro_batches)
        loss.backward()
        total += loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def peak_memory() -> tuple[int, str]:
    """(bytes, what): the CUDA allocator's peak with CUDA, else this process's max RSS."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated()), "CUDA max allocated"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "max RSS"  # Linux: KiB


def emit_result(result: dict) -> None:
    """The worker's answer: one line the parent picks out of its output."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def run_worker(cmd: list[str], echo: bool = False, env: dict | None = None) -> dict:
    """Run a worker process; return its RESULT dict. `echo` streams its other output lines through
    (stdout and stderr merged); without it they are shown only when it fails. SystemExit on failure."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
    )
    kept, result = [], None
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            continue
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
        else:
            kept.append(line)
    code = proc.wait()
    if code != 0 or result is None:
        tail = "" if echo else "".join(kept)[-6000:]
        raise SystemExit(f"worker {' '.join(cmd[1:3])} failed (exit {code}){':' if tail else ''}\n{tail}")
    return result
