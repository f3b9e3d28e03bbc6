"""Mixtral pretraining recipe (NeMo's published Mixtral 8x7B layout; Megatron-Bridge publishes none)."""

from __future__ import annotations

from bridge.models.mixtral.presets import mixtral_8x7b
from recipes.composition import Row, register
from recipes.gpu_settings import COMMON, LAYER_FUSIONS, MOE_KERNELS, PIPELINE_OVERLAP, TE_CROSS_ENTROPY
from recipes.runs import LONG_PRETRAIN

# Megatron-Bridge's GPU settings for Mixtral
MIXTRAL = {**COMMON, **LAYER_FUSIONS, **TE_CROSS_ENTROPY, **MOE_KERNELS, **PIPELINE_OVERLAP}

ROWS = (
    Row(
        name="mixtral_8x7b_pretrain_config",
        family="mixtral",
        kind="pretrain",
        title="Mixtral 8x7B",
        preset=mixtral_8x7b,
        gpus=32,
        layout=dict(tp=1, pp=4, vpp=8, ep=8),
        run=LONG_PRETRAIN,
        settings=MIXTRAL,
        note="NeMo's recipe also sets sequence parallelism, which Megatron drops at TP1 and bridge refuses: off",
    ),
)


# ---- the recipe functions by every name they answer to (generated from the rows by scripts/dev/gen_recipe_names.py;
# tests/unit/test_recipe_names.py checks it) ----
RECIPES, _functions = register(ROWS, __name__)
# fmt: off
mixtral_8x7b_pretrain_config = _functions["mixtral_8x7b_pretrain_config"]
# fmt: on
