"""The README's finetuning flow on CPU: a tiny Hugging Face Llama (transformers' own class) finetuned
with LoRA on chat data at TP=2 (2 gloo ranks) through run_recipe.py, the loss going down on a
memorisation set, a resumed run continuing with the same losses, and the exports: merged weights that
transformers loads, and a PEFT adapter folder that peft loads on the base, with equal logits."""

from __future__ import annotations

import re

import pytest

from tests.finetune_fixtures import make_tiny_llama, write_chat_jsonl
from tests.functional.launch import REPO_ROOT, assert_ok, torchrun

RUN = REPO_ROOT / "scripts/training/run_recipe.py"
CONVERT = REPO_ROOT / "scripts/conversion/convert_checkpoint.py"


def _args(hf, data, ckpt, iters: int, *extra: str) -> list[str]:
    return [
        "--recipe", "llama32_1b_peft_config",
        f"checkpoint.pretrained_checkpoint={hf}", "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}", "dataset.kind=chat", f"dataset.data_paths=[{data}]",
        "model.tensor_model_parallel_size=2", f"checkpoint.save={ckpt}", "model.seq_length=64",
        "dataset.packed_sequence_size=64", f"train.train_iters={iters}", "train.global_batch_size=4",
        "scheduler.lr_warmup_iters=2", "optimizer.lr=0.01", "validation.eval_interval=0", "dataset.split=\"1,0,0\"",
        "peft.dim=8", "peft.alpha=16", f"logger.tensorboard_dir={ckpt}_tb", *extra,
    ]  # fmt: skip


def _losses(out: str) -> dict[int, float]:
    return {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r" iteration\s+(\d+)/\s*\d+ \|.*?\| lm loss: ([^ ]+) \|", out)
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    hf = make_tiny_llama(root / "hf")
    data = root / "chat.jsonl"
    write_chat_jsonl(data, 8, seed=3)  # 8 conversations: a set the adapters can memorise
    return root, hf, data


@pytest.mark.slow
def test_lora_chat_finetune_tp2_loss_goes_down_resumes_and_exports(tiny):
    root, hf, data = tiny
    ckpt = root / "ckpt"
    out = assert_ok(torchrun(RUN, 2, *_args(hf, data, ckpt, 20, "checkpoint.save_interval=10"), timeout=400))
    losses = _losses(out)
    assert sorted(losses) == list(range(1, 21)), out[-3000:]
    # memorising: down steadily (a random base and LoRA r 8 on 8 conversations: about 5.5 -> 4.8 in 20 steps)
    assert sum(losses[i] for i in (18, 19, 20)) / 3 < losses[1] - 0.4, losses
    assert all(losses[i + 1] < losses[i] for i in range(12, 20)), losses
    assert re.search(r"M trainable \(lora adapters\)", out) and "PEFT adapters only" in out

    # the same run stopped at 10 and resumed from its checkpoint takes the same steps 11..20
    resumed = root / "resumed"
    first = _args(hf, data, resumed, 20, "checkpoint.save_interval=10", "train.exit_interval=10")
    assert sorted(_losses(assert_ok(torchrun(RUN, 2, *first, timeout=300)))) == list(range(1, 11))
    again = _losses(
        assert_ok(torchrun(RUN, 2, *_args(hf, data, resumed, 20, f"checkpoint.load={resumed}"), timeout=300))
    )
    assert sorted(again) == list(range(11, 21))
    for step in again:
        assert abs(again[step] - losses[step]) <= 1e-5 * max(1.0, abs(losses[step])), (step, again, losses)

    merged, adapter = root / "merged", root / "adapter"
    assert_ok(
        torchrun(CONVERT, 2, "export", "--megatron-path", str(ckpt), "--hf-path", str(merged), "--tp", "2")
    )
    assert_ok(
        torchrun(
            CONVERT,
            2,
            "export",
            "--megatron-path",
            str(ckpt),
            "--hf-path",
            str(adapter),
            "--tp",
            "2",
            "--adapter-only",
        )
    )
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[4, 47, 15, 40, 6, 5, 59, 31, 6, 2]])
    with torch.no_grad():
        base_logits = AutoModelForCausalLM.from_pretrained(hf).eval()(ids).logits
        merged_logits = AutoModelForCausalLM.from_pretrained(merged).eval()(ids).logits
        peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(hf), adapter).eval()
        peft_logits = peft_model(ids).logits
    torch.testing.assert_close(merged_logits, peft_logits, rtol=1e-5, atol=1e-5)
    assert (merged_logits - base_logits).abs().max() > 1e-2  # the adapters changed the model
