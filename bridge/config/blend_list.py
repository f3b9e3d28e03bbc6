"""Megatron's blend list (`dataset.data_paths` with weights), parsed without the other data rules, so the
finetuning rules read it too."""

from __future__ import annotations

from bridge.errors import config_error


def blend_paths(data_paths: list[str]) -> tuple[list[str], list[float] | None]:
    """Megatron's blend list -> (paths, weights or None): ["p1", "p2"] or ["w1", "p1", "w2", "p2"]."""

    def number(text: str) -> float | None:
        try:
            return float(text)
        except (TypeError, ValueError):
            return None

    values = [str(p) for p in data_paths]
    if len(values) % 2 == 0 and values and all(number(v) is not None for v in values[0::2]):
        weights = [number(v) for v in values[0::2]]
        if any(w <= 0 for w in weights):
            raise config_error(
                "dataset.data_paths", data_paths, "blend weights must be > 0", "give positive weights"
            )
        return values[1::2], weights
    if any(number(v) is not None for v in values):
        raise config_error(
            "dataset.data_paths",
            data_paths,
            "mixes weights and paths: give either paths only, or a weight before every path",
            "write [p1, p2] or ['0.3', p1, '0.7', p2]",
        )
    return values, None
