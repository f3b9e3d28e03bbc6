"""Per-layer flags of a config.json (which layers skip RoPE, which are global) as Megatron-Core's
integer "every N-th layer" fields (no_rope_freq, window_attn_skip_freq): layer i (0-based) is marked
where (i + 1) % N == 0. Pure Python."""

from __future__ import annotations

from collections.abc import Sequence

from bridge.models.hf_translation.common import refuse


def every_nth(flags: Sequence[bool]) -> int:
    """The N whose pattern marks exactly the `flags` layers: the first marked layer (1-based), or 0
    when no layer is marked. Raises ValueError when the flags are no such pattern."""
    marked = [bool(f) for f in flags]
    if not any(marked):
        return 0
    n = marked.index(True) + 1
    if marked != [(i + 1) % n == 0 for i in range(len(marked))]:
        raise ValueError(f"{marked} is not every N-th layer")
    return n


def no_rope_freq(field: str, value: object, uses_rope: Sequence[bool]) -> int | None:
    """Megatron-Core's no_rope_freq for per-layer RoPE flags (True: the layer rotates q/k), None when
    every layer does; a ConfigError naming `field` when the RoPE-less layers are not every N-th layer,
    or N does not divide the layer count (Megatron-Core repeats the integer pattern over whole groups)."""
    try:
        n = every_nth([not f for f in uses_rope])
    except ValueError:
        n = -1
    if n == 0:
        return None
    if n < 0 or len(uses_rope) % n:
        raise refuse(
            field,
            value,
            "Megatron-Core skips RoPE on every N-th layer (no_rope_freq N, N dividing the layer count), "
            "which this pattern is not",
            "convert a model whose RoPE-less layers are every N-th layer",
        )
    return n


def pattern_from_every_nth(layers: int, n: int | None) -> list[bool]:
    """The flags every_nth reads back as `n` (None or 0: none marked)."""
    return [bool(n) and (i + 1) % n == 0 for i in range(layers)]
