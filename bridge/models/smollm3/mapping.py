"""SmolLM3: the Llama layout; every fourth layer attends without RoPE (Megatron-Core's no_rope_freq,
read from the config in hf_config.py), which changes no tensor name."""

from bridge.models.llama.mapping import MAPPINGS as LLAMA_MAPPINGS

ARCHITECTURES = ("SmolLM3ForCausalLM",)
HF_MODEL_TYPE = "smollm3"  # config.json "model_type"
PROVIDER_FIELDS: dict = {}

MAPPINGS = LLAMA_MAPPINGS
