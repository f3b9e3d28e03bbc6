"""exaone_moe family (K-EXAONE): provider presets; mapping.py is its Hugging Face mapping table (data, read by the conversion layer), hf_config.py its config.json rules."""

from bridge.models.exaone_moe.presets import k_exaone_236b_a23b

__all__ = ["k_exaone_236b_a23b"]
