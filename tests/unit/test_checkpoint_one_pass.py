"""A load by one process checks the shards' checksums in its one read of them (bridge.checkpoint.save_load
with bridge.checkpoint.direct_load): a shard damaged after its manifest was written is found there as it was
before the load, and a run that may fall back loads the previous complete checkpoint, whose weights it then
holds (the reference: the model's state when that checkpoint was saved)."""

from __future__ import annotations

import pytest
import torch

from tests.functional.workers.convert_models import save_hf_model

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.usefixtures("single_process_groups"),
]


def _model(hf):
    from bridge import AutoBridge

    provider = AutoBridge.from_hf_pretrained(hf).to_megatron_provider(load_weights=False)
    return provider.provide_distributed_model(wrap_with_ddp=False, mixed_precision_wrapper=False)


def _weights(chunks) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in chunks[0].state_dict().items() if isinstance(v, torch.Tensor)}


def test_a_damaged_shard_is_found_in_the_one_pass_and_the_previous_checkpoint_loads(tmp_path):
    from bridge.checkpoint import load_checkpoint, save_checkpoint
    from bridge.checkpoint.direct_save import DirectSaveStrategy
    from bridge.checkpoint.save_load import CheckpointDamaged

    hf = tmp_path / "hf"
    save_hf_model("llama", hf, dtype=torch.bfloat16)
    chunks = _model(hf)
    root = tmp_path / "ckpt"
    save_checkpoint(root, 1, chunks, save_rng=False, sharded_strategy=DirectSaveStrategy())
    first = _weights(chunks)
    with torch.no_grad():
        for p in chunks[0].parameters():
            p.add_(1.0)
    save_checkpoint(root, 2, chunks, save_rng=False, sharded_strategy=DirectSaveStrategy())
    second = _weights(chunks)

    fresh = _model(hf)
    assert load_checkpoint(root, fresh, load_rng=False)["checkpoint_dir"].endswith("iter_0000002")
    assert all(torch.equal(_weights(fresh)[k], v) for k, v in second.items())

    shard = max((root / "iter_0000002").glob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside a tensor's bytes
    shard.write_bytes(bytes(data))
    damaged = rf"iter_0000002 is damaged: {shard.name}'s bytes differ from the manifest \(crc32 mismatch"
    with pytest.raises(CheckpointDamaged, match=damaged):
        load_checkpoint(root, _model(hf), load_rng=False)
    said: list[str] = []
    fresh = _model(hf)
    loaded = load_checkpoint(root, fresh, load_rng=False, fallback=True, on_fallback=said.append)
    assert loaded["checkpoint_dir"].endswith("iter_0000001")
    assert len(said) == 1 and "crc32 mismatch" in said[0] and "iter_0000001 instead" in said[0], said
    got = _weights(fresh)
    assert sorted(got) == sorted(first) and all(torch.equal(got[k], v) for k, v in first.items())
