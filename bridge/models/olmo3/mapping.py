"""OLMo 3: OLMo 2's layout (norms after the branches, q/k norms over whole projections) with
sliding-window layers, which change no tensor name (their pattern and RoPE: hf_config.py here)."""

from bridge.models.olmo2.mapping import MAPPINGS as OLMO2_MAPPINGS
from bridge.models.olmo2.mapping import PROVIDER_FIELDS as OLMO2_PROVIDER_FIELDS

ARCHITECTURES = ("Olmo3ForCausalLM",)
HF_MODEL_TYPE = "olmo3"  # config.json "model_type"
PROVIDER_FIELDS: dict = dict(OLMO2_PROVIDER_FIELDS)

MAPPINGS = OLMO2_MAPPINGS
