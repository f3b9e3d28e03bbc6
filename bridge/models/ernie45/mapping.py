"""ERNIE 4.5 (dense): the Llama layout with interleaved RoPE.

transformers' Ernie 4.5 rotates each pair of adjacent channels (2i, 2i + 1) of a head by frequency i
(GLM's style), not channel i with channel i + head_dim / 2: Megatron-Core's rotary_interleaved, which
changes no tensor name, so the Llama rows carry the weights unchanged.
"""

from bridge.models.llama.mapping import MAPPINGS as LLAMA_MAPPINGS

ARCHITECTURES = ("Ernie4_5ForCausalLM",)
HF_MODEL_TYPE = "ernie4_5"  # config.json "model_type"
PROVIDER_FIELDS: dict = {"rotary_interleaved": True}

MAPPINGS = LLAMA_MAPPINGS
