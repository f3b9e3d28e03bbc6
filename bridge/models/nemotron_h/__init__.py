"""nemotron_h family (Nemotron-H, Nemotron Nano 2): hybrid Mamba-2 / attention / MLP models, built by the
hybrid provider kind (MambaModelProvider); presets, mapping.py and hf_config.py beside them."""

from bridge.models.nemotron_h.presets import (
    nemotron_nano_9b_v2,
    nemotron_nano_12b_v2,
    nemotronh_4b,
    nemotronh_8b,
    nemotronh_47b,
    nemotronh_56b,
)

__all__ = [
    "nemotronh_4b",
    "nemotronh_8b",
    "nemotronh_47b",
    "nemotronh_56b",
    "nemotron_nano_9b_v2",
    "nemotron_nano_12b_v2",
]
