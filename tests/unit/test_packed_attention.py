"""Packed rows (THD PackedSeqParams from cu_seqlens) against the same samples run one by one."""

import pytest

from bridge.models.provider_layout import derive_layout

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from bridge.models import GPTModelProvider  # noqa: E402
from bridge.models.attention import packed_causal_mask  # noqa: E402
from bridge.training.forward_step import packed_seq_params  # noqa: E402

LENGTHS = (5, 9, 3)  # three samples, then 7 tokens of padding: a row of 24
ROW = 24


def tiny(**overrides) -> GPTModelProvider:
    fields = dict(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, num_query_groups=2,
        vocab_size=100, seq_length=ROW, make_vocab_size_divisible_by=8, normalization="RMSNorm",
        activation_func="silu", gated_linear_unit=True, add_bias_linear=False, position_embedding_type="rope",
        hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    fields.update(overrides)
    return GPTModelProvider(**fields)


@pytest.fixture(scope="module", autouse=True)
def parallel_groups():
    from bridge.parallel import runtime

    if runtime.is_initialized():
        runtime.destroy_distributed()
    runtime.initialize_distributed(derive_layout(tiny(), 1))
    yield
    runtime.destroy_distributed()


def test_packed_mask_is_causal_within_segments_only():
    mask = packed_causal_mask(torch.tensor([0, 2, 5], dtype=torch.int32), 5, "cpu")
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0"):
        packed_causal_mask(torch.tensor([0, 2, 4]), 5, "cpu")


@pytest.mark.parametrize("overrides", [{}, {"qk_layernorm": True, "num_query_groups": 4}])
def test_packed_row_losses_equal_the_samples_run_alone(overrides, monkeypatch):
    for name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"):
        monkeypatch.delenv(name, raising=False)
    torch.manual_seed(0)
    model = tiny(**overrides).provide()
    gen = torch.Generator().manual_seed(1)
    samples = [torch.randint(0, 100, (n + 1,), generator=gen) for n in LENGTHS]
    pad = ROW - sum(LENGTHS)
    tokens = torch.cat([s[:-1] for s in samples] + [torch.zeros(pad, dtype=torch.long)])[None]
    labels = torch.cat([s[1:] for s in samples] + [torch.zeros(pad, dtype=torch.long)])[None]
    positions = torch.cat([torch.arange(n) for n in LENGTHS] + [torch.arange(pad)])[None]
    cu = torch.tensor([0, 5, 14, 17, 24], dtype=torch.int32)[None]  # the padding is a segment of its own

    packed = model(tokens, positions, None, labels=labels, packed_seq_params=packed_seq_params(cu))
    packed[0, :17].sum().backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    alone = [
        model(s[:-1][None], torch.arange(len(s) - 1)[None], None, labels=s[1:][None])[0] for s in samples
    ]
    torch.cat(alone).sum().backward()
    torch.testing.assert_close(packed[0, :17], torch.cat(alone), rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed_grads[name], p.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_thd_partition_takes_chunks_r_and_2cp_minus_1_minus_r_of_every_segment():
    from bridge.models.attention import thd_partition_indices

    cu = torch.tensor([0, 8, 12], dtype=torch.int32)  # segments of 8 and 4 tokens, cp = 2: chunks of 2 and 1
    assert thd_partition_indices(cu, 2, 0).tolist() == [0, 1, 6, 7, 8, 11]
    assert thd_partition_indices(cu, 2, 1).tolist() == [2, 3, 4, 5, 9, 10]
    with pytest.raises(ValueError, match=r"segment of 6 tokens does not split into 2\*cp = 4"):
        thd_partition_indices(torch.tensor([0, 6, 8]), 2, 0)
