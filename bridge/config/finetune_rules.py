"""The rules of finetuning runs: SFT / chat data, sequence packing, PEFT adapters, and starting from a
Hugging Face folder. Called by bridge.config.validation (one place validates a run)."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from bridge.checkpoint.paths import is_hf_folder
from bridge.config import sections as S
from bridge.config.blend_list import blend_paths
from bridge.errors import config_error
from bridge.models.hf_architecture import architecture_fields
from bridge.models.hybrid_provider import MambaModelProvider
from bridge.peft.names import TARGETS as PEFT_ALL_TARGETS

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer

SFT_KINDS = ("sft", "chat")
SFT_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
# strategies whose wrappers bucket only trainable parameters (frozen base weights stay out of the grads)
PEFT_STRATEGIES = ("megatron", "ddp")


def _check_vlm_data(cfg: ConfigContainer) -> None:
    """Image-text conversations (bridge.training.data.vlm, or mock_vlm's generated ones): a vision-language
    model and its processor."""
    kind = cfg.dataset.kind
    if not getattr(cfg.model, "vlm_config", None):
        raise config_error(
            "dataset.kind",
            kind,
            "image-text conversations need a vision-language model, and the model section is a text model",
            "start from a vision-language Hugging Face folder (checkpoint.pretrained_checkpoint=<folder>)",
        )
    if cfg.tokenizer.tokenizer_type != "HuggingFaceTokenizer":
        raise config_error(
            "tokenizer.tokenizer_type",
            cfg.tokenizer.tokenizer_type,
            f"dataset.kind={kind} reads the model's processor (chat template, image processor) from the tokenizer "
            "folder",
            "set tokenizer.tokenizer_type=HuggingFaceTokenizer tokenizer.tokenizer_model=<the model's HF folder>",
        )
    for path in cfg.dataset.data_paths:
        # a file of conversations, or a datasets folder (no suffix: save_to_disk or a folder of data files)
        if PurePath(str(path)).suffix not in ("", *SFT_FILE_SUFFIXES):
            raise config_error(
                "dataset.data_paths",
                path,
                "dataset.kind=vlm reads conversations from .jsonl, .json or .parquet files or datasets folders",
                "give such files or folders",
            )


def check_sft_data(cfg: ConfigContainer, cuda: bool, running: frozenset[str] | None = None) -> None:
    """`running`: the performance settings this machine runs (bridge.config.performance); None reads
    the requested values."""
    d = cfg.dataset
    if d.truncation not in S.TRUNCATIONS:
        raise config_error(
            "dataset.truncation", d.truncation, f"must be one of {', '.join(S.TRUNCATIONS)}", "pick one"
        )
    if d.pad_seq_to_mult is not None and not d.packed_sequence_size:
        raise config_error(
            "dataset.pad_seq_to_mult",
            d.pad_seq_to_mult,
            "pads the samples of packed rows, and dataset.packed_sequence_size is 0 (no packing)",
            "set dataset.packed_sequence_size, or remove dataset.pad_seq_to_mult",
        )
    # preference data: bridge.config.preference_rules says why its pairs are not packed
    if d.packed_sequence_size and d.kind not in (*SFT_KINDS, "vlm", "preference"):
        raise config_error(
            "dataset.packed_sequence_size",
            d.packed_sequence_size,
            f"packing is for finetuning data (dataset.kind=sft, chat or vlm), not dataset.kind={d.kind}, "
            "which is already cut into seq_length windows",
            "set dataset.packed_sequence_size=0, or use dataset.kind=sft / chat / vlm",
        )
    if d.kind in ("vlm", "mock_vlm"):
        _check_vlm_data(cfg)
        if d.packed_sequence_size:  # vlm (mock_vlm's rows are refused packing above)
            _check_vlm_packing(cfg, running)
            _check_packing(cfg, cuda)
    if d.kind != "vlm" and d.skip_malformed_samples:
        raise config_error(
            "dataset.skip_malformed_samples",
            True,
            f"skips malformed image-text conversations (dataset.kind=vlm), not dataset.kind={d.kind} records",
            "set dataset.skip_malformed_samples=false",
        )
    if d.kind not in SFT_KINDS:
        return
    for path in blend_paths(d.data_paths)[0]:  # a blend list's weights are no files
        if not str(path).endswith(SFT_FILE_SUFFIXES):
            raise config_error(
                "dataset.data_paths",
                path,
                f"dataset.kind={d.kind} reads {', '.join(SFT_FILE_SUFFIXES)} files (through the datasets library)",
                "give JSON Lines, JSON or Parquet files",
            )
    if d.kind == "chat" and cfg.tokenizer.tokenizer_type != "HuggingFaceTokenizer":
        raise config_error(
            "tokenizer.tokenizer_type",
            cfg.tokenizer.tokenizer_type,
            "dataset.kind=chat renders messages with the tokenizer's chat template, which a NullTokenizer lacks",
            "set tokenizer.tokenizer_type=HuggingFaceTokenizer tokenizer.tokenizer_model=<folder with a chat "
            "template>",
        )
    _check_packing(cfg, cuda)


def _check_packing(cfg: ConfigContainer, cuda: bool) -> None:
    """Packed rows (sft / chat / vlm): one row per micro batch, within model.seq_length."""
    n = cfg.dataset.packed_sequence_size
    if n:
        if cfg.train.micro_batch_size != 1:
            raise config_error(
                "train.micro_batch_size",
                cfg.train.micro_batch_size,
                "with packed sequences a micro batch is one packed row (the packing already fills it)",
                "set train.micro_batch_size=1 (raise dataset.packed_sequence_size for more tokens per step)",
            )
        if n > cfg.model.seq_length:
            raise config_error(
                "dataset.packed_sequence_size",
                n,
                f"a packed row is longer than model.seq_length={cfg.model.seq_length}",
                f"set model.seq_length={n} or a smaller packed_sequence_size",
            )
        _check_pad_seq_to_mult(cfg, n)
        if cfg.model.window_size is not None and not cuda:
            raise config_error(
                "model.window_size",
                cfg.model.window_size,
                "packed rows on CPU run through bridge's sdpa attention, which has no sliding window",
                "set dataset.packed_sequence_size=0 for this model on CPU",
            )


def _check_vlm_packing(cfg: ConfigContainer, running: frozenset[str] | None) -> None:
    """Packed image-text rows: only families whose folder allows it (PACKING_REFUSED = None, tested per
    conversation against transformers); M-RoPE without TE's fused THD RoPE kernel (where it would run:
    CUDA and Transformer Engine, else the setting is off anyway)."""
    n, model = cfg.dataset.packed_sequence_size, cfg.model
    why = model.packing_refused()
    if why is not None:
        raise config_error(
            "dataset.packed_sequence_size",
            n,
            f"packing image-text conversations is refused for the {model.vision_family()} family: {why}",
            "set dataset.packed_sequence_size=0 (one conversation per row)",
        )
    cp = model.context_parallel_size or 1
    if cp > 1:
        raise config_error(
            "dataset.packed_sequence_size",
            n,
            f"packed image-text rows under context parallelism (cp={cp}): each context-parallel rank takes "
            "chunks of every segment, while the vision-language model merges the images over the whole row "
            "and keeps the row's chunks",
            "set dataset.packed_sequence_size=0, or model.context_parallel_size=1",
        )
    fused = model.apply_rope_fusion if running is None else "apply_rope_fusion" in running
    if model.position_embedding_type == "mrope" and fused:
        raise config_error(
            "model.apply_rope_fusion",
            True,
            "a packed row's M-RoPE ids are per token (each conversation's own); Transformer Engine's "
            "fused THD RoPE kernel reads the rotary table from 0 in every segment instead",
            "set model.apply_rope_fusion=false, or dataset.packed_sequence_size=0",
        )


def packing_multiple(cfg: ConfigContainer) -> int:
    """What every packed sample's segment is padded to a multiple of: dataset.pad_seq_to_mult, or
    2*cp with context parallelism (each segment splits into 2*cp chunks over the CP ranks), else 1."""
    cp = cfg.model.context_parallel_size or 1
    given = cfg.dataset.pad_seq_to_mult
    return int(given) if given is not None else (2 * cp if cp > 1 else 1)


def _check_pad_seq_to_mult(cfg: ConfigContainer, n: int) -> None:
    given, cp = cfg.dataset.pad_seq_to_mult, cfg.model.context_parallel_size or 1
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
        raise config_error(
            "dataset.pad_seq_to_mult", given, "must be a positive integer or null", "give e.g. 4"
        )
    m = packing_multiple(cfg)
    if cp > 1 and m % (2 * cp):
        raise config_error(
            "dataset.pad_seq_to_mult",
            given,
            f"with context parallelism every packed sample splits into 2*cp = {2 * cp} chunks, so its padding "
            f"multiple must be a multiple of {2 * cp}",
            f"set dataset.pad_seq_to_mult={2 * cp} (or null, which means 2*cp)",
        )
    if n % m:
        raise config_error(
            "dataset.packed_sequence_size",
            n,
            f"packed samples are padded to multiples of {m} (dataset.pad_seq_to_mult, 2*cp with context "
            "parallelism), so the row length must be one too",
            f"use a packed_sequence_size that is a multiple of {m}",
        )


_PATTERN_TARGETS = {
    "M": ("in_proj", "out_proj"),
    "*": ("linear_qkv", "linear_proj"),
    "-": ("linear_fc1", "linear_fc2"),
    "E": ("linear_fc1", "linear_fc2"),
}


def _layer_targets(model) -> set[str]:
    """The adapter targets some layer of the model holds: a hybrid's by its layer pattern; a GPT's are its
    attention's and MLP's, and in_proj / out_proj with Gated DeltaNet layers."""
    if isinstance(model, MambaModelProvider):
        pattern = model.hybrid_override_pattern or ""
        return {t for kind in set(pattern) for t in _PATTERN_TARGETS.get(kind, ())}
    mixers = ("in_proj", "out_proj")
    found = set(PEFT_ALL_TARGETS) - set(mixers)
    if getattr(model, "experimental_attention_variant", None) == "gated_delta_net":
        found |= set(mixers)
    return found


def _check_expert_targets(cfg: ConfigContainer, targets: list[str], running: frozenset[str] | None) -> None:
    """linear_fc1 / linear_fc2 of a mixture-of-experts model adapt every routed expert (bridge.peft.apply):
    one linear per expert (Megatron-Core's sequential experts), not the grouped-GEMM weights, and not a
    layer's shared experts."""
    experts = [t for t in targets if t in ("linear_fc1", "linear_fc2")]
    m = cfg.model
    if not (m.num_moe_experts and experts):
        return
    attention_only = "peft.target_modules=[linear_qkv,linear_proj]"
    if m.moe_shared_expert_intermediate_size:
        raise config_error(
            "peft.target_modules",
            targets,
            f"{', '.join(experts)} adapt every expert of a mixture-of-experts layer, and this model's layers "
            f"also hold shared experts (model.moe_shared_expert_intermediate_size="
            f"{m.moe_shared_expert_intermediate_size}), which take no adapters in bridge",
            f"adapt the attention only: {attention_only}",
        )
    etp = m.effective_expert_tensor_parallel_size()  # unset: the tensor-parallel size
    if etp > 1:
        raise config_error(
            "peft.target_modules",
            targets,
            f"{', '.join(experts)} adapt every routed expert whole, and model.expert_tensor_parallel_size={etp} "
            "splits the experts' linears over ranks",
            f"set model.expert_tensor_parallel_size=1, or adapt the attention only: {attention_only}",
        )
    grouped = m.moe_grouped_gemm if running is None else "moe_grouped_gemm" in running
    if grouped:
        raise config_error(
            "peft.target_modules",
            targets,
            f"{', '.join(experts)} adapt every routed expert through its own linear layer, and with "
            "model.moe_grouped_gemm=true (active here) the experts are grouped-GEMM weights, which take no "
            "adapters in bridge",
            f"set model.moe_grouped_gemm=false, or adapt the attention only: {attention_only}",
        )


def check_peft(cfg: ConfigContainer, running: frozenset[str] | None = None) -> None:
    """`running`: the performance settings this machine runs (bridge.config.performance); None reads the
    requested values."""
    p = cfg.peft
    if p.scheme is None:
        return
    if p.scheme not in S.PEFT_SCHEMES:
        raise config_error(
            "peft.scheme", p.scheme, f"must be null or one of {', '.join(S.PEFT_SCHEMES)}", "pick one"
        )
    targets = list(p.target_modules)
    unknown = [t for t in targets if t not in PEFT_ALL_TARGETS]
    if not targets or unknown or len(set(targets)) != len(targets):
        raise config_error(
            "peft.target_modules",
            targets,
            f"must be a non-empty list without repeats of {', '.join(PEFT_ALL_TARGETS)}"
            + (f" ({unknown[0]!r} is not one)" if unknown else ""),
            "e.g. peft.target_modules=[linear_qkv,linear_proj]",
        )
    if isinstance(p.dim, bool) or not isinstance(p.dim, int) or p.dim < 1:
        raise config_error("peft.dim", p.dim, "the adapter rank must be an integer >= 1", "e.g. peft.dim=16")
    if not p.alpha > 0:
        raise config_error(
            "peft.alpha", p.alpha, "must be > 0 (the adapter scale is alpha / dim)", "e.g. peft.alpha=32"
        )
    if not 0.0 <= p.dropout < 1.0:
        raise config_error("peft.dropout", p.dropout, "must be in [0, 1)", "e.g. peft.dropout=0.05")
    if cfg.distributed.strategy not in PEFT_STRATEGIES:
        raise config_error(
            "distributed.strategy",
            cfg.distributed.strategy,
            f"peft.scheme={p.scheme} runs with strategies {', '.join(PEFT_STRATEGIES)} (adapters are small: "
            "sharding them buys nothing, and the sharded strategies would also shard the frozen base)",
            "use distributed.strategy=megatron",
        )
    absent = [t for t in targets if t not in _layer_targets(cfg.model)]
    if absent:
        raise config_error(
            "peft.target_modules",
            targets,
            f"{', '.join(absent)}: no layer of the model has it (in_proj / out_proj are the projections of "
            "Mamba-2 mixers, `M` in a hybrid's pattern, and of Gated DeltaNet layers; linear_qkv / linear_proj "
            "of attention layers, `*`; linear_fc1 / linear_fc2 of MLP and MoE layers, `-` / `E`)",
            f"remove {', '.join(absent)} from peft.target_modules",
        )
    check_mla_targets(cfg.model, targets)
    _check_expert_targets(cfg, targets, running)
    if not cfg.checkpoint.pretrained_checkpoint:
        raise config_error(
            "checkpoint.pretrained_checkpoint",
            None,
            f"peft.scheme={p.scheme} trains adapters on frozen pretrained weights, so it needs them (adapter "
            "checkpoints hold only the adapters)",
            "set checkpoint.pretrained_checkpoint=<Hugging Face folder or torch_dist checkpoint>",
        )


def mla_attention_targets(q_lora_rank: int | None) -> list[str]:
    """Every attention linear of a multi-latent attention layer, as peft.target_modules names."""
    q = ["linear_q_proj"] if q_lora_rank is None else ["linear_q_down_proj", "linear_q_up_proj"]
    return [*q, "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj"]


def check_mla_targets(model, targets: list[str]) -> None:
    """Attention targets must be linears the model's attention has: multi-latent attention has no
    linear_qkv, and its query is one projection (q_lora_rank None) or a down / up pair."""
    mla = bool(getattr(model, "multi_latent_attention", False))
    q_lora_rank = getattr(model, "q_lora_rank", None)
    present = set(mla_attention_targets(q_lora_rank)) if mla else {"linear_qkv", "linear_proj"}
    absent = [t for t in targets if t not in present and t in {"linear_qkv", *S.MLA_PEFT_TARGETS}]
    if not absent:
        return
    if mla:
        what = (
            f"multi-latent attention (model.multi_latent_attention=true, model.q_lora_rank={q_lora_rank}) has no "
            f"{', '.join(absent)}; its linears are {', '.join(mla_attention_targets(q_lora_rank))}"
        )
    else:
        what = f"{', '.join(absent)} are multi-latent attention's linears, and model.multi_latent_attention is false"
    kept = [t for t in targets if t not in absent]
    fix = mla_attention_targets(q_lora_rank) if mla else ["linear_qkv", "linear_proj"]
    raise config_error(
        "peft.target_modules",
        targets,
        what,
        f"e.g. peft.target_modules=[{','.join(fix)}]" + (f" (or [{','.join(kept)}])" if kept else ""),
    )


def check_finetune_start(cfg: ConfigContainer) -> None:
    """finetune() starts from trained weights: checkpoint.pretrained_checkpoint or checkpoint.load."""
    c = cfg.checkpoint
    if not (c.pretrained_checkpoint or c.load):
        raise config_error(
            "checkpoint.pretrained_checkpoint",
            None,
            "finetuning starts from trained weights, and neither checkpoint.pretrained_checkpoint nor "
            "checkpoint.load is set",
            "set checkpoint.pretrained_checkpoint=<Hugging Face folder or torch_dist checkpoint> (or "
            "checkpoint.load=<a finetuning run's checkpoints> to resume one)",
        )


def check_hf_start(cfg: ConfigContainer) -> None:
    """With a Hugging Face folder as checkpoint.pretrained_checkpoint, every architecture field of the
    model section must be what the folder's config.json says (the weights have those shapes)."""
    path = cfg.checkpoint.pretrained_checkpoint
    if not is_hf_folder(path):
        return

    for name, want in architecture_fields(path).items():
        have = getattr(cfg.model, name)
        if have != want:
            raise config_error(
                f"model.{name}",
                have,
                f"checkpoint.pretrained_checkpoint={path!r} is a Hugging Face model whose config.json gives "
                f"{name}={want!r}, and its weights have that shape",
                f"drop the model.{name} override (the model section follows the folder's config.json)",
            )
