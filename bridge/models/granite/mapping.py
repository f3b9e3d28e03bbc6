"""Granite 3: the Llama layout with four constant multipliers, which change no tensor name (the
config translation is hf_config.py here; the multipliers are bridge.models.output_hooks')."""

from bridge.models.llama.mapping import MAPPINGS as LLAMA_MAPPINGS

ARCHITECTURES = ("GraniteForCausalLM",)
HF_MODEL_TYPE = "granite"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}

MAPPINGS = LLAMA_MAPPINGS
