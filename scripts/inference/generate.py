"""Generate text from a Hugging Face folder or a bridge checkpoint on Megatron-Core (any TP x PP layout).

    python scripts/inference/generate.py --hf-path HF_DIR --prompt "the cat" --max-new-tokens 16
    torchrun --nproc_per_node=2 scripts/inference/generate.py --hf-path HF_DIR --prompt-ids 1,2,3 --tp 2 --json
    torchrun --nproc_per_node=2 scripts/inference/generate.py --megatron-path CKPT --prompt "the cat" --pp 2
    python scripts/inference/generate.py --hf-path VLM_DIR --image cat.png --prompt "what is this?"

--hf-path builds the model with AutoBridge and loads this rank's shards of the safetensors;
--megatron-path builds it from the HF config the checkpoint records (an import by
convert_checkpoint.py import / AutoBridge.import_ckpt, or a training run started from an HF folder or
an import: the run_config.yaml saved with it), as convert_checkpoint.py export does, or from
--hf-config HF_DIR (a folder with the config.json it was trained with), then loads the torch_dist weights. --prompt is tokenized with that folder's tokenizer (transformers.AutoTokenizer).
Greedy by default; --temperature > 0 samples (with --top-k / --top-p / --seed). Generation stops at
the model's EOS id (generation_config.json, else config.json) unless --ignore-eos.
--image PATH (repeatable; a vision-language model): the prompt becomes one user turn, the images then
the --prompt text, rendered with the folder's chat template and a generation prompt, and processed with
the folder's processor (transformers.AutoProcessor: image placeholders expanded, pixel values made), as
`processor.apply_chat_template` + `processor(text=..., images=...)` give it to transformers' generate.

Output (rank 0): the decoded text (the ids when there is no tokenizer) and a speed line on stderr;
with --json the last line is exactly {"ids": [...], "tokens_per_s": x}. Invalid input exits 2 with
one `error:` line on stderr, printed once under torchrun too (bridge.cli.user_error).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from bridge.cli.user_error import EXIT_USER_ERROR, report_user_error  # noqa: E402
from bridge.errors import ConfigError  # noqa: E402
from bridge.parallel.ranks import env_world_size  # noqa: E402

EXIT_INVALID = EXIT_USER_ERROR
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Generate tokens with a bridge model (greedy or sampled).")
    parser.add_argument("--hf-path", help="Hugging Face folder (config.json + safetensors)")
    parser.add_argument("--megatron-path", help="bridge torch_dist checkpoint (root or iter_* folder)")
    parser.add_argument(
        "--hf-config",
        help="with --megatron-path: HF folder with the config.json (and tokenizer) to build the model from "
        "(default: what the checkpoint records)",
    )
    parser.add_argument("--prompt", help="prompt text, tokenized with the model's tokenizer")
    parser.add_argument("--prompt-ids", help="prompt token ids, comma-separated: 1,2,3")
    parser.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="an image for a vision-language model (repeatable): the prompt becomes one chat user turn "
        "[images, --prompt text] rendered by the model folder's processor",
    )
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely (0 = off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (default 1)")
    parser.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's EOS id")
    parser.add_argument("--no-kv-cache", action="store_true", help="recompute the whole sequence every step")
    parser.add_argument("--json", action="store_true", help='last line: {"ids": [...], "tokens_per_s": x}')
    parser.add_argument("-v", "--verbose", action="store_true", help="detail lines too (the CPU backend's)")
    return parser.parse_args(argv)


def _fail(flag: str, value: object, rule: str, fix: str) -> ConfigError:
    shown = "(not given)" if value is None else repr(value)
    return ConfigError(f"{flag}={shown}: {rule}. Fix: {fix}.")


def parse_prompt_ids(text: str) -> list[int]:
    """'1, 2,3' -> [1, 2, 3]; anything else is a ConfigError naming --prompt-ids."""
    parts = [p.strip() for p in text.split(",")]
    bad = [p for p in parts if not p.isdigit()]
    if not parts or bad:
        raise _fail(
            "--prompt-ids",
            text,
            f"must be comma-separated non-negative integers; {bad[:3]} {'is' if len(bad) == 1 else 'are'} not",
            "pass ids such as --prompt-ids 1,2,3 (or the text with --prompt)",
        )
    return [int(p) for p in parts]


def _exactly_one(flags: str, values: tuple, what: str, fix: str) -> None:
    given = sum(v is not None for v in values)
    if given != 1:
        raise _fail(flags, f"{'both' if given else 'neither'} given", f"exactly one {what} is needed", fix)


def check_args(args: argparse.Namespace, world_size: int) -> None:
    """Every rule that needs no model, before anything heavy is imported."""
    _exactly_one(
        "--hf-path / --megatron-path",
        (args.hf_path, args.megatron_path),
        "model source",
        "pass --hf-path HF_DIR (a Hugging Face folder) or --megatron-path CKPT_DIR (a bridge checkpoint)",
    )
    _exactly_one(
        "--prompt / --prompt-ids",
        (args.prompt, args.prompt_ids),
        "prompt form",
        'pass --prompt "some text" (tokenized with the model\'s tokenizer) or --prompt-ids 1,2,3',
    )
    if args.hf_config is not None and args.megatron_path is None:
        raise _fail(
            "--hf-config",
            args.hf_config,
            "only applies to --megatron-path (a Hugging Face folder brings its own config.json)",
            "drop --hf-config, or pass the checkpoint with --megatron-path",
        )
    if args.prompt_ids is not None:
        parse_prompt_ids(args.prompt_ids)
    if args.image and args.prompt is None:
        raise _fail(
            "--image",
            args.image,
            "goes with a --prompt text (the chat turn the processor renders around the images)",
            'pass --prompt "some text" instead of --prompt-ids',
        )
    for path in args.image or ():
        if not Path(path).is_file():
            raise _fail("--image", path, "is not a file", "pass the path of an image file (PNG, JPEG, ...)")
    if args.prompt is not None and args.prompt == "":
        raise _fail("--prompt", "", "the prompt needs at least one token", "pass some text")
    if args.max_new_tokens < 1:
        raise _fail("--max-new-tokens", args.max_new_tokens, "must be >= 1", "ask for at least one token")
    if args.temperature < 0:
        raise _fail(
            "--temperature", args.temperature, "must be >= 0 (0 = greedy)", "pass 0 or a positive value"
        )
    if args.top_k < 0:
        raise _fail("--top-k", args.top_k, "must be >= 0 (0 = off)", "pass 0 or a positive integer")
    if not 0 < args.top_p <= 1:
        raise _fail("--top-p", args.top_p, "must be in (0, 1] (1 = off)", "pass a value such as 0.9, or 1")
    for flag, size in (("--tp", args.tp), ("--pp", args.pp)):
        if size < 1:
            raise _fail(flag, size, "must be a positive integer", f"pass {flag} 1 or more")
    if world_size != args.tp * args.pp:
        raise _fail(
            "--tp x --pp",
            f"{args.tp} x {args.pp} = {args.tp * args.pp}",
            f"must equal the number of processes ({world_size}): generation runs one model replica",
            f"launch with torchrun --nproc_per_node={args.tp * args.pp}, or choose --tp / --pp whose "
            f"product is {world_size}",
        )


# ---- the model -------------------------------------------------------------------------------------


class Source(NamedTuple):
    provider: Any  # GPTModelProvider: the layout set, weights not built yet
    folder: Path | None  # the HF folder of config / tokenizer / generation_config (None: unknown)
    megatron_path: str | None  # torch_dist weights to load after the build (None: the HF hook loads them)


def _layout(provider, args: argparse.Namespace) -> None:
    # one replica over all ranks; generation needs no SP (one-token steps)
    provider.tensor_model_parallel_size = args.tp
    provider.pipeline_model_parallel_size = args.pp
    provider.sequence_parallel = False


def hf_source(args: argparse.Namespace) -> Source:
    from bridge.conversion.auto_bridge import AutoBridge

    bridge = AutoBridge.from_hf_pretrained(args.hf_path)
    provider = bridge.to_megatron_provider(load_weights=True)  # this rank's shards stream in at build
    _layout(provider, args)
    return Source(provider, bridge.hf_path, None)


def _refuse_peft(megatron_path: str) -> None:
    from bridge.checkpoint import RUN_CONFIG_FILENAME, resolve_checkpoint

    folder, _ = resolve_checkpoint(megatron_path)
    run_config = Path(folder) / RUN_CONFIG_FILENAME
    if not run_config.is_file():
        return
    from bridge.config.container import ConfigContainer

    if ConfigContainer.from_yaml(run_config.read_text()).peft.scheme is not None:
        raise _fail(
            "--megatron-path",
            megatron_path,
            "this checkpoint holds PEFT adapters only (its run trained adapters on frozen weights)",
            "merge them first: scripts/conversion/convert_checkpoint.py export --megatron-path "
            f"{megatron_path} --hf-path MERGED, then generate with --hf-path MERGED",
        )


def megatron_source(args: argparse.Namespace) -> Source:
    """What convert_checkpoint.py export builds: the HF config the checkpoint records, its weights loaded."""
    from bridge.checkpoint import resolve_checkpoint
    from bridge.conversion.auto_bridge import AutoBridge
    from bridge.conversion.fsdp2_refusal import refuse_fsdp2_checkpoint

    refuse_fsdp2_checkpoint(resolve_checkpoint(args.megatron_path)[0], reader="generation")
    if args.hf_config is not None:
        bridge = AutoBridge.from_hf_pretrained(args.hf_config)
    else:
        bridge = AutoBridge.from_megatron_checkpoint(args.megatron_path)
    _refuse_peft(args.megatron_path)
    provider = bridge.to_megatron_provider(load_weights=False)
    _layout(provider, args)
    return Source(provider, bridge.hf_path, args.megatron_path)


def build(source: Source) -> list:
    """This rank's chunks, in the checkpoint's dtype (no mixed-precision wrapper, as export builds them)."""
    if source.megatron_path is None:
        return source.provider.provide_distributed_model(wrap_with_ddp=False, mixed_precision_wrapper=False)
    from bridge.checkpoint import load_checkpoint

    chunks = source.provider.provide_distributed_model(
        wrap_with_ddp=False, mixed_precision_wrapper=False, random_init=False
    )
    load_checkpoint(source.megatron_path, chunks, load_rng=False, strict=True)
    return chunks


# ---- tokenizer and EOS -----------------------------------------------------------------------------


def tokenizer_of(folder: Path | None):
    if folder is None or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def eos_ids(folder: Path | None) -> list[int] | None:
    """The EOS id(s) the HF folder's generate() would stop at: generation_config.json, else config.json."""
    if folder is None:
        return None
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                return [value] if isinstance(value, int) else list(value)
    return None


def prompt_ids(args: argparse.Namespace, vocab_size: int, folder: Path | None, tokenizer) -> list[int]:
    if args.prompt_ids is not None:
        ids = parse_prompt_ids(args.prompt_ids)
        bad = [i for i in ids if i >= vocab_size]
        if bad:
            raise _fail(
                "--prompt-ids",
                args.prompt_ids,
                f"ids must be below the model's vocab size {vocab_size}; {bad[:3]} {'is' if len(bad) == 1 else 'are'} not",
                f"use ids in 0..{vocab_size - 1}",
            )
        return ids
    if tokenizer is None:
        raise _fail(
            "--prompt",
            args.prompt,
            f"needs a tokenizer, and {folder or 'the checkpoint'} records none (no tokenizer files)",
            "pass token ids with --prompt-ids 1,2,3",
        )
    ids = list(tokenizer(args.prompt)["input_ids"])
    if not ids:
        raise _fail("--prompt", args.prompt, "tokenizes to no tokens", "pass some text the tokenizer knows")
    return ids


def image_prompt(args: argparse.Namespace, folder: Path | None) -> tuple[list[int], dict]:
    """(prompt ids, image tensors): one user turn [images, --prompt] through the folder's processor."""
    if folder is None or not _has_processor(folder):
        raise _fail(
            "--image",
            args.image,
            f"needs the model folder's processor (AutoProcessor), and {folder or 'the checkpoint'} records none",
            "generate from the Hugging Face folder (--hf-path, or --hf-config with --megatron-path)",
        )
    from PIL import Image, UnidentifiedImageError
    from transformers import AutoProcessor

    from bridge.training.data.vlm import IMAGE_KEYS

    images = []
    for path in args.image:
        try:
            images.append(Image.open(path).convert("RGB"))
        except (OSError, UnidentifiedImageError) as err:
            raise _fail(
                "--image", path, f"is not a readable image ({err})", "pass a PNG or JPEG file"
            ) from None
    processor = AutoProcessor.from_pretrained(str(folder))
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": args.prompt}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    inputs = processor(text=[text], images=[images], return_tensors="pt")
    return inputs["input_ids"][0].tolist(), {k: inputs[k] for k in IMAGE_KEYS if k in inputs}


def _has_processor(folder: Path) -> bool:
    return any((folder / n).is_file() for n in ("processor_config.json", "preprocessor_config.json"))


def _check_length(args: argparse.Namespace, n_prompt: int, max_len: int) -> None:
    if n_prompt >= max_len:  # no number of new tokens fits: the prompt is what to change
        raise _fail(
            "--prompt" if args.prompt is not None else "--prompt-ids",
            f"{n_prompt} tokens",
            f"the prompt alone fills the model's max sequence length {max_len} (max_position_embeddings), "
            "leaving no room for a new token",
            f"shorten the prompt to at most {max_len - 1} tokens",
        )
    if n_prompt + args.max_new_tokens > max_len:
        raise _fail(
            "--max-new-tokens",
            args.max_new_tokens,
            f"the prompt's {n_prompt} tokens plus the new ones exceed the model's max sequence length "
            f"{max_len} (max_position_embeddings)",
            f"ask for at most {max_len - n_prompt} new tokens or shorten the prompt",
        )


# ---- main --------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    from bridge.inference import generate

    source = hf_source(args) if args.hf_path is not None else megatron_source(args)
    provider = source.provider
    tokenizer = tokenizer_of(source.folder)
    images = None
    if args.image:
        ids, images = image_prompt(args, source.folder)
    else:
        ids = prompt_ids(args, provider.vocab_size, source.folder, tokenizer)  # checked before the build
    _check_length(args, len(ids), provider.seq_length)
    eos = None if args.ignore_eos else eos_ids(source.folder)
    result = generate(
        build(source),
        ids,
        args.max_new_tokens,
        vocab_size=provider.vocab_size,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        eos_token_id=eos,
        kv_cache=not args.no_kv_cache,
        images=images,
    )
    text = tokenizer.decode(text_ids(result.ids, eos)) if tokenizer is not None else None
    return {"ids": result.ids, "tokens_per_s": result.tokens_per_s, "text": text}


def text_ids(ids: list[int], eos: list[int] | None) -> list[int]:
    """The ids the text shows: without the EOS generation stopped at (the JSON's ids keep it)."""
    return list(ids[:-1]) if eos and ids and ids[-1] in eos else list(ids)


def _is_rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"  # no ConfigError here: it decides who prints one


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bridge.parallel.runtime import set_verbosity

    set_verbosity(args.verbose)  # quiet by default: the CPU backend's patch list only with -v
    try:
        check_args(args, env_world_size())
        out = run(args)
    except ConfigError as err:
        return report_user_error(err)
    if _is_rank_zero():
        if args.json:
            print(json.dumps({"ids": out["ids"], "tokens_per_s": out["tokens_per_s"]}), flush=True)
        else:
            print(out["text"] if out["text"] is not None else " ".join(map(str, out["ids"])), flush=True)
            print(
                f"generated {len(out['ids'])} tokens at {out['tokens_per_s']:.1f} tokens/s", file=sys.stderr
            )
    return 0


def _main_and_exit() -> int:
    try:
        return main()
    finally:  # a clean exit for gloo (torch warns about process groups left alive)
        from bridge.parallel.runtime import destroy_distributed

        destroy_distributed()


if __name__ == "__main__":
    sys.exit(_main_and_exit())
