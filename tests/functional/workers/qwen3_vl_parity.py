"""Qwen3-VL on gloo ranks: a tiny random Qwen3VLForConditionalGeneration (fp32) imported with bridge at
the launch's TP, image+text logits against transformers', the export against the source files, and (TP=1)
the same logits with the interleaved M-RoPE swapped for Megatron-Core's contiguous layout and with
DeepStack off, to show that the comparison sees each; (2 ranks) PP=2 with DeepStack layers on the second
stage is refused. Usage: qwen3_vl_parity.py <workdir>."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from train_common import emit, reset_parallel_state

IMAGE, VSTART, VEND = 300, 302, 303
GRIDS = [[1, 4, 4], [1, 2, 4]]  # two images: 4 and 2 image tokens (spatial merge 2)


def make_model(folder: Path):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [3, 3, 2],
                             "mrope_interleaved": True},
        ),
        vision_config=dict(
            depth=4, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=8,
            spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
            deepstack_visual_indexes=[0, 1, 2],
        ),
        image_token_id=IMAGE, video_token_id=301, vision_start_token_id=VSTART, vision_end_token_id=VEND,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config).float().eval()
    with torch.no_grad():  # random weights of unit-scale outputs (the init's std 0.02 gives near-zero logits)
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.15)
    if torch.distributed.get_rank() == 0:
        model.save_pretrained(folder)
    torch.distributed.barrier()
    return model


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    words = lambda n: torch.randint(0, 290, (n,), generator=g).tolist()  # noqa: E731
    row0 = words(3) + [VSTART] + [IMAGE] * 4 + [VEND] + words(11)
    row1 = words(5) + [VSTART] + [IMAGE] * 2 + [VEND] + words(11)
    patches = sum(t * h * w for t, h, w in GRIDS)
    return {
        "input_ids": torch.tensor([row0, row1]),
        "attention_mask": torch.ones(2, 20, dtype=torch.long),
        "mm_token_type_ids": torch.tensor([row0, row1]).eq(IMAGE).long(),
        "pixel_values": torch.randn(patches, 3 * 2 * 8 * 8, generator=g),
        "image_grid_thw": torch.tensor(GRIDS),
    }


def generation(hf, chunk, batch: dict) -> dict:
    """Greedy ids of the first row's prompt and image: transformers' generate, and bridge's generate with
    and without the KV cache (M-RoPE positions continue after the prompt; DeepStack on the prefill)."""
    from bridge.inference.generate import generate

    n = 6
    prompt = {"input_ids": batch["input_ids"][:1], "attention_mask": batch["attention_mask"][:1],
              "mm_token_type_ids": batch["mm_token_type_ids"][:1],
              "pixel_values": batch["pixel_values"][:16], "image_grid_thw": batch["image_grid_thw"][:1]}  # fmt: skip
    with torch.no_grad():
        out = hf.generate(**prompt, do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0,
                          output_scores=True, return_dict_in_generate=True)  # fmt: skip
    gap = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores)
    images = {k: prompt[k] for k in ("pixel_values", "image_grid_thw")}
    ids = prompt["input_ids"][0].tolist()
    ours = {str(cache): generate([chunk], ids, n, vocab_size=hf.config.text_config.vocab_size,
                                 kv_cache=cache, images=images).ids for cache in (True, False)}  # fmt: skip
    return {"reference": out.sequences[0, len(ids) :].tolist(), "gap": gap, **ours}


def main(workdir: str) -> None:
    from bridge import AutoBridge
    from tests.functional.workers.convert_models import bit_identical, read_tensors
    from tests.tolerances import logits_tolerance

    torch.distributed.init_process_group("gloo")
    tp = torch.distributed.get_world_size()
    folder = Path(workdir) / "hf_qwen3_vl"
    hf = make_model(folder)
    batch = inputs()
    with torch.no_grad():
        ref = hf(**batch).logits
    bridge = AutoBridge.from_hf_pretrained(folder)
    provider = bridge.to_megatron_provider()
    provider.tensor_model_parallel_size = tp
    provider.parallel_output = False
    chunk = provider.provide_distributed_model(wrap_with_ddp=False)[0]
    ids = batch["input_ids"]
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    images = {k: batch[k] for k in ("pixel_values", "image_grid_thw")}

    def diff() -> float:
        with torch.no_grad():
            ours = chunk(ids, pos, None, images=images)
        return (ours[..., : ref.shape[-1]] - ref).abs().max().item()

    result = {"tp": tp, "max_logit_diff": diff(), "bound": logits_tolerance(ref, hf.config),
              "ref_max": ref.abs().max().item()}  # fmt: skip
    out = Path(workdir) / f"export_tp{tp}"
    bridge.save_hf_pretrained([chunk], out)
    rank0 = torch.distributed.get_rank() == 0
    result["export_differs"] = bit_identical(read_tensors(folder), read_tensors(out)) if rank0 else None
    if tp == 1:  # the comparison sees the interleaved layout and DeepStack
        model = chunk.module if hasattr(chunk, "module") else chunk
        interleaved = model.rotary_pos_emb
        from megatron.core.models.common.embeddings.rotary_pos_embedding import MultimodalRotaryEmbedding

        model.rotary_pos_emb = MultimodalRotaryEmbedding(kv_channels=16, rotary_percent=1.0, rotary_base=5e6)
        result["contiguous_mrope_diff"] = diff()
        model.rotary_pos_emb = interleaved
        model._deepstack_hooked = False  # the hooks add nothing
        result["no_deepstack_diff"] = diff()
        model._deepstack_hooked = True
        hf_params = sum(p.numel() for p in hf.parameters())
        result["params"] = [sum(p.numel() for p in model.parameters()), hf_params]
        result["generation"] = generation(hf, chunk, batch)
    emit("qwen3_vl", result)
    reset_parallel_state()
    if tp == 2:  # PP=2 splits the 4 layers 2 + 2: DeepStack's layers 0..2 are not all on the first stage
        from bridge.errors import ConfigError

        provider = bridge.to_megatron_provider()
        provider.pipeline_model_parallel_size = 2
        try:
            provider.provide_distributed_model(wrap_with_ddp=False)
            refusal = None
        except ConfigError as e:
            refusal = str(e)
        emit("qwen3_vl_pp2", {"refusal": refusal})
        reset_parallel_state()


if __name__ == "__main__":
    main(sys.argv[1])
