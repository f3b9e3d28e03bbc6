"""Training parity against transformers + torch (issue 28): bridge's pretrain() / finetune() from a
Hugging Face folder against a plain transformers + torch.optim.AdamW loop written here from the definitions.

`ref` (1 rank): writes the HF folders (random LlamaForCausalLM and MixtralForCausalLM with a 384-token
vocabulary: Megatron's padding would make it 512 at TP=2; the finetuning fixtures' tiny Llama with its
tokenizer), the token documents and the SFT records; per case runs bridge at TP=1 recording every micro
batch it trains on, then replays exactly those windows through the reference (peft's LoRA for the LoRA
case). Full-batch steps: each iteration's loss is the token mean over its whole global batch, so the order
of its windows cannot matter. `layouts` (2 ranks): Llama at TP=2, TP=2+SP, PP=2, DP=2, CP=2, fsdp2 DP=2 and
TP=2 with the vocabulary padded, then Mixtral at EP=2, in sequence.
Each run emits, per iteration, the loss, the grad norm (before clipping) and the learning rate.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from train_common import emit, rank, reset_parallel_state, write_learnable_indexed_data

from tests.finetune_fixtures import TINY_LLAMA

VOCAB = 384
SFT_RECORDS = 8  # = GLOBAL_BATCH: one step sees every record
ITERS = 5
GLOBAL_BATCH = 8
SEQ = 32
LR, MIN_LR, WARMUP, WEIGHT_DECAY, CLIP = 3e-3, 3e-4, 2, 0.1, 1.0
BETAS, EPS = (0.9, 0.95), 1e-8
HF_LLAMA = {**TINY_LLAMA, "vocab_size": VOCAB}  # the README tiny model's shape, this vocabulary
# A MoE family against transformers' own MoE class: 4 experts, top-2 renormalised; the router's
# auxiliary loss is off on both sides (HF adds it only with output_router_logits; bridge's coefficient
# is the recipe's 0).
HF_MIXTRAL = dict(
    {k: v for k, v in HF_LLAMA.items()},
    num_local_experts=4,
    num_experts_per_tok=2,
    output_router_logits=False,
)
# A Gated DeltaNet family against transformers' Qwen3.5 class: layer 0 Gated DeltaNet (2 key heads, 4
# value heads), layer 1 gated softmax attention, zero-centred norms.
HF_QWEN35 = dict(
    HF_LLAMA,
    head_dim=16,
    layer_types=["linear_attention", "full_attention"],
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
)
# GPT-OSS against transformers' class: a learnable sink per head, a window (6) on layer 0, biases on
# q/k/v/o, router and experts, the clamped SwiGLU (limit 0.5 so the clamps bite), YaRN x4 from 16
# positions; the router's auxiliary loss off on both sides (coefficient 0 in the folder, which bridge reads).
HF_GPT_OSS = dict(
    {k: v for k, v in HF_LLAMA.items() if k != "rope_theta"},
    head_dim=16,
    intermediate_size=32,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=6,
    swiglu_limit=0.5,
    rope_parameters={
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "rope_theta": 10000.0,
    },
    router_aux_loss_coef=0.0,
    output_router_logits=False,
)
FAMILIES = {
    "llama": ("LlamaConfig", HF_LLAMA),
    "mixtral": ("MixtralConfig", HF_MIXTRAL),
    "qwen35": ("Qwen3_5TextConfig", HF_QWEN35),
}
# launched on their own (slow tier, tests/functional/test_training_parity_hf_gpt_oss.py)
SLOW_FAMILIES = {"gptoss": ("GptOssConfig", HF_GPT_OSS)}
# A hybrid against transformers' Nemotron-H class (MambaModelProvider): Mamba-2 (2 groups of 4 heads of 16,
# state 16; chunks of 8 over the 32-token windows, so the SSD scan hands its state on between chunks),
# attention without RoPE, a squared-ReLU MLP; trained HYBRID_ITERS steps (slow tier, one 2-rank launch:
# tests/functional/test_training_parity_hf_hybrid.py).
HF_NEMOTRONH = dict(
    {k: v for k, v in HF_LLAMA.items() if k not in ("rope_theta", "rms_norm_eps", "num_hidden_layers")},
    layers_block_type=["linear_attention", "full_attention", "linear_attention", "mlp"],
    head_dim=16,
    layer_norm_epsilon=1e-5,
    ssm_state_size=16,
    mamba_num_heads=8,
    mamba_head_dim=16,
    n_groups=2,
    conv_kernel=4,
    chunk_size=8,
)
HYBRID_FAMILIES = {"nemotronh": ("NemotronHConfig", HF_NEMOTRONH)}
HYBRID_ITERS = 12
# TP=2 splits the Mamba heads and groups (and the attention heads); TP=1 on 2 ranks is DP=2
HYBRID_LAYOUTS = {"nemotronh_tp2": ["model.tensor_model_parallel_size=2"], "nemotronh_dp2": []}
LAYOUTS = {
    "tp2": ["model.tensor_model_parallel_size=2"],
    "tp2_sp": ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"],
    "pp2": ["model.pipeline_model_parallel_size=2"],
    "dp2": [],
    "cp2": ["model.context_parallel_size=2"],
    "fsdp2": ["distributed.strategy=fsdp2"],
    # padding on (384 -> 512 rows at TP=2): the padded logits must stay out of the loss
    "tp2_padded": ["model.tensor_model_parallel_size=2", "model.should_pad_vocab=True"],
}
# runs of the other families, at a layout: <family>_<layout>
MOE_LAYOUTS = {
    "mixtral_ep2": ["model.expert_model_parallel_size=2"],
    # the Gated DeltaNet split by heads over TP (its output norm's weight gradient summed over TP)
    "qwen35_tp2": ["model.tensor_model_parallel_size=2"],
}
SLOW_LAYOUTS = {
    # GPT-OSS at its recipes' layouts: TP=2 with sequence parallelism (sinks split by heads, the router and
    # expert biases replicated over TP), EP=2, and both at once (experts not split over TP: 2 ranks)
    "gptoss_tp2_sp": ["model.tensor_model_parallel_size=2", "model.sequence_parallel=True"],
    "gptoss_ep2": ["model.expert_model_parallel_size=2"],
    "gptoss_tp2_ep2": [
        "model.tensor_model_parallel_size=2",
        "model.expert_model_parallel_size=2",
        "model.expert_tensor_parallel_size=1",
        "model.sequence_parallel=True",
    ],
}


def overrides(workdir: str, family: str, iters: int = ITERS) -> list[str]:
    return [
        f"model.seq_length={SEQ}",
        f"train.global_batch_size={GLOBAL_BATCH}",
        "train.micro_batch_size=1",
        f"train.train_iters={iters}",
        "validation.eval_iters=0",
        "validation.eval_interval=0",
        "checkpoint.save=null",
        "checkpoint.save_interval=0",
        "logger.log_interval=1",
        "logger.tensorboard_dir=null",
        "dataset.kind=indexed",
        f"dataset.data_paths=[{workdir}/data/count]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={workdir}/cache",
        "dataset.num_workers=0",
        f"optimizer.lr={LR}",
        f"optimizer.min_lr={MIN_LR}",
        f"optimizer.weight_decay={WEIGHT_DECAY}",
        # the recipes' scheduler sets the decay every step (Megatron-Bridge's 0.033): train at WEIGHT_DECAY
        f"scheduler.start_weight_decay={WEIGHT_DECAY}",
        f"scheduler.end_weight_decay={WEIGHT_DECAY}",
        f"optimizer.clip_grad={CLIP}",
        f"optimizer.adam_beta1={BETAS[0]}",
        f"optimizer.adam_beta2={BETAS[1]}",
        f"optimizer.adam_eps={EPS}",
        f"scheduler.lr_warmup_iters={WARMUP}",
        "scheduler.lr_decay_style=cosine",
        f"checkpoint.pretrained_checkpoint={workdir}/hf_{family}",
    ]


def config(workdir: str, family: str, *extra: str, iters: int = ITERS):
    from bridge.config.compose import compose
    from recipes.llama import llama32_1b_pretrain_config

    cfg, _ = compose(llama32_1b_pretrain_config(), overrides=[*overrides(workdir, family, iters), *extra])
    return cfg


def sft_overrides(workdir: str) -> list[str]:
    """SFT with answer-only loss from the finetuning fixtures' tiny Llama + tokenizer, on SFT_RECORDS
    {"input", "output"} records: one global batch holds every record."""
    hf = f"{workdir}/hf_sft"
    common = [o for o in overrides(workdir, "sft") if not o.startswith("dataset.")]
    sft = [
        "dataset.kind=sft",
        f"dataset.data_paths=[{workdir}/sft.jsonl]",
        'dataset.split="1,0,0"',
        "dataset.packed_sequence_size=0",
        "dataset.answer_only_loss=True",
        "model.calculate_per_token_loss=True",
        "distributed.average_in_collective=False",
        "dataset.num_workers=0",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}",
    ]
    return [*common, *sft]


def sft_config(workdir: str):
    """Full SFT (the sft recipe)."""
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_sft_config

    cfg, _ = compose(llama32_1b_sft_config(), overrides=sft_overrides(workdir))
    return cfg


def run_bridge(name: str, cfg, record: list | None = None, finetune: bool = False) -> None:
    import bridge.training.forward_step as fs
    from bridge.training import finetune as run_finetune
    from bridge.training import pretrain

    original = getattr(fs.get_batch, "__wrapped__", fs.get_batch)

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if record is not None:
            record.append({k: batch[k].clone() for k in ("tokens", "labels", "loss_mask")})
        return batch

    get_batch.__wrapped__ = original
    fs.get_batch = get_batch
    try:
        result = (run_finetune if finetune else pretrain)(cfg)
    finally:
        fs.get_batch = original
    emit(
        "run",
        {
            "run": name,
            "losses": result.losses,
            "grad_norms": result.grad_norms,
            "learning_rates": result.learning_rates,
        },
    )
    reset_parallel_state()


def lr_at(samples: int, iters: int = ITERS) -> float:
    """Megatron-Core's OptimizerParamScheduler, linear warmup then cosine decay, counted in samples."""
    warmup, decay = WARMUP * GLOBAL_BATCH, iters * GLOBAL_BATCH
    if samples <= warmup:
        return LR * samples / warmup
    ratio = (samples - warmup) / (decay - warmup)
    return MIN_LR + (LR - MIN_LR) * 0.5 * (math.cos(math.pi * ratio) + 1.0)


def megatron_adamw(trainable: list, lr: float):
    """torch.optim.AdamW with Megatron's weight-decay groups: no decay on biases and 1-D parameters (the
    norms). GPT-OSS's stacked expert biases (experts.gate_up_proj_bias, 2-D) are biases: Megatron's are 1-D
    per expert."""
    import torch

    decay = [p for n, p in trainable if p.ndim > 1 and not n.endswith("bias")]
    no_decay = [p for n, p in trainable if p.ndim <= 1 or n.endswith("bias")]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS)


def run_transformers(
    workdir: str, family: str, batches: list[dict], lora_init: dict | None = None, iters: int = ITERS
) -> None:
    """The reference: the family's transformers class + torch.optim.AdamW over the windows bridge trained on;
    with `lora_init` ({bridge adapter parameter name: tensor}), peft's LoRA on it, started from those."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(f"{workdir}/hf_{family}", torch_dtype=torch.float32).train()
    name = f"transformers_{family}"
    if lora_init is not None:
        model, name = peft_model(model, lora_init), "peft_lora"
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = megatron_adamw(trainable, lr_at(0, iters))
    losses, grad_norms, lrs = {}, {}, {}
    for it in range(1, iters + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        tokens = torch.cat([b["tokens"] for b in window])
        labels = torch.cat([b["labels"] for b in window])  # Megatron's labels: already shifted
        mask = torch.cat([b["loss_mask"] for b in window]).float()
        optimizer.zero_grad()
        logits = model(input_ids=tokens).logits.float()
        per_token = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        loss = (per_token * mask.reshape(-1)).sum() / mask.sum()  # the token mean of the global batch
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)  # the norm before clipping
        for group in optimizer.param_groups:
            group["lr"] = lr_at((it - 1) * GLOBAL_BATCH, iters)
        optimizer.step()
        losses[it], grad_norms[it], lrs[it] = float(loss), float(norm), lr_at(it * GLOBAL_BATCH, iters)
    emit(
        "run",
        {"run": name, "losses": losses, "grad_norms": grad_norms, "learning_rates": lrs},
    )


# bridge's adapter targets -> transformers' module names (one HF module each: no fused q/k/v or gate/up,
# whose shared LoRA A peft cannot express)
LORA_TARGETS = {"self_attention.linear_proj": "self_attn.o_proj", "mlp.linear_fc2": "mlp.down_proj"}
LORA_DIM, LORA_ALPHA = 4, 8.0


def peft_model(model, lora_init: dict):
    """peft's LoRA (same rank, alpha, targets) with bridge's initial A and B copied in."""
    import re

    import torch
    from peft import LoraConfig, get_peft_model

    hf_targets = [t.split(".")[-1] for t in LORA_TARGETS.values()]
    config = LoraConfig(r=LORA_DIM, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=hf_targets)
    model = get_peft_model(model, config)
    params = dict(model.named_parameters())
    for name, value in lora_init.items():
        layer, target, part = re.search(
            r"layers\.(\d+)\.(.+)_adapter\.linear_(in|out)\.weight", name
        ).groups()
        ab = "A" if part == "in" else "B"
        hf = f"base_model.model.model.layers.{layer}.{LORA_TARGETS[target]}.lora_{ab}.default.weight"
        with torch.no_grad():
            params[hf].copy_(value)
    assert sum("lora_" in n for n in params) == len(lora_init) == 4 * HF_LLAMA["num_hidden_layers"]
    return model


def record_adapters(into: dict) -> None:
    """Wrap the loop's train_step: before the first step, copy every adapter parameter (TP=1: whole)."""
    import bridge.training.train as loop

    original = getattr(loop.train_step, "__wrapped__", loop.train_step)

    def train_step(ctx):
        if not into:
            for chunk in ctx.model:
                for name, param in chunk.named_parameters():
                    if "_adapter." in name:
                        into[name] = param.detach().clone()
        return original(ctx)

    train_step.__wrapped__ = original
    loop.train_step = train_step


def lora_config(workdir: str):
    """LoRA on the SFT data, from the peft recipe (base frozen), per-token loss as the SFT case."""
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_peft_config

    targets = ",".join(t.split(".")[-1] for t in LORA_TARGETS)
    cfg, _ = compose(
        llama32_1b_peft_config(),
        overrides=[
            *sft_overrides(workdir),
            f"peft.target_modules=[{targets}]",
            f"peft.dim={LORA_DIM}",
            f"peft.alpha={LORA_ALPHA}",
            "peft.dropout=0.0",
        ],
    )
    return cfg


def write_hf_models(workdir: str, families: dict) -> None:
    import torch
    import transformers

    for family, (config_class, fields) in families.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**fields)
        config.torch_dtype = torch.float32
        model = transformers.AutoModelForCausalLM.from_config(config).float()
        with torch.no_grad():  # norms away from 1 so a mapping mistake shows
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.uniform_(0.5, 1.5)
        model.save_pretrained(Path(workdir) / f"hf_{family}", safe_serialization=True)


def write_inputs(workdir: str) -> None:
    write_hf_models(workdir, FAMILIES)
    write_learnable_indexed_data(f"{workdir}/data/count", n_docs=60)
    from tests.finetune_fixtures import make_tiny_llama, write_sft_jsonl

    make_tiny_llama(Path(workdir) / "hf_sft")
    write_sft_jsonl(Path(workdir) / "sft.jsonl", SFT_RECORDS, seed=5)


def emit_answers(workdir: str, batches: list[dict]) -> None:
    """The label ids bridge put loss on, per window, and each record's answer tokenized by transformers
    (output + eos): the test checks the loss falls on the answers only, independently of bridge's masks."""
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(f"{workdir}/hf_sft")
    records = [json.loads(line) for line in (Path(workdir) / "sft.jsonl").read_text().splitlines()]
    answers = [
        tok(" " + r["output"], add_special_tokens=False).input_ids + [tok.eos_token_id] for r in records
    ]
    masked = [b["labels"][b["loss_mask"].bool()].tolist() for b in batches]
    emit("sft_answers", {"masked": masked, "answers": answers})


def main(mode: str, workdir: str) -> None:
    if mode == "ref":
        write_inputs(workdir)
        for family in FAMILIES:
            batches: list[dict] = []
            name = "tp1" if family == "llama" else f"{family}_tp1"
            run_bridge(name, config(workdir, family), record=batches)
            run_transformers(workdir, family, batches)
        batches = []
        run_bridge("sft_tp1", sft_config(workdir), record=batches, finetune=True)
        run_transformers(workdir, "sft", batches)
        emit_answers(workdir, batches[:GLOBAL_BATCH])
        batches, adapters = [], {}
        record_adapters(adapters)
        run_bridge("lora_tp1", lora_config(workdir), record=batches, finetune=True)
        run_transformers(workdir, "sft", batches, lora_init=adapters)
    elif mode == "layouts":
        for name, extra in LAYOUTS.items():
            run_bridge(name, config(workdir, "llama", *extra))
        for name, extra in MOE_LAYOUTS.items():
            run_bridge(name, config(workdir, name.split("_")[0], *extra))
    elif mode == "slow_ref":
        write_hf_models(workdir, SLOW_FAMILIES)
        write_learnable_indexed_data(f"{workdir}/data/count", n_docs=60)
        for family in SLOW_FAMILIES:
            batches = []
            run_bridge(f"{family}_tp1", config(workdir, family), record=batches)
            run_transformers(workdir, family, batches)
    elif mode == "slow_layouts":
        for name, extra in SLOW_LAYOUTS.items():
            run_bridge(name, config(workdir, name.split("_")[0], *extra))
    elif mode == "hybrid":  # 2 ranks: the layouts, then the reference on rank 0 over TP=2's windows
        ready = Path(workdir) / "inputs_written"
        if rank() == 0:
            write_hf_models(workdir, HYBRID_FAMILIES)
            write_learnable_indexed_data(f"{workdir}/data/count", n_docs=60)
            ready.touch()
        while not ready.exists():  # no process group before pretrain() makes one
            time.sleep(0.1)
        batches = []
        for name, extra in HYBRID_LAYOUTS.items():
            cfg = config(workdir, "nemotronh", *extra, iters=HYBRID_ITERS)
            run_bridge(name, cfg, record=batches if not batches else None)
        if rank() == 0:
            run_transformers(workdir, "nemotronh", batches, iters=HYBRID_ITERS)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
