"""Vocabulary padding (issue 28): `should_pad_vocab` (Megatron-Bridge's name) decides the rows the model
allocates; HF-derived providers do not pad; where padding is on, the padded logits never enter the loss."""

import math

import pytest
import torch

from bridge.errors import ConfigError
from bridge.models import GPTModelProvider
from bridge.parallel.layout import ParallelLayout
from bridge.parallel.param_count import params_per_rank
from tests.unit.test_gpt_provider import tiny as gpt_provider_tiny


def tiny(**overrides) -> GPTModelProvider:
    """test_gpt_provider's tiny model, narrower, padding to multiples of 64 rows."""
    fields = dict(hidden_size=32, ffn_hidden_size=64, make_vocab_size_divisible_by=64) | overrides
    return gpt_provider_tiny(**fields)


def test_padding_is_megatrons_rule_by_default_and_off_when_asked():
    assert tiny().should_pad_vocab is True
    assert tiny(tensor_model_parallel_size=2).padded_vocab_size() == 128  # multiple of 64 * 2
    assert tiny(should_pad_vocab=False, tensor_model_parallel_size=2).padded_vocab_size() == 100


def test_hf_translation_does_not_pad():
    from bridge.models.hf_translation import read, registry

    config = registry.with_class_defaults(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": 384,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        }
    )
    fields = read.provider_fields(config, registry.hf_family_for(["LlamaForCausalLM"]))
    assert fields["should_pad_vocab"] is False
    provider = GPTModelProvider(**fields, tensor_model_parallel_size=2)
    assert provider.padded_vocab_size() == 384


def test_unpadded_vocab_must_divide_by_tp_and_the_error_names_the_sizes_that_work():
    provider = tiny(vocab_size=98, should_pad_vocab=False, tensor_model_parallel_size=4)
    with pytest.raises(ConfigError) as err:
        provider.finalize()
    message = str(err.value)
    assert message.startswith("model.vocab_size = 98:")
    assert "tensor_model_parallel_size=4" in message
    assert "[1, 2, 7, 14, 49]" in message  # the divisors of 98 up to 64
    assert "model.should_pad_vocab=True" in message
    tiny(vocab_size=98, should_pad_vocab=False, tensor_model_parallel_size=2).finalize()


def test_planner_counts_the_rows_the_model_allocates():
    layout = ParallelLayout(world_size=2, tp=2)
    padded = tiny(tensor_model_parallel_size=2)
    unpadded = tiny(tensor_model_parallel_size=2, should_pad_vocab=False)
    rows_padded = params_per_rank(padded.model_shape(), layout).dense
    rows_unpadded = params_per_rank(unpadded.model_shape(), layout).dense
    # embedding + output layer, each (128 - 100) rows x 32 / tp more when padded
    assert rows_padded - rows_unpadded == 2 * (128 - 100) * 32 // 2


@pytest.fixture(scope="module")
def padded_model():
    from bridge.parallel import runtime

    if runtime.is_initialized():
        runtime.destroy_distributed()
    torch.manual_seed(0)
    provider = tiny()  # 100 -> 128 rows at TP=1
    (chunk,) = provider.provide_distributed_model(wrap_with_ddp=False)
    yield provider, chunk
    runtime.destroy_distributed()


def test_padded_logits_take_no_share_of_the_loss(padded_model):
    provider, model = padded_model
    assert provider.padded_vocab_size() == 128
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (2, 16), generator=gen)
    labels = torch.randint(0, 100, (2, 16), generator=gen)
    pos = torch.arange(16).expand(2, 16)
    with torch.no_grad():
        logits = model(ids, pos, attention_mask=None)
        loss = model(ids, pos, attention_mask=None, labels=labels)
    assert torch.isfinite(logits).all()
    # the reference: torch's cross entropy over the 100 real rows only
    want = torch.nn.functional.cross_entropy(
        logits[..., :100].reshape(-1, 100), labels.reshape(-1), reduction="none"
    )
    torch.testing.assert_close(loss.reshape(-1), want, rtol=1e-6, atol=1e-6)
    # with the padded rows in the softmax it would differ by about log(128 / 100) for small logits
    assert not math.isclose(float(loss.mean()), float(want.mean()) + math.log(128 / 100), rel_tol=1e-3)
    assert int(logits.argmax(-1).max()) < 100
