"""The model-parallel sizes by name: the one table between Megatron-Core's field names (what providers,
recipes and users set, `initialize_model_parallel` takes) and the layout's short names. Pure Python."""

from __future__ import annotations

# Megatron-Core field -> ParallelLayout attribute, in the order the sizes are checked and reported.
SIZE_FIELDS: dict[str, str] = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "virtual_pipeline_model_parallel_size": "vpp",
    "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep",
    "expert_tensor_parallel_size": "etp",
}
# ParallelLayout attribute -> Megatron-Core field.
FIELD_OF: dict[str, str] = {short: name for name, short in SIZE_FIELDS.items()}
