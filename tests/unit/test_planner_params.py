"""Parameter counts (total and active) against transformers' own models built on the meta device."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bridge.parallel.layout import ParallelLayout  # noqa: E402
from bridge.parallel.param_count import count_parameters, padded_vocab_size, params_per_rank  # noqa: E402
from bridge.plan import shape_from_hf_config  # noqa: E402
from tests.unit.published_shapes import LLAMA31_8B, LLAMA32_1B, MIXTRAL_8X7B, QWEN3_30B_A3B  # noqa: E402

# Published Hugging Face config values.
CONFIGS = {
    "llama32_1b": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            tie_word_embeddings=True,
            hidden_act="silu",
            model_type="llama",
        ),
    ),
    "llama31_8b": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="llama",
        ),
    ),
    "qwen3_30b_a3b": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=6144,
            moe_intermediate_size=768,
            num_hidden_layers=48,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="qwen3_moe",
        ),
    ),
    "mixtral_8x7b": (
        "MixtralConfig",
        "MixtralForCausalLM",
        dict(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            num_local_experts=8,
            num_experts_per_tok=2,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="mixtral",
        ),
    ),
}
# The same models written as ModelShapes by hand (Megatron field names).
SHAPES = {
    "llama32_1b": LLAMA32_1B,
    "llama31_8b": LLAMA31_8B,
    "qwen3_30b_a3b": QWEN3_30B_A3B,
    "mixtral_8x7b": MIXTRAL_8X7B,
}


def _hf_counts(name):
    config_cls, model_cls, values = CONFIGS[name]
    values = {k: v for k, v in values.items() if k != "model_type"}
    config = getattr(transformers, config_cls)(**values)
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(config)
    total = sum(p.numel() for p in model.parameters())
    active = total
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if experts:
        # the routed experts of one layer, whatever module layout this transformers version uses
        layer = model.model.layers[0]
        modules = [m for n, m in layer.named_modules() if n.endswith("experts")]
        per_expert = sum(p.numel() for p in modules[0].parameters()) // experts
        active = total - config.num_hidden_layers * (experts - config.num_experts_per_tok) * per_expert
    return total, active


@pytest.mark.parametrize("name", list(CONFIGS))
def test_total_and_active_match_transformers_on_meta(name):
    total, active = _hf_counts(name)
    count = count_parameters(SHAPES[name])
    assert count.total == total
    assert count.active == active
    # and the same numbers when the shape comes from the config.json the CLI reads
    from_json = count_parameters(shape_from_hf_config(CONFIGS[name][2]))
    assert (from_json.total, from_json.active) == (total, active)


def test_published_sizes():
    # sanity against the published model-card figures
    assert round(count_parameters(SHAPES["llama31_8b"]).total / 1e9, 2) == 8.03
    q = count_parameters(SHAPES["qwen3_30b_a3b"])
    assert round(q.total / 1e9, 1) == 30.5 and round(q.active / 1e9, 1) == 3.4
    m = count_parameters(SHAPES["mixtral_8x7b"])
    assert round(m.total / 1e9, 1) == 46.7 and round(m.active / 1e9, 1) == 12.9


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 4)])
def test_rank_shares_add_up_to_the_model(tp, pp):
    # Summed over tp ranks and stages, the shares give the whole model plus what Megatron duplicates:
    # the norms (tp copies), the vocab padding, and a tied output copy on the last stage when pp > 1.
    shape = SHAPES["llama32_1b"]
    layout = ParallelLayout(tp * pp, tp=tp, pp=pp, sequence_parallel=tp > 1, model=shape)
    summed = sum(params_per_rank(shape, layout, s).total for s in range(pp)) * tp
    count = count_parameters(shape)
    padded = padded_vocab_size(shape.vocab_size, tp)
    expected = count.total + (tp - 1) * count.norms + (padded - shape.vocab_size) * shape.hidden_size
    if pp > 1:
        expected += padded * shape.hidden_size
    assert summed == expected
