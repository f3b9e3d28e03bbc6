"""Image-text finetuning parity against transformers + torch: bridge's finetune() from a tiny VLM folder
(dataset.kind=vlm, full SFT, vision encoder frozen, projector and language model trained) against
transformers' model class (LlavaForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
Gemma3ForConditionalGeneration) +
torch.optim.AdamW over exactly the micro batches bridge trained on (tokens, labels, loss masks and image
tensors recorded), the optimizer and schedule written from the definitions (training_parity_hf.py's:
Megatron's weight-decay groups, clipping, warmup + cosine).

`ref` (1 rank): writes the folders and the conversations, runs bridge at TP=1 and the reference for every
family, and for the families that pack (LLaVA, Qwen2.5-VL) bridge on packed rows (dataset.packed_sequence_size,
THD segments) against transformers on each of the rows' conversations alone (the 2-rank launch: the same
packed run at PP=2); `layouts` (2 ranks): the TP=2 conversions, then bridge at TP=2, PP=2 (and LLaVA at DP=2) on the same
data. Full-batch steps (one global batch = every conversation, token mean over it), so the order of the
conversations cannot matter. Runs are named `<family>:<layout>`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from train_common import emit, reset_parallel_state
from training_parity_hf import (
    BETAS,
    CLIP,
    EPS,
    GLOBAL_BATCH,
    LR,
    MIN_LR,
    WARMUP,
    WEIGHT_DECAY,
    lr_at,
    megatron_adamw,
)
from vlm_models import VLM_FAMILIES, save_vlm_model, tiny_vlm_script, write_conversations

SEQ = 48  # 16 image tokens + a question and an answer of a few words
ITERS = 8  # AdamW steps, each over every conversation (warm-up 2, then cosine decay to MIN_LR over all 8)
IMAGE_KEYS = ("pixel_values", "image_grid_thw")
PACKED = 96  # dataset.packed_sequence_size of the packed runs: two or so conversations per row
# the families whose folders allow packing (PACKING_REFUSED None)
PACKED_FAMILIES = ("llava", "qwen25_vl", "qwen3_vl", "qwen3_vl_moe")
LAYOUTS = {
    "tp2": ["model.tensor_model_parallel_size=2"],
    "pp2": ["model.pipeline_model_parallel_size=2"],  # the vision side on the first stage
    "dp2": [],
    "fsdp2": ["distributed.strategy=fsdp2"],  # DP=2 on PyTorch's fully_shard, the vision side sharded too
    "ddp": ["distributed.strategy=ddp"],  # DP=2 on torch DDP
    "ep2": ["model.expert_model_parallel_size=2"],  # two experts per rank (a MoE language model)
    # sequence parallelism: the image features merged into the whole sequence, then scattered
    "tp2sp": ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true"],
    # context parallelism: the images merged over the whole sequence, each rank keeping its 2 of 4 chunks
    "cp2": ["model.context_parallel_size=2"],
}
QWEN_VL = ("qwen25_vl", "qwen3_vl", "qwen3_vl_moe")  # image grids (image_grid_thw), M-RoPE
# the 2-rank layouts each family trains at (M-RoPE: PP=2 checks the positions of the second stage)
FAMILY_LAYOUTS = {
    "llava": ("tp2", "pp2", "dp2", "fsdp2", "ddp", "cp2"),
    "qwen25_vl": ("tp2", "pp2", "fsdp2", "cp2"),
    "gemma3_vl": ("tp2", "pp2"),
    "qwen3_vl": (
        "tp2",
        "pp2",
        "tp2sp",
        "cp2",
    ),  # PP=2: DeepStack's layer 0 on the first stage, M-RoPE on both
    # stacked experts split over TP (Megatron-Core trains MoE at TP > 1 with sequence parallelism) and EP
    "qwen3_vl_moe": ("tp2sp", "ep2", "cp2"),
}
FINETUNED = tuple(FAMILY_LAYOUTS)  # the families whose finetune is compared; the others convert only
CONVERT_ONLY = tuple(f for f in VLM_FAMILIES if f not in FAMILY_LAYOUTS)


def _freeze_encoder(family: str, model) -> None:
    """The reference's frozen vision encoder, as bridge's freeze_vision_model default (the projector trains)."""
    if family in ("llava", "gemma3_vl"):
        model.model.vision_tower.requires_grad_(False)
    else:  # Qwen2.5-VL / Qwen3-VL: the vision transformer but its mergers (the projector; DeepStack's)
        model.model.visual.requires_grad_(False)
        model.model.visual.merger.requires_grad_(True)
        for merger in getattr(model.model.visual, "deepstack_merger_list", ()):
            merger.requires_grad_(True)


def _hf_inputs(family: str, model, b: dict) -> dict:
    """transformers' inputs of a recorded micro batch (no padding mask: bridge attends causally; Qwen2.5-VL's
    M-RoPE positions need the processor's mm_token_type_ids, 1 on the image tokens; Gemma 3's image-block
    attention its token_type_ids, the same)."""
    inputs = {"input_ids": b["tokens"], "pixel_values": b["pixel_values"]}
    if family == "gemma3_vl":
        inputs["token_type_ids"] = (b["tokens"] == model.config.image_token_id).long()
    if family in QWEN_VL:
        inputs["image_grid_thw"] = b["image_grid_thw"]
        inputs["mm_token_type_ids"] = (b["tokens"] == model.config.image_token_id).int()
    return inputs


def processor_without_torchvision() -> None:
    """AutoProcessor of a folder whose processor transformers cannot load here (Qwen2.5-VL's needs a video
    processor, which needs torchvision): the same processor class built from the folder's tokenizer and
    image processor (vlm_models.load_processor). Only the loading is replaced: the data module renders,
    expands and processes with transformers' own processor."""
    from transformers import AutoProcessor
    from vlm_models import PROCESSORS, family_of, load_processor

    original = AutoProcessor.from_pretrained

    def from_pretrained(path, *args, **kwargs):
        if family_of(path) in PROCESSORS:
            return load_processor(path)
        return original(path, *args, **kwargs)

    AutoProcessor.from_pretrained = staticmethod(from_pretrained)


def overrides(workdir: str, family: str = "llava", name: str | None = None) -> list[str]:
    hf = f"{workdir}/hf_{name or family}"
    return [
        f"checkpoint.pretrained_checkpoint={hf}",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}",
        "dataset.kind=vlm",
        f"dataset.data_paths=[{workdir}/data/vlm.jsonl]",
        'dataset.split="1,0,0"',
        "dataset.packed_sequence_size=0",
        "dataset.num_workers=0",
        f"model.seq_length={SEQ}",
        "model.calculate_per_token_loss=True",  # the token mean over the step, as the reference
        "distributed.average_in_collective=False",
        f"train.global_batch_size={GLOBAL_BATCH}",
        "train.micro_batch_size=1",
        f"train.train_iters={ITERS}",
        "validation.eval_iters=0",
        "validation.eval_interval=0",
        "checkpoint.save=null",
        "checkpoint.save_interval=0",
        "logger.log_interval=1",
        "logger.tensorboard_dir=null",
        f"optimizer.lr={LR}",
        f"optimizer.min_lr={MIN_LR}",
        f"optimizer.weight_decay={WEIGHT_DECAY}",
        f"scheduler.start_weight_decay={WEIGHT_DECAY}",
        f"scheduler.end_weight_decay={WEIGHT_DECAY}",
        f"optimizer.clip_grad={CLIP}",
        f"optimizer.adam_beta1={BETAS[0]}",
        f"optimizer.adam_beta2={BETAS[1]}",
        f"optimizer.adam_eps={EPS}",
        f"scheduler.lr_warmup_iters={WARMUP}",
        "scheduler.lr_decay_style=cosine",
    ]


def config(workdir: str, *extra: str, family: str = "llava", name: str | None = None):
    from bridge.config.compose import compose
    from recipes.llama_finetune import llama32_1b_sft_config

    given = {e.split("=")[0] for e in extra}  # `extra` replaces the base's value of a key (one per key)
    base = [o for o in overrides(workdir, family, name) if o.split("=")[0] not in given]
    cfg, _ = compose(llama32_1b_sft_config(), overrides=[*base, *extra])
    return cfg


def run_bridge(name: str, cfg, record: list | None = None) -> None:
    import bridge.training.forward_step as fs
    from bridge.training import finetune

    original = getattr(fs.get_batch, "__wrapped__", fs.get_batch)

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if record is not None:
            keys = ("tokens", "labels", "loss_mask", "cu_seqlens", *IMAGE_KEYS)
            record.append({k: batch[k].clone() for k in keys if k in batch})
        return batch

    get_batch.__wrapped__ = original
    fs.get_batch = get_batch
    try:
        result = finetune(cfg)
    finally:
        fs.get_batch = original
    emit("run", {"run": name, "losses": result.losses, "grad_norms": result.grad_norms,
                 "learning_rates": result.learning_rates})  # fmt: skip
    reset_parallel_state()


# the projector alone trains (Megatron-Bridge's `*_pretrain_mock` VLM recipes) on generated conversations
PROJECTOR = ["dataset.kind=mock_vlm", "dataset.data_paths=[]", "model.freeze_language_model=true"]


def _projector_only(model) -> None:
    """The reference of model.freeze_language_model=true (LLaVA): only the multi-modal projector trains."""
    model.requires_grad_(False)
    model.model.multi_modal_projector.requires_grad_(True)


def run_transformers(
    workdir: str,
    batches: list[dict],
    family: str,
    name: str | None = None,
    run: str | None = None,
    projector_only: bool = False,
) -> None:
    """transformers' model class (vision encoder frozen, as bridge's default) + AdamW (`name`: the
    model's folder hf_<name> and run name, when not the family's; `run`: the run's name; `projector_only`:
    the LLaVA projector alone trains). A packed micro batch (cu_seqlens recorded) runs as its
    conversations, each alone."""
    import torch
    import transformers

    torch.manual_seed(0)
    cls = getattr(transformers, VLM_FAMILIES[family][1])
    # Gemma 3: eager attention, the explicit softmax(q k^T + mask) v that bridge's masked attention
    # computes; the sdpa kernel's blocked softmax sums in another order (measured: grad norm 2.8e-6
    # relative from bridge's after 5 steps with sdpa, 6.4e-7 with eager; loss within 5.3e-7 either way)
    extra = {"attn_implementation": "eager"} if family == "gemma3_vl" else {}
    model = cls.from_pretrained(f"{workdir}/hf_{name or family}", dtype=torch.float32, **extra).train()
    _projector_only(model) if projector_only else _freeze_encoder(family, model)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = megatron_adamw(trainable, lr_at(0, ITERS))
    losses, grad_norms, lrs = {}, {}, {}
    for it in range(1, ITERS + 1):
        window = batches[(it - 1) * GLOBAL_BATCH : it * GLOBAL_BATCH]
        optimizer.zero_grad()
        total = sum(b["loss_mask"].sum() for b in window)
        loss_sum = 0.0
        for b in window:  # one conversation per micro batch, as bridge; the token mean over the step
            for one in _segment_inputs(family, model, b) if "cu_seqlens" in b else [b]:
                logits = model(**_hf_inputs(family, model, one)).logits.float()
                per_token = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), one["labels"].reshape(-1), reduction="none"
                )
                loss = (per_token * one["loss_mask"].reshape(-1).float()).sum() / total
                loss.backward()
                loss_sum += float(loss)
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)
        for group in optimizer.param_groups:
            group["lr"] = lr_at((it - 1) * GLOBAL_BATCH, ITERS)
        optimizer.step()
        losses[it], grad_norms[it], lrs[it] = loss_sum, float(norm), lr_at(it * GLOBAL_BATCH, ITERS)
    emit("run", {"run": run or f"{name or family}:transformers", "losses": losses, "grad_norms": grad_norms,
                 "learning_rates": lrs})  # fmt: skip


def _segment_inputs(family: str, model, b: dict) -> list[dict]:
    """A recorded packed row cut into its conversations (the segments with loss tokens), each with its
    own images: the row's images in member order, an image being its image tokens' count of the segment
    (LLaVA: image_seq_length tokens and one pixel_values row; Qwen2.5-VL / Qwen3-VL: t*h*w/merge^2 tokens
    and t*h*w patch rows of its grid)."""
    bounds = b["cu_seqlens"].reshape(-1).tolist()
    token = model.config.image_token_id
    qwen = family in QWEN_VL
    if qwen:
        grid = b["image_grid_thw"]
        rows = grid.prod(-1).tolist()
        tokens = (grid.prod(-1) // model.config.vision_config.spatial_merge_size**2).tolist()
    else:
        rows = [1] * b["pixel_values"].shape[0]
        tokens = [model.config.image_seq_length] * len(rows)
    out, image, pixel = [], 0, 0
    for a, e in zip(bounds[:-1], bounds[1:], strict=True):
        seg = {k: b[k][:, a:e] for k in ("tokens", "labels", "loss_mask")}
        want, first, first_pixel = int((seg["tokens"] == token).sum()), image, pixel
        while want > 0:
            want, pixel, image = want - tokens[image], pixel + rows[image], image + 1
        assert want == 0, "a segment's image tokens are not whole images"
        seg["pixel_values"] = b["pixel_values"][first_pixel:pixel]
        if qwen:
            seg["image_grid_thw"] = b["image_grid_thw"][first:image]
        if seg["loss_mask"].sum() > 0:
            out.append(seg)
    return out


def _conversations_per_row(b: dict) -> int:
    bounds = b["cu_seqlens"].reshape(-1).tolist()
    mask = b["loss_mask"].reshape(-1)
    return sum(int(mask[a:e].sum() > 0) for a, e in zip(bounds[:-1], bounds[1:], strict=True))


def convert_tp2(workdir: str, family: str) -> None:
    """Import at TP=2 (the vision side replicated, the language model split): image+text logits against
    transformers' (gathered vocabulary), and the export's tensors against the source files."""
    import torch
    import transformers

    from bridge import AutoBridge
    from tests.functional.workers.convert_models import bit_identical, read_tensors
    from tests.functional.workers.vlm_models import VLM_FAMILIES, image_inputs, processed_batch
    from tests.tolerances import logits_tolerance

    folder = Path(workdir) / f"hf_{family}"
    batch = processed_batch(folder, Path(workdir) / "data" / "vlm.jsonl", count=2)
    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider()
    provider.tensor_model_parallel_size = 2
    # a MoE language model at TP > 1 runs with sequence parallelism (the whole sequence merged, then scattered)
    provider.sequence_parallel = bool(provider.num_moe_experts)
    provider.parallel_output = False  # every rank gets the whole vocabulary
    chunk = provider.provide_distributed_model(wrap_with_ddp=False)[0]
    ids = batch["input_ids"]
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    hf = getattr(transformers, VLM_FAMILIES[family][1]).from_pretrained(folder).eval()
    with torch.no_grad():
        ours = chunk(ids, pos, None, images=image_inputs(batch))
        ref = hf(**batch).logits
    keep = batch["attention_mask"].bool()
    vocab = ref.shape[-1]
    diff = (ours[..., :vocab] - ref)[keep].abs().max().item()
    out = Path(workdir) / f"export_tp2_{family}"
    bridge.save_hf_pretrained([chunk], out)
    same = (
        bit_identical(read_tensors(folder), read_tensors(out)) if torch.distributed.get_rank() == 0 else None
    )
    emit("convert_tp2", {"family": family, "max_logit_diff": diff, "export_differs": same,
                         "bound": logits_tolerance(ref[keep], hf.config)})  # fmt: skip
    reset_parallel_state()


DEEP = "llava_deep"  # LLaVA with a 4-layer language model: PP=2 x VPP=2 holds one layer per model chunk


def deep_llava_reference(workdir: str) -> None:
    """The 4-layer LLaVA at TP=1 (its batches recorded) and transformers on them, for the VPP run."""
    text = tiny_vlm_script().TINY_TEXT
    layers = text["num_hidden_layers"]
    text["num_hidden_layers"] = 4
    try:
        save_vlm_model("llava", Path(workdir) / f"hf_{DEEP}")
    finally:
        text["num_hidden_layers"] = layers
    batches: list[dict] = []
    run_bridge(f"{DEEP}:tp1", config(workdir, family="llava", name=DEEP), record=batches)
    run_transformers(workdir, batches, "llava", name=DEEP)


def main(mode: str, workdir: str) -> None:
    processor_without_torchvision()
    if mode == "ref":
        for family in CONVERT_ONLY:  # for convert_tp2 only
            save_vlm_model(family, Path(workdir) / f"hf_{family}")
        write_conversations(Path(workdir) / "data", GLOBAL_BATCH, seed=3)
        for family in FINETUNED:
            save_vlm_model(family, Path(workdir) / f"hf_{family}")
            batches: list[dict] = []
            run_bridge(f"{family}:tp1", config(workdir, family=family), record=batches)
            run_transformers(workdir, batches, family)
            if family == "llava":
                masked = [b["labels"][b["loss_mask"].bool()].tolist() for b in batches[:GLOBAL_BATCH]]
                emit("masked", {"masked": masked})
                batches = []
                run_bridge("llava_projector:tp1", config(workdir, *PROJECTOR), record=batches)
                run_transformers(
                    workdir, batches, family, run="llava_projector:transformers", projector_only=True
                )
            if family in PACKED_FAMILIES:  # rows of several conversations (THD segments)
                packed: list[dict] = []
                pack = [f"dataset.packed_sequence_size={PACKED}", f"model.seq_length={PACKED}"]
                run_bridge(f"{family}:packed-tp1", config(workdir, *pack, family=family), record=packed)
                # the reference: transformers on each conversation of each recorded row alone
                run_transformers(workdir, packed, family, run=f"{family}:packed-transformers")
                emit(
                    "packed_rows",
                    {"family": family, "conversations": [_conversations_per_row(b) for b in packed]},
                )
        deep_llava_reference(workdir)
    elif mode == "layouts":
        for family in VLM_FAMILIES:
            convert_tp2(workdir, family)
        for family in FINETUNED:
            for name in FAMILY_LAYOUTS[family]:
                run_bridge(f"{family}:{name}", config(workdir, *LAYOUTS[name], family=family))
        # PP=2 with the language model frozen: the second stage trains nothing
        run_bridge("llava_projector:pp2", config(workdir, *PROJECTOR, *LAYOUTS["pp2"]))
        for family in PACKED_FAMILIES:  # packed rows over two pipeline stages (M-RoPE ids on both)
            pack = [f"dataset.packed_sequence_size={PACKED}", f"model.seq_length={PACKED}"]
            pp2 = config(workdir, *pack, *LAYOUTS["pp2"], family=family)
            run_bridge(f"{family}:packed-pp2", pp2)
        vpp = ["model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=2"]
        run_bridge(f"{DEEP}:vpp2", config(workdir, *vpp, family="llava", name=DEEP))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
