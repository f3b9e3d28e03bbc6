"""Parameter counts (total and active) against transformers' own models built on the meta device."""

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bridge.cli.plan import shape_from_hf_config  # noqa: E402
from bridge.models import preset  # noqa: E402
from bridge.parallel.layout import ParallelLayout  # noqa: E402
from bridge.parallel.param_count import count_parameters, padded_vocab_size, params_per_rank  # noqa: E402
from tests.unit.published_shapes import (  # noqa: E402
    DEEPSEEK_V2_LITE,
    DEEPSEEK_V3,
    GEMMA2_2B,
    GEMMA3_1B,
    GPT_OSS_20B,
    LLAMA31_8B,
    LLAMA32_1B,
    MIXTRAL_8X7B,
    OLMO2_7B,
    OLMOE_1B_7B,
    PHI3_MINI_4K,
    QWEN2_57B_A14B,
    QWEN3_30B_A3B,
    QWEN15_MOE_A27B,
)

# Published Hugging Face config values.
_DEEPSEEK_HF = dict(
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    tie_word_embeddings=False,
    hidden_act="silu",
)
DEEPSEEK_V2_LITE_HF = dict(
    _DEEPSEEK_HF,
    vocab_size=102400,
    hidden_size=2048,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    num_hidden_layers=27,
    num_attention_heads=16,
    num_key_value_heads=16,
    n_routed_experts=64,
    n_shared_experts=2,
    num_experts_per_tok=6,
    first_k_dense_replace=1,
    q_lora_rank=None,
    model_type="deepseek_v2",
)
DEEPSEEK_V3_HF = dict(
    _DEEPSEEK_HF,
    vocab_size=129280,
    hidden_size=7168,
    intermediate_size=18432,
    moe_intermediate_size=2048,
    num_hidden_layers=61,
    num_attention_heads=128,
    num_key_value_heads=128,
    n_routed_experts=256,
    n_shared_experts=1,
    num_experts_per_tok=8,
    first_k_dense_replace=3,
    q_lora_rank=1536,
    model_type="deepseek_v3",
)
# Qwen1.5-MoE-A2.7B's published config.json (also the base of the partly-dense case below)
QWEN15_MOE_A27B_HF = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=5632,
    moe_intermediate_size=1408,
    shared_expert_intermediate_size=5632,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_key_value_heads=16,
    num_experts=60,
    num_experts_per_tok=4,
    decoder_sparse_step=1,
    tie_word_embeddings=False,
    hidden_act="silu",
    model_type="qwen2_moe",
)

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
    "phi3_mini_4k": (
        "Phi3Config",
        "Phi3ForCausalLM",
        dict(
            vocab_size=32064,
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            sliding_window=2047,
            pad_token_id=32000,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="phi3",
        ),
    ),
    "qwen15_moe_a27b": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        QWEN15_MOE_A27B_HF,
    ),
    "qwen2_57b_a14b": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        dict(
            vocab_size=151936,
            hidden_size=3584,
            intermediate_size=18944,
            moe_intermediate_size=2560,
            shared_expert_intermediate_size=20480,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            num_experts=64,
            num_experts_per_tok=8,
            decoder_sparse_step=1,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="qwen2_moe",
        ),
    ),
    # partly dense: every second layer MoE (decoder_sparse_step=2) and layer 0 dense too (mlp_only_layers)
    "qwen2_moe_sparse_step2": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {**QWEN15_MOE_A27B_HF, "decoder_sparse_step": 2, "mlp_only_layers": [1]},
    ),
    "qwen3_moe_partly_dense": (
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
            decoder_sparse_step=1,
            mlp_only_layers=[0, 1, 47],
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="qwen3_moe",
        ),
    ),
    "olmo2_7b": (
        "Olmo2Config",
        "Olmo2ForCausalLM",
        dict(
            vocab_size=100352,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="olmo2",
        ),
    ),
    "olmoe_1b_7b": (
        "OlmoeConfig",
        "OlmoeForCausalLM",
        dict(
            vocab_size=50304,
            hidden_size=2048,
            intermediate_size=1024,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=16,
            num_experts=64,
            num_experts_per_tok=8,
            tie_word_embeddings=False,
            hidden_act="silu",
            model_type="olmoe",
        ),
    ),
    "gpt_oss_20b": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            vocab_size=201088,
            hidden_size=2880,
            intermediate_size=2880,
            num_hidden_layers=24,
            num_attention_heads=64,
            num_key_value_heads=8,
            head_dim=64,
            num_local_experts=32,
            num_experts_per_tok=4,
            tie_word_embeddings=False,
            model_type="gpt_oss",
        ),
    ),
    "gemma2_2b": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        dict(
            vocab_size=256000,
            hidden_size=2304,
            intermediate_size=9216,
            num_hidden_layers=26,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            hidden_activation="gelu_pytorch_tanh",
            model_type="gemma2",
        ),
    ),
    # zai-org/GLM-4.5-Air (q/k/v biases, partial RoPE, a dense first layer, a shared expert)
    "glm45_air": (
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        dict(
            vocab_size=151552,
            hidden_size=4096,
            intermediate_size=10944,
            moe_intermediate_size=1408,
            num_hidden_layers=46,
            num_attention_heads=96,
            num_key_value_heads=8,
            head_dim=128,
            attention_bias=True,
            partial_rotary_factor=0.5,
            n_routed_experts=128,
            n_shared_experts=1,
            num_experts_per_tok=8,
            first_k_dense_replace=1,
            tie_word_embeddings=False,
            model_type="glm4_moe",
        ),
    ),
    # MiniMaxAI/MiniMax-M2 (q/k norms over whole projections, 256 experts)
    "minimax_m2": (
        "MiniMaxM2Config",
        "MiniMaxM2ForCausalLM",
        dict(
            vocab_size=200064,
            hidden_size=3072,
            intermediate_size=1536,
            num_hidden_layers=62,
            num_attention_heads=48,
            num_key_value_heads=8,
            head_dim=128,
            rotary_dim=64,
            num_local_experts=256,
            num_experts_per_tok=8,
            tie_word_embeddings=False,
            model_type="minimax_m2",
        ),
    ),
    # baidu/ERNIE-4.5-21B-A3B-PT (tied embeddings, a dense first layer, 2 shared experts)
    "ernie45_21b_a3b": (
        "Ernie4_5_MoeConfig",
        "Ernie4_5_MoeForCausalLM",
        dict(
            vocab_size=103424,
            hidden_size=2560,
            intermediate_size=12288,
            moe_intermediate_size=1536,
            num_hidden_layers=28,
            num_attention_heads=20,
            num_key_value_heads=4,
            moe_num_experts=64,
            moe_k=6,
            moe_num_shared_experts=2,
            moe_layer_start_index=1,
            tie_word_embeddings=True,
            model_type="ernie4_5_moe",
        ),
    ),
    # deepseek-ai/DeepSeek-V2-Lite and DeepSeek-V3 (multi-latent attention; V2-Lite without q compression)
    "deepseek_v2_lite": ("DeepseekV2Config", "DeepseekV2ForCausalLM", DEEPSEEK_V2_LITE_HF),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK_V3_HF),
    "gemma3_1b": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            vocab_size=262144,
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            hidden_activation="gelu_pytorch_tanh",
            model_type="gemma3_text",
        ),
    ),
}
# The same models written as ModelShapes by hand (Megatron field names).
SHAPES = {
    "olmo2_7b": OLMO2_7B,
    "olmoe_1b_7b": OLMOE_1B_7B,
    "gpt_oss_20b": GPT_OSS_20B,
    "gemma2_2b": GEMMA2_2B,
    "deepseek_v2_lite": DEEPSEEK_V2_LITE,
    "deepseek_v3": DEEPSEEK_V3,
    "gemma3_1b": GEMMA3_1B,
    "llama32_1b": LLAMA32_1B,
    "llama31_8b": LLAMA31_8B,
    "qwen3_30b_a3b": QWEN3_30B_A3B,
    "mixtral_8x7b": MIXTRAL_8X7B,
    "phi3_mini_4k": PHI3_MINI_4K,
    "qwen15_moe_a27b": QWEN15_MOE_A27B,
    "qwen2_57b_a14b": QWEN2_57B_A14B,
    "qwen2_moe_sparse_step2": replace(
        QWEN15_MOE_A27B, moe_layer_freq=tuple(int(i % 2 == 1 and i != 1) for i in range(24))
    ),
    "qwen3_moe_partly_dense": replace(
        QWEN3_30B_A3B, moe_layer_freq=tuple(int(i not in (0, 1, 47)) for i in range(48))
    ),
    # the presets' shapes (their published values are checked in test_presets)
    "glm45_air": preset("glm45_air").model_shape(),
    "minimax_m2": preset("minimax_m2").model_shape(),
    "ernie45_21b_a3b": preset("ernie45_21b_a3b").model_shape(),
}


def _hf_counts(name):
    config_cls, model_cls, values = CONFIGS[name]
    values = {k: v for k, v in values.items() if k != "model_type"}
    config = getattr(transformers, config_cls)(**values)
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(config)
    # trainable ones: ERNIE 4.5's router correction bias is a frozen parameter there, a buffer in
    # Megatron-Core (as in transformers' other families)
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    active = total
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if experts:
        # the routed experts of each MoE layer, whatever module layout this transformers version uses
        # (dense layers of a partly dense model have none)
        for layer in model.model.layers:
            modules = [m for n, m in layer.named_modules() if n.endswith("experts")]
            if modules:
                per_expert = sum(p.numel() for p in modules[0].parameters()) // experts
                active -= (experts - config.num_experts_per_tok) * per_expert
    return total, active


@pytest.mark.parametrize("name", list(CONFIGS))
def test_total_and_active_match_transformers_on_meta(name):
    total, active = _hf_counts(name)
    count = count_parameters(SHAPES[name])
    assert count.total == total
    assert count.active == active
    # and the same numbers when the shape comes from the config.json the CLI reads (less the MTP layers
    # num_nextn_predict_layers gives, which bridge builds and transformers does not)
    from_json = count_parameters(replace(shape_from_hf_config(CONFIGS[name][2]), mtp_layers=0))
    assert (from_json.total, from_json.active) == (total, active)


def test_published_sizes():
    # sanity against the published model-card figures
    assert round(count_parameters(SHAPES["llama31_8b"]).total / 1e9, 2) == 8.03
    q = count_parameters(SHAPES["qwen3_30b_a3b"])
    assert round(q.total / 1e9, 1) == 30.5 and round(q.active / 1e9, 1) == 3.4
    m = count_parameters(SHAPES["mixtral_8x7b"])
    assert round(m.total / 1e9, 1) == 46.7 and round(m.active / 1e9, 1) == 12.9
    assert round(count_parameters(SHAPES["phi3_mini_4k"]).total / 1e9, 2) == 3.82  # "3.8B"
    q = count_parameters(SHAPES["qwen15_moe_a27b"])  # "14.3B in total and 2.7B activated"
    assert round(q.total / 1e9, 1) == 14.3 and round(q.active / 1e9, 1) == 2.7
    q = count_parameters(SHAPES["qwen2_57b_a14b"])  # "57B ... A14B"
    assert round(q.total / 1e9) == 57 and round(q.active / 1e9) == 14


def test_deepseek_published_sizes():
    v3 = count_parameters(SHAPES["deepseek_v3"])  # "671B total parameters with 37B activated"
    assert (round(v3.total / 1e9), round(v3.active / 1e9, 1)) == (671, 37.6)
    lite = count_parameters(SHAPES["deepseek_v2_lite"])  # "16B total parameters"
    assert round(lite.total / 1e9, 1) == 15.7  # active 2.7B here: the model card's "2.4B" counts differently


def test_partly_dense_stage_shares_follow_their_layers():
    # Stages of a partly dense MoE hold the experts of their own MoE layers only.
    shape = SHAPES["qwen3_moe_partly_dense"]
    layout = ParallelLayout(16, tp=2, pp=2, ep=4, sequence_parallel=True, model=shape)
    per_expert = 3 * shape.hidden_size * shape.moe_ffn_hidden_size
    experts = [params_per_rank(shape, layout, s).expert for s in range(2)]
    assert experts == [22 * 32 * per_expert, 23 * 32 * per_expert]  # 2 and 1 dense layers of 24
    total = count_parameters(shape)
    summed_experts = sum(experts) * layout.ep
    assert summed_experts == total.experts


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 4)])
@pytest.mark.parametrize("name", ["llama32_1b", "olmo2_7b"])  # OLMo 2's q/k norms are split by heads
def test_rank_shares_add_up_to_the_model(tp, pp, name):
    # Summed over tp ranks and stages, the shares give the whole model plus what Megatron duplicates:
    # the norms (tp copies), the vocab padding, and a tied output copy on the last stage when pp > 1.
    shape = SHAPES[name]
    layout = ParallelLayout(tp * pp, tp=tp, pp=pp, sequence_parallel=tp > 1, model=shape)
    summed = sum(params_per_rank(shape, layout, s).total for s in range(pp)) * tp
    count = count_parameters(shape)
    padded = padded_vocab_size(shape.vocab_size, tp)
    expected = count.total + (tp - 1) * count.norms + (padded - shape.vocab_size) * shape.hidden_size
    if pp > 1 and shape.share_embeddings_and_output_weights:
        expected += padded * shape.hidden_size
    assert summed == expected
