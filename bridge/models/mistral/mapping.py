"""Mistral: the Llama parameter layout under another architecture name."""

from bridge.models.llama.mapping import MAPPINGS as _LLAMA

ARCHITECTURES = ("MistralForCausalLM",)
HF_MODEL_TYPE = "mistral"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}
MAPPINGS = _LLAMA
