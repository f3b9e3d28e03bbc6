"""nemotron family (Nemotron-4 / Minitron): provider presets; mapping.py and hf_config.py beside them."""

from bridge.models.nemotron.presets import minitron_4b, minitron_8b

__all__ = ["minitron_4b", "minitron_8b"]
