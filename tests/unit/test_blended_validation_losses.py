"""Per-source validation losses of blended finetuning data (issue 48): the validation step reports each
source's loss (named by its path) beside the blend's, and each equals the mean token loss of the model over
that source's validation samples computed on their own with transformers' model of the same weights.

Tolerance: fp32 throughout; a 2-layer, 64-wide model's per-token cross entropy (~log 60 = 4.1) summed over
a few dozen tokens differs between Megatron-Core's and transformers' kernels by float32 rounding (~1e-7
relative per operation, a few hundred operations deep): 1e-5 relative bounds it with margin.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch

from bridge.training.preference import dpo_loss_func, preference_losses
from bridge.training.source_losses import by_source, source_means
from tests.finetune_fixtures import make_tiny_llama

REL = 1e-5


def _jsonl(path: Path, animal: str, words: list[str]) -> str:
    rows = [{"input": f"{animal} {w} sat on the mat", "output": f"yes {w} {animal}"} for w in words]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _run(tmp_path: Path, record: list):
    import bridge.training.forward_step as fs
    from bridge.config.compose import compose
    from bridge.parallel import runtime
    from bridge.training import finetune
    from recipes.llama_finetune import llama32_1b_sft_config

    hf = make_tiny_llama(tmp_path / "hf")
    a = _jsonl(tmp_path / "cats.jsonl", "cat", ["red", "blue", "big", "small", "hot", "cold"])
    b = _jsonl(tmp_path / "dogs.jsonl", "dog", ["red", "blue", "fast", "slow", "one", "two"])
    overrides = [
        f"checkpoint.pretrained_checkpoint={hf}", f"tokenizer.tokenizer_model={hf}",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer", "dataset.kind=sft",
        f"dataset.data_paths=['0.6',{a},'0.4',{b}]", 'dataset.split="1,1,0"', "dataset.packed_sequence_size=0",
        "dataset.num_workers=0", f"dataset.cache_dir={tmp_path}/cache", "model.seq_length=16",
        # micro batches of 2 rows: a micro batch mixes the sources
        "train.global_batch_size=4", "train.micro_batch_size=2", "train.train_iters=1",
        "validation.eval_interval=1", "validation.eval_iters=2",
        # the first step runs at the warmup's lr 0, without weight decay: the evaluated weights are the
        # Hugging Face folder's
        "optimizer.lr=1e-3", "optimizer.min_lr=0.0", "scheduler.lr_warmup_iters=5",
        "scheduler.lr_decay_iters=10", "optimizer.weight_decay=0.0",
        "scheduler.start_weight_decay=0.0", "scheduler.end_weight_decay=0.0",
        "checkpoint.save=null", "checkpoint.save_interval=0", "logger.tensorboard_dir=null",
    ]  # fmt: skip
    cfg, _ = compose(llama32_1b_sft_config(), overrides=overrides)
    original = getattr(fs.get_batch, "__wrapped__", fs.get_batch)

    def get_batch(data_iterator):
        batch = original(data_iterator)
        if "source" in batch:  # the validation passes' micro batches
            record.append({k: batch[k].clone() for k in ("tokens", "labels", "loss_mask", "source")})
        return batch

    fs.get_batch = get_batch
    try:
        return hf, (a, b), finetune(cfg)
    finally:
        fs.get_batch = original
        runtime.destroy_distributed()


@pytest.mark.slow  # one short finetune in process (~20 s on 2 cores); CI's full suite runs it on both legs
def test_each_source_loss_equals_transformers_on_that_source_alone(tmp_path, caplog):
    from transformers import AutoModelForCausalLM

    caplog.set_level(logging.INFO)
    record: list[dict] = []
    hf, (a, b), result = _run(tmp_path, record)
    got = result.validation_source_losses[1]
    assert sorted(got) == sorted([a, b])
    tokens, labels, mask, source = (torch.cat([r[k] for r in record]) for k in record[0])
    assert tokens.shape[0] == 2 * 4  # eval_iters x global batch
    # the tags are right: a cats.jsonl row starts with "cat" (id of the tokenizer's word)
    from transformers import AutoTokenizer

    cat, dog = AutoTokenizer.from_pretrained(hf).convert_tokens_to_ids(["cat", "dog"])
    which = source.argmax(-1)
    assert {int(j) for j in which} == {0, 1}
    for row, j in zip(tokens.tolist(), which.tolist(), strict=True):
        assert (cat if j == 0 else dog) in row[:3], (row, j)

    model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
    sums, counts = {}, {}
    for j, path in enumerate((a, b)):
        rows = which == j
        with torch.no_grad():  # this source's samples alone through transformers' model
            logits = model(input_ids=tokens[rows]).logits.float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels[rows], reduction="none")
        sums[path], counts[path] = float((ce * mask[rows]).sum()), float(mask[rows].sum())
        ref = sums[path] / counts[path]
        assert abs(got[path] - ref) / ref < REL, (path, got[path], ref)
    # the blend's loss is unchanged: the token mean over all sources
    blend = sum(sums.values()) / sum(counts.values())
    assert abs(result.validation_losses[1] - blend) / blend < REL
    assert abs(got[a] - got[b]) > 1e-3  # two different numbers: a mix-up would show
    # logged as Megatron-LM names its validation sets: one line per source, by path
    assert f" validation-{a} loss at iteration 1 | lm loss value: {got[a]:.6E}" in caplog.text
    assert f" validation-{b} loss at iteration 1 | lm loss value: {got[b]:.6E}" in caplog.text


def test_dpo_reports_each_sources_mean_over_its_pairs():
    """DPO's per-source report equals the paper's loss (eq. 7) averaged over that source's pairs alone."""
    from bridge.config.run_plan import DPOPlan

    torch.manual_seed(0)
    pairs, s = 5, 6
    plan = DPOPlan(beta=0.3, loss_type="sigmoid", label_smoothing=0.0, reference="frozen_copy")
    output = torch.rand(2 * pairs, s) * 4  # per-token cross entropy of the rows
    mask = (torch.rand(2 * pairs, s) > 0.3).float()
    reference = -torch.rand(pairs, 2) * 20
    which = torch.tensor([0, 2, 0, 1, 2])
    source = torch.nn.functional.one_hot(which, 3).float()
    _, _, report = dpo_loss_func(plan, mask, reference, output, source=source)
    means = source_means({k: v for k, v in report.items()}, "dpo loss", ("x", "y", "z"))
    logps = -(output * mask).sum(-1).view(-1, 2)
    for j, name in enumerate(("x", "y", "z")):
        rows = which == j
        z = (logps[rows, 0] - logps[rows, 1]) - (reference[rows, 0] - reference[rows, 1])
        ref = float(-torch.nn.functional.logsigmoid(0.3 * z).mean())
        assert means[name] == pytest.approx(ref, rel=1e-6)
    losses, _, _ = preference_losses(logps, reference, plan, mask.sum(-1).view(-1, 2))
    assert report["dpo loss"][0] == pytest.approx(float(losses.sum()), rel=1e-6)
    assert by_source("dpo loss") in report and math.isfinite(means["x"])
