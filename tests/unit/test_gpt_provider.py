"""GPTModelProvider: pure-data behaviour (no torch) and, further down, building real Megatron-Core models."""

import dataclasses
import subprocess
import sys

import pytest

from bridge.errors import ConfigError
from bridge.models import PRESETS, GPTModelProvider, preset
from bridge.models.provider_layout import derive_layout


def tiny(**overrides) -> GPTModelProvider:
    fields = dict(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=100,
        seq_length=16,
        make_vocab_size_divisible_by=8,
        normalization="RMSNorm",
        activation_func="silu",
        gated_linear_unit=True,
        add_bias_linear=False,
        position_embedding_type="rope",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    fields.update(overrides)
    return GPTModelProvider(**fields)


# ---- pure data -------------------------------------------------------------------------------------


def test_import_build_override_validate_serialise_imports_neither_torch_nor_megatron():
    code = (
        "import sys, dataclasses, bridge.models.gpt_provider as m\n"
        "from bridge.models import preset\n"
        "p = m.GPTModelProvider()\n"
        "q = preset('qwen3_30b_a3b'); q.tensor_model_parallel_size = 2; q.sequence_parallel = True\n"
        "q.finalize(); q.padded_vocab_size()\n"
        "from bridge.models.provider_layout import derive_layout; derive_layout(q, 8)\n"
        "from omegaconf import OmegaConf\n"
        "OmegaConf.to_yaml(OmegaConf.structured(q))\n"
        "bad = [n for n in ('torch', 'megatron', 'megatron.core') if n in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_field_fails_with_suggestion():
    provider = GPTModelProvider()
    with pytest.raises(ConfigError, match="num_layer.*did you mean num_layers"):
        provider.num_layer = 4
    with pytest.raises(TypeError):
        GPTModelProvider(num_layer=4)


def test_any_transformer_config_field_can_be_set_by_name():
    provider = tiny(moe_router_score_function="sigmoid", recompute_granularity="full", window_size=[4, 0])
    assert provider.moe_router_score_function == "sigmoid"
    assert provider.megatron_value("window_size") == (4, 0)


def _shape(value) -> str:
    """A value's type, containers by their items' types: what OmegaConf's round trip depends on."""
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{k}:{_shape(v)}" for k, v in value.items())) + "}"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[" + ",".join(sorted({_shape(v) for v in value})) + "]"
    return type(value).__name__


def _presets_covering_every_field_shape() -> list[str]:
    """The presets, greedily, until every (field, value shape) some preset has is in one of them: the round
    trip of every shape each field takes, at a tenth of the presets."""
    covered: set[tuple[str, str]] = set()
    chosen = []
    for name in PRESETS:
        provider = preset(name)
        keys = {(f.name, _shape(getattr(provider, f.name))) for f in dataclasses.fields(provider)}
        keys.add(("provider kind", type(provider).__name__))
        if keys - covered:
            chosen.append(name)
            covered |= keys
    return chosen


def test_yaml_round_trip_is_lossless():
    from omegaconf import OmegaConf

    from bridge.models.provider_kinds import class_of_fields

    names = _presets_covering_every_field_shape()
    assert len(names) < len(PRESETS)  # the cover is a real subset (else the greedy pick is pointless)
    for name in names:
        original = preset(name)
        text = OmegaConf.to_yaml(OmegaConf.structured(original))
        # the provider kind the fields say (a hybrid's layer pattern: MambaModelProvider; a vlm_config: VLMModelProvider)
        kind = class_of_fields(OmegaConf.to_container(OmegaConf.create(text)))
        assert kind is type(original), name
        merged = OmegaConf.merge(OmegaConf.structured(kind), OmegaConf.create(text))
        assert OmegaConf.to_object(merged) == original, name


def test_omegaconf_type_checks_values():
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    cfg = OmegaConf.structured(tiny())
    with pytest.raises(ValidationError):
        cfg.num_layers = "two"


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_layers=0), "num_layers"),
        (dict(hidden_size=66), "hidden_size"),
        (dict(num_query_groups=3), "num_query_groups"),
        (dict(activation_func="swish"), "activation_func"),
        (dict(normalization="BatchNorm"), "normalization"),
        (dict(params_dtype="bfloat16"), "params_dtype"),
        (dict(recompute_granularity="everything"), "recompute_granularity"),
        (dict(position_embedding_type="alibi"), "position_embedding_type"),
        (dict(fp16=True, bf16=True), "fp16"),
        (dict(rope_scaling=True, position_embedding_type="learned_absolute"), "rope_scaling"),
        (dict(rope_scaling=True, rope_scaling_low_freq_factor=4.0), "rope_scaling_low_freq_factor"),
        (dict(num_moe_experts=0), "num_moe_experts"),
        (dict(num_moe_experts=4, moe_router_topk=5), "moe_router_topk"),
        (dict(attention_backend="magic"), "attention_backend"),
        # multi-latent attention (MLATransformerConfig) carries its own RoPE
        (dict(multi_latent_attention=True, position_embedding_type="none"), "position_embedding_type"),
        (dict(multi_latent_attention=True, position_embedding_type="rope", rope_type="ntk"), "rope_type"),
        (
            dict(multi_latent_attention=True, position_embedding_type="rope", rope_scaling=True),
            "rope_scaling",
        ),
        (dict(multi_latent_attention=True, position_embedding_type="rope", kv_lora_rank=0), "kv_lora_rank"),
        # the latent norms' own eps: only with multi-latent attention, and positive
        (dict(mla_latent_layernorm_epsilon=1e-6), "mla_latent_layernorm_epsilon"),
        (
            dict(
                multi_latent_attention=True, position_embedding_type="rope", mla_latent_layernorm_epsilon=0.0
            ),
            "mla_latent_layernorm_epsilon",
        ),
    ],
)
def test_finalize_rejects_bad_fields_naming_field_and_fix(overrides, field):
    with pytest.raises(ConfigError, match=rf"model\.{field} = .*Fix: "):
        tiny(**overrides).finalize()


def test_kv_channels_allows_heads_not_dividing_hidden():
    tiny(hidden_size=66, kv_channels=16).finalize()


def test_padded_vocab_size_follows_megatron_rule():
    # 100 rounded up to a multiple of 8 * tp.
    assert tiny().padded_vocab_size() == 104
    assert tiny(tensor_model_parallel_size=2).padded_vocab_size() == 112
    assert tiny(make_vocab_size_divisible_by=1).padded_vocab_size() == 100
    assert preset("llama32_1b").padded_vocab_size() == 128256
    with pytest.raises(ConfigError, match="vocab_size"):
        tiny(vocab_size=None).padded_vocab_size()


def test_model_shape_and_layout():
    p = preset("qwen3_30b_a3b")
    shape = p.model_shape()
    assert (shape.num_layers, shape.num_attention_heads, shape.num_query_groups) == (48, 32, 4)
    assert (shape.num_moe_experts, shape.moe_router_topk, shape.moe_ffn_hidden_size) == (128, 8, 768)
    assert shape.kv_channels == 128 and shape.qk_layernorm
    p.tensor_model_parallel_size = 2
    p.sequence_parallel = True
    p.expert_model_parallel_size = 8
    layout = derive_layout(p, 8)
    assert (layout.tp, layout.ep, layout.etp, layout.dp, layout.edp) == (2, 8, 1, 4, 1)
    # ETP None is Megatron-Core's "same as TP".
    p.expert_tensor_parallel_size = None
    p.expert_model_parallel_size = 4
    assert derive_layout(p, 8).etp == 2
    # Layout rules come from bridge.parallel.layout: MoE with TP>1 needs sequence parallelism.
    p.sequence_parallel = False
    with pytest.raises(ConfigError, match="sequence_parallel"):
        derive_layout(p, 8)


def test_ffn_hidden_size_none_follows_transformer_config_rule():
    p = tiny(ffn_hidden_size=None)
    assert p.model_shape().ffn_hidden_size == 4 * 64


def test_provider_is_a_plain_dataclass_copy():
    p = preset("llama31_8b")
    q = dataclasses.replace(p, num_layers=2)
    assert q.num_layers == 2 and p.num_layers == 32


# ---- building Megatron-Core models (one process) ---------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def built():
    """A tiny model built by provide_distributed_model() in a process with no groups yet."""
    from bridge.parallel import runtime

    if runtime.is_initialized():
        runtime.destroy_distributed()
    provider = tiny(qk_layernorm=True)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    assert runtime.is_initialized(), "provide_distributed_model must initialize the groups itself"
    yield provider, chunks
    runtime.destroy_distributed()


def _tokens(batch=2, seq=16, vocab=100, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    return ids, torch.arange(seq).expand(batch, seq)


def test_provide_distributed_model_forward_is_causal_with_no_mask(built):
    from megatron.core.models.gpt import GPTModel

    provider, chunks = built
    assert len(chunks) == 1 and isinstance(chunks[0], GPTModel)
    model = chunks[0].eval()
    ids, pos = _tokens()
    with torch.no_grad():
        logits = model(ids, pos, attention_mask=None)
        changed = ids.clone()
        changed[:, 8:] = (changed[:, 8:] + 1) % 100
        logits2 = model(changed, pos, attention_mask=None)
    assert logits.shape == (2, 16, provider.padded_vocab_size())
    assert torch.isfinite(logits).all()
    # Causal: later tokens do not change earlier positions' logits, and do change their own.
    torch.testing.assert_close(logits[:, :8], logits2[:, :8], rtol=0, atol=0)
    assert not torch.allclose(logits[:, 8:], logits2[:, 8:])


def test_local_spec_uses_sequence_parallel_norm_everywhere(built):
    from bridge.models.norms import SequenceParallelNorm

    _, (model,) = built
    norms = {name for name, m in model.named_modules() if isinstance(m, SequenceParallelNorm)}
    assert "decoder.final_layernorm" in norms
    for layer in range(2):
        for part in (
            "input_layernorm",
            "pre_mlp_layernorm",
            "self_attention.q_layernorm",
            "self_attention.k_layernorm",
        ):
            assert f"decoder.layers.{layer}.{part}" in norms
    assert not any(type(m).__name__ in ("LayerNorm", "RMSNorm") for m in model.modules())


def test_ddp_wrapped_model_trains_a_step(built):
    from megatron.core.distributed import DistributedDataParallel

    provider, _ = built
    (ddp,) = provider.provide_distributed_model(wrap_with_ddp=True)
    assert isinstance(ddp, DistributedDataParallel)
    ids, pos = _tokens()
    loss = ddp(ids, pos, None, labels=ids).float().mean()
    loss.backward()
    ddp.finish_grad_sync()
    grads = [p.main_grad for p in ddp.parameters()]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert all(g.abs().sum() > 0 for g in grads)


def test_bf16_model_is_wrapped_and_runs(built):
    from megatron.core.transformer.module import Float16Module

    (chunk,) = tiny(bf16=True).provide_distributed_model(wrap_with_ddp=False)
    assert isinstance(chunk, Float16Module)
    assert {p.dtype for p in chunk.parameters()} == {torch.bfloat16}
    ids, pos = _tokens()
    with torch.no_grad():
        out = chunk(ids, pos, None)
    assert torch.isfinite(out.float()).all()


def test_transformer_config_maps_names_to_megatron_objects(built):
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend

    cfg = tiny(bf16=True, params_dtype="bf16", attention_backend="local").transformer_config()
    assert cfg.activation_func is F.silu and cfg.attention_backend is AttnBackend.local
    assert cfg.params_dtype is torch.bfloat16 and cfg.pipeline_dtype is torch.bfloat16
    assert cfg.expert_tensor_parallel_size == 1 and cfg.normalization == "RMSNorm"
    assert cfg.use_cpu_initialization is (not torch.cuda.is_available())
    assert tiny().transformer_config().pipeline_dtype is torch.float32


def test_transformer_config_rejection_is_a_config_error(built):
    # finalize() does not know this rule; Megatron-Core's own check is reported as a ConfigError.
    with pytest.raises(ConfigError, match="TransformerConfig rejects.*Fix"):
        tiny(fp8_param=True).transformer_config()


@pytest.mark.parametrize(
    "overrides,reason",
    [
        ({"attention_backend": "unfused"}, "attention_backend=unfused"),
        ({"window_size": (4, 0)}, "window_size"),
    ],
)
def test_context_parallel_without_transformer_engine_needs_sdpa_attention(built, overrides, reason):
    # Without TE, CP runs through bridge's SDPAttention (tests/unit/test_cp_attention.py,
    # tests/functional/test_context_parallel.py); a config that would keep DotProductAttention is refused.
    from bridge.models.specs import use_transformer_engine

    if use_transformer_engine():
        pytest.skip("Transformer Engine is usable here")
    with pytest.raises(ConfigError, match=f"context_parallel_size = 2.*sdpa attention.*{reason}.*Fix"):
        tiny(context_parallel_size=2, **overrides).provide()


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"layernorm_placement": "middle"}, r"model.layernorm_placement = 'middle': must be one of"),
        (
            {"qk_layernorm_scope": "projection"},
            r"model.qk_layernorm_scope = 'projection'.*qk_layernorm=False",
        ),
        ({"attn_logit_softcapping": 0.0}, r"model.attn_logit_softcapping = 0.0: must be positive"),
        ({"final_logit_softcapping": -1.0}, r"model.final_logit_softcapping = -1.0: must be positive"),
        (
            {"local_rotary_base": 0.0, "window_size": [3, 0]},
            r"model.local_rotary_base = 0.0: must be positive",
        ),
        ({"local_rotary_base": 10.0}, r"model.local_rotary_base = 10.0: .*window_size=None makes none"),
        (
            {"local_rotary_base": 10.0, "window_size": [3, 0], "rotary_percent": 0.5},
            r"model.local_rotary_base = 10.0: needs .*rotary_percent=1.0",
        ),
    ],
)
def test_layer_variant_fields_are_checked(overrides, match):
    with pytest.raises(ConfigError, match=match):
        tiny(**overrides).finalize()


def test_soft_capped_attention_refuses_context_parallelism(built):
    with pytest.raises(ConfigError, match=r"context_parallel_size = 2: attention logit soft-capping.*Fix"):
        tiny(context_parallel_size=2, attn_logit_softcapping=50.0).provide()


def test_per_layer_rope_refuses_context_parallelism(built):
    # the local layers' own embedding would need the CP-sliced positions of GPTModel's
    with pytest.raises(
        ConfigError, match=r"context_parallel_size = 2: per-layer RoPE \(local_rotary_base.*Fix"
    ):
        tiny(
            context_parallel_size=2, local_rotary_base=10.0, window_size=[3, 0], window_attn_skip_freq=2
        ).provide()


def test_groups_of_another_layout_are_refused(built):
    with pytest.raises(ConfigError, match="tensor_model_parallel_size = 2.*initialized with 1"):
        tiny(tensor_model_parallel_size=2).provide_distributed_model(wrap_with_ddp=False)


def test_tiny_moe_builds_and_runs(built):
    p = tiny(
        num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32, moe_token_dispatcher_type="alltoall"
    )
    (model,) = p.provide_distributed_model(wrap_with_ddp=False)
    names = [n for n, _ in model.named_parameters()]
    assert any("experts.local_experts.3.linear_fc1" in n for n in names)
    ids, pos = _tokens()
    with torch.no_grad():
        assert torch.isfinite(model(ids, pos, None)).all()


@pytest.mark.parametrize(
    "low, high, original",
    [(1.0, 4.0, 8192), (2.0, 8.0, 64)],  # Megatron-Core's fixed values, then others applied by bridge
)
def test_llama3_rope_scaling_matches_hugging_face(built, low, high, original):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    p = tiny(
        rope_scaling=True,
        rope_scaling_factor=32.0,
        rope_scaling_low_freq_factor=low,
        rope_scaling_high_freq_factor=high,
        rope_scaling_original_max_position_embeddings=original,
        rotary_base=500000,
    )
    hf = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": original,
        },
    )
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    (model,) = p.provide_distributed_model(wrap_with_ddp=False)
    torch.testing.assert_close(model.rotary_pos_emb.inv_freq, expected.float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("normalization", ["RMSNorm", "LayerNorm"])
@pytest.mark.parametrize("zero_centered", [False, True])
def test_sequence_parallel_norm_matches_torch_norms(normalization, zero_centered):
    from types import SimpleNamespace

    from bridge.models.norms import SequenceParallelNorm

    config = SimpleNamespace(
        normalization=normalization,
        layernorm_zero_centered_gamma=zero_centered,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        sequence_parallel=True,
    )
    ours = SequenceParallelNorm(config, hidden_size=32, eps=1e-6)
    ref = (torch.nn.RMSNorm if normalization == "RMSNorm" else torch.nn.LayerNorm)(32, eps=1e-6)
    gen = torch.Generator().manual_seed(0)
    scale = torch.randn(32, generator=gen)
    with torch.no_grad():
        # Zero-centred storage holds (gamma - 1).
        ours.weight.copy_(scale - 1 if zero_centered else scale)
        ref.weight.copy_(scale)
        if normalization == "LayerNorm":
            bias = torch.randn(32, generator=gen)
            ours.bias.copy_(bias)
            ref.bias.copy_(bias)
    x = torch.randn(5, 3, 32, generator=gen)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-6, atol=1e-6)
    assert all(p.sequence_parallel for p in ours.parameters())
    assert len(list(ours.parameters())) == (1 if normalization == "RMSNorm" else 2)
