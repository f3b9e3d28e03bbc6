"""A tiny text model and small local lm-eval tasks (lm-eval's YAML format, data files written here, no hub).

The model is tests/functional/workers/convert_models.py's tiny Llama (fp32) with a whitespace word-level
tokenizer (`w0` .. `w248`; BOS `w1`, EOS `w2` as the config's ids), so that task text tokenizes to ids.
Three tasks cover lm-eval's three request kinds: `tiny_mc` (multiple choice: loglikelihood), `tiny_ppl`
(loglikelihood_rolling, some documents longer than the model's 64 positions so the rolling windows
matter) and `tiny_gen` (generate_until with an `until` word and max_gen_toks).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TASKS = ("tiny_mc", "tiny_ppl", "tiny_gen")
GEN_TOKENS = 6


def save_text_model(folder: Path, seed: int = 0) -> object:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from tests.functional.workers.convert_models import VOCAB, save_hf_model

    model = save_hf_model("llama", folder, seed=seed, with_tokenizer=False, bos_token_id=1, eos_token_id=2)
    vocab = {f"w{i}": i for i in range(VOCAB - 1)} | {"<unk>": VOCAB - 1}
    raw = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="w1", eos_token="w2")
    tok.save_pretrained(str(folder))
    return model


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(3, 240)}" for _ in range(n))


def write_tasks(root: Path, gen_answers: list[str] | None = None, seed: int = 0) -> Path:
    """The three tasks under root (YAML + JSONL); `gen_answers` are tiny_gen's targets (default random)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    mc = [
        {
            "ctx": _words(rng, rng.randrange(3, 12)),
            "choices": [_words(rng, rng.randrange(1, 4)) for _ in range(3)],
        }
        for _ in range(12)
    ]
    for i, doc in enumerate(mc):
        doc["gold"] = i % 3
    ppl = [{"text": _words(rng, n)} for n in (5, 20, 40, 90, 150, 7)]
    gen = [{"ctx": _words(rng, rng.randrange(3, 10))} for _ in range(8)]
    answers = gen_answers or [_words(rng, 2) for _ in gen]
    for doc, answer in zip(gen, answers, strict=True):
        doc["answer"] = answer
    for name, docs in (("tiny_mc", mc), ("tiny_ppl", ppl), ("tiny_gen", gen)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    common = "dataset_path: json\ntest_split: train\n"

    def data(name: str) -> str:
        return f"dataset_kwargs:\n  data_files:\n    train: {root / (name + '.jsonl')}\n"

    (root / "tiny_mc.yaml").write_text(
        f"task: tiny_mc\n{common}{data('tiny_mc')}output_type: multiple_choice\n"
        "doc_to_text: '{{ctx}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: '{{gold}}'\n"
        "metric_list:\n  - metric: acc\n"
    )
    (root / "tiny_ppl.yaml").write_text(
        f"task: tiny_ppl\n{common}{data('tiny_ppl')}output_type: loglikelihood_rolling\n"
        "doc_to_text: ''\ndoc_to_target: '{{text}}'\n"
        "metric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n  - metric: bits_per_byte\n"
    )
    (root / "tiny_gen.yaml").write_text(
        f"task: tiny_gen\n{common}{data('tiny_gen')}output_type: generate_until\n"
        "doc_to_text: '{{ctx}}'\ndoc_to_target: '{{answer}}'\n"
        f"generation_kwargs:\n  until: ['w7']\n  max_gen_toks: {GEN_TOKENS}\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n"
    )
    return root


def gen_contexts(root: Path) -> list[str]:
    return [json.loads(line)["ctx"] for line in (root / "tiny_gen.jsonl").read_text().splitlines()]


def per_sample(results: dict) -> dict[str, list]:
    """task -> each document's responses (lm-eval's `resps`, in document order)."""
    out = {}
    for task, samples in results["samples"].items():
        out[task] = [s["resps"] for s in sorted(samples, key=lambda s: s["doc_id"])]
    return out


def write_training_inputs(root: Path) -> Path:
    """root/hf (the text model), root/tasks, root/sft.jsonl: a finetuning run with benchmarks."""
    from tests.finetune_fixtures import write_sft_jsonl

    save_text_model(root / "hf")
    write_tasks(root / "tasks")
    write_sft_jsonl(root / "sft.jsonl", 16)
    return root


def training_config(root: Path, *extra: str):
    """A tiny SFT run from root/hf with lr 1e-30 (the weights stay the folder's: see
    tests/unit/test_training_benchmarks.py); `extra` overrides replace the base's of the same key."""
    from bridge.config.compose import compose
    from recipes import get_recipe

    hf = root / "hf"
    base = [
        f"checkpoint.pretrained_checkpoint={hf}",
        "tokenizer.tokenizer_type=HuggingFaceTokenizer",
        f"tokenizer.tokenizer_model={hf}",
        "dataset.kind=sft",
        f"dataset.data_paths=[{root}/sft.jsonl]",
        'dataset.split="1,0,0"',
        f"dataset.cache_dir={root}/cache",
        "model.seq_length=64",
        "dataset.packed_sequence_size=64",
        "model.tensor_model_parallel_size=1",
        "model.sequence_parallel=False",
        "mixed_precision.precision=fp32",
        "train.train_iters=2",
        "train.global_batch_size=2",
        "train.micro_batch_size=1",
        "scheduler.lr_warmup_iters=0",
        "optimizer.lr=1e-30",
        "optimizer.min_lr=1e-30",
        "validation.eval_interval=0",
        "validation.eval_iters=0",
        "checkpoint.save=null",
        "checkpoint.save_interval=0",
        "logger.log_interval=1",
        "logger.tensorboard_dir=null",
        "dataset.num_workers=0",
        f"validation.lm_eval_include_path={root}/tasks",
    ]
    given = {e.split("=")[0] for e in extra}  # an override in `extra` replaces the base's
    overrides = [o for o in base if o.split("=")[0] not in given] + list(extra)
    return compose(get_recipe("llama32_1b_sft_config")(), overrides=overrides)[0]
