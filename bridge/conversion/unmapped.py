"""Nothing dropped in silence: checkpoint tensors no Megatron parameter maps, on import and on export.

Import: a checkpoint tensor that no parameter maps is one ConfigError naming the first few and the count,
unless the caller asks for the omission (`omit_unmapped=True`, convert_checkpoint.py `--omit-unmapped`),
which logs every omitted name. Two kinds of tensors are not "unmapped": copies of a mapped tensor that
Megatron-Core shares (a tied checkpoint's lm_head; the embedding and output head an MTP layer of the
checkpoint repeats, checked bit-equal to the main ones), and the MTP layers a model built with fewer
`mtp_num_layers` than the checkpoint holds leaves out (the user's explicit choice, listed in the log).

Export: the written folder holds every tensor of the source checkpoint. Copies are written from their
main tensor; a source tensor no parameter holds (left out on import) is carried unchanged from the
source folder's files (listed in the log). Without those files (an export from `hf_assets`, which keeps
names only) that is one ConfigError unless `omit_unmapped=True`, which writes without them and lists them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from bridge.conversion.hf_io import DTYPES, HFCheckpoint
from bridge.conversion.model_params import EMBEDDING, OUTPUT
from bridge.conversion.registry import Family
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.parallel.wrappers import unwrap

logger = logging.getLogger(__name__)

SHOWN = 5  # names an error shows before the count


def shown(names: list[str]) -> str:
    """The first few of `names` and how many there are in all."""
    head = ", ".join(names[:SHOWN])
    return head + (f" ... ({len(names)} in all)" if len(names) > SHOWN else f" ({len(names)} in all)")


def _hf_of(family: Family, megatron: str) -> str | None:
    found = family.resolve(megatron)
    return None if found is None else found[1].hf[0]


def _mtp_layers(model) -> range:
    """The HF layer numbers of the model's MTP layers (model.layers.{num_layers + k})."""
    cfg = model.config
    return range(cfg.num_layers, cfg.num_layers + (getattr(cfg, "mtp_num_layers", None) or 0))


def copies(chunks, family: Family, names: set[str]) -> dict[str, str]:
    """Checkpoint tensors among `names` that repeat a mapped tensor Megatron-Core holds once: alias -> main.

    A tied model's lm_head (the embedding); the embedding / output head an MTP layer repeats (the family's
    mapping.MTP_COPIES rows, for the model's MTP layers)."""
    model = unwrap(chunks[0])
    out: dict[str, str] = {}
    emb, head = _hf_of(family, EMBEDDING), _hf_of(family, OUTPUT)
    if getattr(model, "share_embeddings_and_output_weights", False) and head and emb and head != emb:
        if head in names:
            out[head] = emb
    layers = _mtp_layers(model)
    for template, main in family.mtp_copies:
        pattern = re.compile(re.escape(template).replace(r"\{layer\}", r"(?P<layer>\d+)"))
        for name in names:
            m = pattern.fullmatch(name)
            if m and int(m["layer"]) in layers:
                out[name] = emb if main == EMBEDDING else head
    return out


def left_out_mtp(chunks, family: Family, hf_config, names: set[str]) -> frozenset[str]:
    """The checkpoint's MTP-layer tensors the model does not build (its mtp_num_layers is below the
    checkpoint's: the user's choice, e.g. a finetune with model.mtp_num_layers=0)."""
    keep = getattr(unwrap(chunks[0]).config, "mtp_num_layers", None) or 0
    return frozenset(family.hf_config.mtp_tensors(hf_config, names, keep))


def check_copies(ckpt, aliases: dict[str, str], tied_head: str | None) -> None:
    """ConfigError when an MTP layer's copy differs from its main tensor (Megatron-Core shares one)."""
    for alias, main in sorted(aliases.items()):
        if alias == tied_head:
            continue  # a tied checkpoint's lm_head: HF ignores it too (accepted, as before)
        if not torch.equal(ckpt.read(alias, ()), ckpt.read(main, ())):
            raise ConfigError(
                f"checkpoint {ckpt.folder}: {alias!r} differs from {main!r}; Megatron-Core's MTP layers share "
                "the model's embedding and output layer, so it cannot hold both. Fix: convert a checkpoint "
                "whose MTP copies equal the main tensors (as published), or import with model.mtp_num_layers=0"
            )


def unmapped_error(folder, names: list[str], family: Family | None = None) -> ConfigError:
    """The error for `names`, with the family's reason for the ones it knows it does not convert."""
    why = [
        reason
        for pattern, reason in (family.unmapped_why if family else ())
        if any(pattern.search(n) for n in names)
    ]
    return ConfigError(
        f"checkpoint {folder} has {len(names)} tensor(s) the model does not use: {shown(names)}; "
        "no parameter of the model built from config.json maps them (wrong architecture, or modules the "
        "conversion does not build"
        + "".join(f"; {reason}" for reason in why)
        + "). Fix: convert a checkpoint of this architecture, or leave them out on "
        "purpose with omit_unmapped=True (convert_checkpoint.py import --omit-unmapped): every omitted name "
        "is listed, and an export carries them back from the source folder"
    )


def log_left_out(folder, names: list[str], why: str) -> None:
    if names and ranks.is_rank_zero():
        logger.warning(
            "%d tensor(s) of %s left out of the model (%s): %s", len(names), folder, why, ", ".join(names)
        )


# ---------------------------------------------------------------------------------------------- export


class CompleteExporter:
    """An exporter (weight_exporter.Exporter or its stacked wrapper) that also writes the source's copies
    (`aliases`: alias -> main, in the alias's source dtype) and the carried tensors (read from `source`)."""

    def __init__(self, exporter, aliases: dict[str, tuple[str, torch.dtype]], carried: list[str], source):
        self.exporter = exporter
        self.aliases = aliases
        self.carried = carried
        self.source = source
        self._by_main: dict[str, list[str]] = {}
        for alias, (main, _) in aliases.items():
            self._by_main.setdefault(main, []).append(alias)

    def hf_tensors(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        out = list(self.exporter.hf_tensors())
        shapes = {n: s for n, s, _ in out}
        out += [(a, shapes[m], d) for a, (m, d) in self.aliases.items()]
        if self.carried:
            with HFCheckpoint(self.source) as ckpt:
                out += [(n, tuple(ckpt.shape(n)), ckpt.dtype(n)) for n in self.carried]
        return out

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.iterate(dst=None)

    def iterate(self, dst: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.exporter.iterate(dst=dst):
            yield name, tensor
            for alias in self._by_main.get(name, ()):
                yield alias, tensor.to(self.aliases[alias][1])
        if self.carried and (dst is None or ranks.rank_world()[0] == dst):
            with HFCheckpoint(self.source) as ckpt:
                for name in self.carried:
                    yield name, ckpt.read(name, ()).clone()


def complete_export(
    exporter,
    chunks,
    family: Family,
    source: dict[str, tuple],
    folder: Path | None,
    omit_unmapped: bool = False,
):
    """`exporter` writing every tensor of the source checkpoint (`source`: name -> (file, dtype, shape);
    `folder`: where it was read from). Every rank calls it (the checks raise on all ranks together)."""
    if not source:
        return exporter  # no source checkpoint (a model trained from scratch): nothing to compare
    written = {n for n, _, _ in exporter.hf_tensors()}
    aliases = {
        a: (m, DTYPES[source[a][1]]) for a, m in copies(chunks, family, set(source)).items() if m in written
    }
    missing = sorted(set(source) - written - set(aliases))
    if not missing:
        return CompleteExporter(exporter, aliases, [], None)
    have = _weights_holding(folder, missing)
    if have:
        if ranks.is_rank_zero():
            logger.warning(
                "%d tensor(s) of the source checkpoint no Megatron parameter holds are carried unchanged from %s: %s",
                len(missing),
                folder,
                ", ".join(missing),
            )
        return CompleteExporter(exporter, aliases, missing, folder)
    if not omit_unmapped:
        raise ConfigError(
            f"the export would hold {len(missing)} tensor(s) fewer than its source checkpoint ({folder}): "
            f"{shown(missing)}; no parameter of the model holds them and {folder} has no weights to carry "
            "them from. Fix: export with --hf-config <the source Hugging Face folder> (its files are carried "
            "unchanged), or write the folder without them on purpose with omit_unmapped=True "
            "(convert_checkpoint.py export --omit-unmapped; they are listed)"
        )
    if ranks.is_rank_zero():
        logger.warning(
            "omit_unmapped=True: the export leaves out %d tensor(s) of its source checkpoint: %s",
            len(missing),
            ", ".join(missing),
        )
    return CompleteExporter(exporter, aliases, [], None)


def _weights_holding(folder: Path | None, names: list[str]) -> bool:
    """Whether `folder`'s safetensors hold every one of `names` (with the shape the source recorded)."""
    if folder is None:
        return False
    try:
        with HFCheckpoint(folder) as ckpt:
            return all(n in ckpt.tensors for n in names)
    except ConfigError:
        return False
