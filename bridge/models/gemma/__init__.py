"""gemma family (Gemma 1): provider presets; mapping.py and hf_config.py beside them."""

from bridge.models.gemma.presets import gemma_2b, gemma_7b

__all__ = ["gemma_2b", "gemma_7b"]
