"""checkpoint.load_checkpoint refuses a checkpoint that does not fit the model (one process, tiny models):
shapes, tied vs untied embeddings, RoPE settings recorded in run_config.yaml. Also the provider's
post-build hook and the random_init switch."""

from __future__ import annotations

import pytest
import yaml

from bridge.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _single_process_groups():
    yield
    from bridge.parallel import runtime

    runtime.destroy_distributed()


def _provider(**changes):
    from bridge.models import GPTModelProvider

    fields = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                  num_query_groups=2, vocab_size=256, seq_length=32, position_embedding_type="rope",
                  normalization="RMSNorm", gated_linear_unit=True, activation_func="silu",
                  add_bias_linear=False)  # fmt: skip
    fields.update(changes)
    return GPTModelProvider(**fields)


def _save(provider, path):
    from bridge.checkpoint import save_checkpoint

    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    model = {n: getattr(provider, n) for n in ("rotary_base", "rope_scaling", "rope_scaling_factor",
             "share_embeddings_and_output_weights", "position_embedding_type", "hidden_size")}  # fmt: skip
    save_checkpoint(path, 0, chunks, save_rng=False, run_config_yaml=yaml.safe_dump({"model": model}))
    return path


def _load(path, provider):
    from bridge.checkpoint import load_checkpoint

    chunks = provider.provide_distributed_model(wrap_with_ddp=False)
    return load_checkpoint(path, chunks, load_rng=False, model_config=provider)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _save(_provider(), tmp_path_factory.mktemp("ck") / "base")


def test_same_model_loads(saved):
    assert _load(saved, _provider())["iteration"] == 0


def test_shape_mismatch_names_tensor_and_both_shapes(saved):
    with pytest.raises(
        ConfigError, match=r"tensor '[^']+' has shape \[.*\] in the checkpoint but \[.*\] in the model"
    ):
        _load(saved, _provider(ffn_hidden_size=96))


def test_tied_checkpoint_into_untied_model_and_reverse(saved, tmp_path):
    with pytest.raises(ConfigError, match="share_embeddings_and_output_weights"):
        _load(saved, _provider(share_embeddings_and_output_weights=True))
    tied = _save(_provider(share_embeddings_and_output_weights=True), tmp_path / "tied")
    with pytest.raises(ConfigError, match="share_embeddings_and_output_weights"):
        _load(tied, _provider())


def test_tied_mismatch_without_run_config_is_still_an_error(saved, tmp_path):
    # a checkpoint written before run_config.yaml (and the manifest) existed
    (saved / "iter_0000000" / "run_config.yaml").rename(tmp_path / "kept.yaml")
    (saved / "iter_0000000" / "manifest.json").rename(tmp_path / "manifest.json")
    try:
        with pytest.raises(ConfigError, match=r"separate output_layer.weight \(saved untied\)"):
            _load(saved, _provider(share_embeddings_and_output_weights=True))
    finally:
        (tmp_path / "kept.yaml").rename(saved / "iter_0000000" / "run_config.yaml")
        (tmp_path / "manifest.json").rename(saved / "iter_0000000" / "manifest.json")


def test_rope_mismatch_is_an_error(saved):
    with pytest.raises(ConfigError, match=r"rotary_base: checkpoint 10000, model 500000"):
        _load(saved, _provider(rotary_base=500000))
    with pytest.raises(ConfigError, match=r"rope_scaling: checkpoint False, model True"):
        _load(saved, _provider(rope_scaling=True))


def test_post_build_hook_runs_on_bare_chunks_and_random_init_switch():
    seen = []
    provider = _provider()
    provider.register_post_build_hook(lambda chunks: seen.append([type(c).__name__ for c in chunks]))
    provider.provide_distributed_model(wrap_with_ddp=True)
    assert seen == [["GPTModel"]]
    assert "_hf_bridge" not in vars(provider) and "_skip_random_init" not in vars(provider)
