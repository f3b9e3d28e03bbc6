"""Ministral 3 (text: Ministral3ForCausalLM, the language model of Mistral3ForConditionalGeneration's
Ministral 3 checkpoints): the Llama parameter layout; YaRN RoPE and Llama 4's position-dependent query scale
are config (hf_config.py here)."""

from bridge.models.llama.mapping import MAPPINGS as _LLAMA

ARCHITECTURES = ("Ministral3ForCausalLM",)
HF_MODEL_TYPE = "ministral3"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}
MAPPINGS = _LLAMA
