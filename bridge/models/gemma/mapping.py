"""Gemma 1: the Llama layout (pre-norms only) with Gemma's (1 + w) RMSNorm, GeGLU, embeddings scaled
by sqrt(hidden) and a tied output layer.

Every norm applies (1 + w) to the stored w (layernorm_zero_centered_gamma), so weights copy over
unchanged; the embedding scale is a forward hook (bridge.models.output_hooks), not a weight. The
config translation (the activation) is hf_config.py here.
"""

from bridge.models.llama.mapping import MAPPINGS as _LLAMA

ARCHITECTURES = ("GemmaForCausalLM",)
HF_MODEL_TYPE = "gemma"  # config.json "model_type"
PROVIDER_FIELDS: dict = {
    "layernorm_zero_centered_gamma": True,
    "scale_embeddings_by_sqrt_hidden": True,
}

MAPPINGS = _LLAMA
