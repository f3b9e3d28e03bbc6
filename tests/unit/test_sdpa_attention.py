"""SDPAttention (torch sdpa) against Megatron-Core's DotProductAttention, module by module and in a GPTModel."""

import pytest

from bridge.models.provider_layout import derive_layout

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.core.transformer.dot_product_attention import DotProductAttention  # noqa: E402
from megatron.core.transformer.enums import AttnMaskType  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

from bridge.errors import ConfigError  # noqa: E402
from bridge.models import GPTModelProvider  # noqa: E402
from bridge.models.attention import SDPAttention  # noqa: E402

SEQ, BATCH, HEAD_DIM = 12, 3, 8


def tiny(**overrides) -> GPTModelProvider:
    fields = dict(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, num_query_groups=2,
        vocab_size=100, seq_length=SEQ, make_vocab_size_divisible_by=8, normalization="RMSNorm",
        activation_func="silu", gated_linear_unit=True, add_bias_linear=False, position_embedding_type="rope",
        hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    fields.update(overrides)
    return GPTModelProvider(**fields)


@pytest.fixture(scope="module", autouse=True)
def parallel_groups():
    """One process, TP=1 groups (DotProductAttention needs Megatron-Core's memory buffer and RNG tracker)."""
    from bridge.parallel import runtime

    if runtime.is_initialized():
        runtime.destroy_distributed()
    runtime.initialize_distributed(derive_layout(tiny(), 1))
    yield
    runtime.destroy_distributed()


class _FakeTPGroup:
    """A TP group of `n` ranks as seen by one rank: both modules only ask its size."""

    def __init__(self, n: int):
        self.n = n

    def size(self) -> int:
        return self.n

    def rank(self) -> int:
        return 0


def _config(heads, groups, **overrides) -> TransformerConfig:
    fields = dict(
        num_layers=2, hidden_size=heads * HEAD_DIM, num_attention_heads=heads, num_query_groups=groups,
        kv_channels=HEAD_DIM, attention_dropout=0.0, hidden_dropout=0.0, use_cpu_initialization=True,
    )  # fmt: skip
    fields.update(overrides)
    return TransformerConfig(**fields)


def _pair(config, mask_type=AttnMaskType.causal, tp=1, layer_number=2, **kwargs):
    pgs = None
    if tp > 1:
        pgs = ProcessGroupCollection()
        pgs.tp = _FakeTPGroup(tp)
    args = (config, layer_number, mask_type, "self")
    return DotProductAttention(*args, pg_collection=pgs, **kwargs), SDPAttention(
        *args, pg_collection=pgs, **kwargs
    )


def _qkv(heads, groups, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(SEQ, BATCH, heads, HEAD_DIM, generator=gen)
    k = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
    v = torch.randn(SEQ, BATCH, groups, HEAD_DIM, generator=gen)
    return q, k, v


def _padding_mask() -> torch.Tensor:
    """Megatron's convention, True = masked out: causal, plus right padding of different lengths per sample."""
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
    lengths = torch.tensor([SEQ, SEQ - 3, 5])
    padded_keys = torch.arange(SEQ)[None, :] >= lengths[:, None]  # [b, sk]
    return causal[None, None] | padded_keys[:, None, None, :]  # [b, 1, sq, sk]


def _assert_same_outputs_and_grads(reference, ours, heads, groups, mask):
    q, k, v = _qkv(heads, groups)
    results = []
    for module in (reference, ours):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = module(*inputs, attention_mask=mask)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        (out * weights).sum().backward()
        results.append((out, [t.grad for t in inputs]))
    (ref_out, ref_grads), (out, grads) = results
    assert out.shape == (SEQ, BATCH, heads * HEAD_DIM)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for name, grad, ref in zip("qkv", grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref, rtol=1e-5, atol=1e-5, msg=lambda m, name=name: f"d{name}: {m}")


@pytest.mark.parametrize("heads,groups", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("mask", ["none", "default_causal", "padding"])
def test_matches_dot_product_attention(heads, groups, mask):
    masks = {
        "none": None,
        "default_causal": torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool).triu(1),
        "padding": _padding_mask(),
    }
    reference, ours = _pair(_config(heads, groups))
    _assert_same_outputs_and_grads(reference, ours, heads, groups, masks[mask])


def test_padding_mask_type_without_mask_attends_everywhere():
    reference, ours = _pair(_config(4, 2), mask_type=AttnMaskType.padding)
    _assert_same_outputs_and_grads(reference, ours, 4, 2, None)


@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_local_head_counts(tp):
    # 8 heads / 4 groups split over `tp` ranks: each rank's module sees 8/tp heads and 4/tp groups.
    reference, ours = _pair(_config(8, 4), tp=tp)
    assert ours.num_attention_heads_per_partition == 8 // tp
    assert ours.num_query_groups_per_partition == 4 // tp
    _assert_same_outputs_and_grads(reference, ours, 8 // tp, 4 // tp, _padding_mask())


@pytest.mark.parametrize(
    "kwargs,config_overrides",
    [({"softmax_scale": 0.3}, {}), ({}, {"apply_query_key_layer_scaling": True}),
     ({"softmax_scale": 0.3}, {"apply_query_key_layer_scaling": True})],
    ids=["softmax_scale", "qk_layer_scaling", "both"],
)  # fmt: skip
def test_softmax_scale_and_query_key_layer_scaling(kwargs, config_overrides):
    reference, ours = _pair(_config(4, 2, **config_overrides), layer_number=3, **kwargs)
    _assert_same_outputs_and_grads(reference, ours, 4, 2, None)


def test_dropout_in_training_only_and_from_the_model_parallel_rng():
    from megatron.core import tensor_parallel

    reference, ours = _pair(_config(4, 2, attention_dropout=0.5))
    q, k, v = _qkv(4, 2)
    # Evaluation: no dropout, the same as DotProductAttention.
    reference.eval(), ours.eval()
    torch.testing.assert_close(ours(q, k, v, None), reference(q, k, v, None), rtol=1e-5, atol=1e-5)
    ours.train()
    default_rng = torch.get_rng_state()
    tensor_parallel.model_parallel_cuda_manual_seed(7)
    first = ours(q, k, v, None)
    tensor_parallel.model_parallel_cuda_manual_seed(7)
    again = ours(q, k, v, None)
    # Dropout happened, is reproducible from the model-parallel seed, and left the default generator alone.
    assert not torch.allclose(first, ours.eval()(q, k, v, None))
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert torch.equal(torch.get_rng_state(), default_rng)


@pytest.mark.parametrize(
    "overrides,field",
    [({"window_size": (4, 0)}, "window_size"), ({"softmax_type": "off-by-one"}, "softmax_type")],
)
def test_unsupported_configs_are_refused_at_construction(overrides, field):
    with pytest.raises(ConfigError, match=f"model.{field}=.*Fix: set model.attention_backend=unfused"):
        SDPAttention(_config(4, 2, **overrides), 1, AttnMaskType.causal, "self")


def test_unsupported_inputs_are_refused():
    _, ours = _pair(_config(4, 2))
    q, k, v = _qkv(4, 2)
    from megatron.core.packed_seq_params import PackedSeqParams

    with pytest.raises(NotImplementedError, match="thd format, got 'sbhd'"):
        ours(q, k, v, None, packed_seq_params=PackedSeqParams(qkv_format="sbhd"))
    with pytest.raises(ValueError, match=r"packed \(thd\) attention expects \[t, heads, dim\]"):
        ours(q, k, v, None, packed_seq_params=PackedSeqParams(qkv_format="thd"))
    with pytest.raises(NotImplementedError, match="bias"):
        ours(q, k, v, None, attention_bias=torch.zeros(1))


# ---- in a GPTModel built by the provider -------------------------------------------------------------


def _provide(provider, monkeypatch):
    # GPTModel pins Transformer Engine's NVTE_*_ATTN variables to its backend and refuses another
    # backend in the same process: forget them between models (monkeypatch restores them afterwards).
    for name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"):
        monkeypatch.delenv(name, raising=False)
    return provider.provide()


def _core_attention_types(model) -> set[str]:
    return {type(layer.self_attention.core_attention).__name__ for layer in model.decoder.layers}


@pytest.mark.parametrize(
    "backend,window,expected",
    [("auto", None, "SDPAttention"), ("flash", None, "SDPAttention"), ("fused", None, "SDPAttention"),
     ("unfused", None, "DotProductAttention"), ("local", None, "DotProductAttention"),
     ("auto", [4, 0], "DotProductAttention")],
)  # fmt: skip
def test_attention_backend_selects_core_attention(backend, window, expected, monkeypatch):
    model = _provide(tiny(attention_backend=backend, window_size=window), monkeypatch)
    assert _core_attention_types(model) == {expected}


def test_gpt_model_logits_and_grads_equal_with_both_attentions(monkeypatch):
    sdpa = _provide(tiny(qk_layernorm=True), monkeypatch)
    dpa = _provide(tiny(qk_layernorm=True, attention_backend="unfused"), monkeypatch)
    assert _core_attention_types(sdpa) == {"SDPAttention"} and _core_attention_types(dpa) == {
        "DotProductAttention"
    }
    dpa.load_state_dict(sdpa.state_dict())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (2, SEQ), generator=gen)
    pos = torch.arange(SEQ).expand(2, SEQ)
    losses = [model(ids, pos, None, labels=ids).mean() for model in (sdpa, dpa)]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
    for loss in losses:
        loss.backward()
    with torch.no_grad():
        logits = [model(ids, pos, None) for model in (sdpa, dpa)]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(sdpa.named_parameters(), dpa.parameters(), strict=True):
        torch.testing.assert_close(
            p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )
