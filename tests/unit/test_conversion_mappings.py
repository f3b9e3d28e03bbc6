"""Mapping kinds against hand-built Megatron layouts, and the family tables."""

from __future__ import annotations

import pytest
import torch
import transformers

from bridge.conversion.mappings import ModelDims, make_mapping
from bridge.conversion.registry import families, family_for
from bridge.errors import ConfigError
from bridge.models.families import architecture_families

HEADS, GROUPS, D, H = 8, 4, 3, 5  # 2 q heads per group, head dim 3, hidden 5
DIMS = ModelDims(
    num_attention_heads=HEADS, num_query_groups=GROUPS, kv_channels=D, vocab_size=250, padded_vocab_size=256
)


def load(mapping, hf, local_shape, rank, size):
    """What the loader does: fill a local parameter from its pieces."""
    local = torch.full(local_shape, float("nan"))
    for p in mapping.pieces(local_shape, rank, size, DIMS):
        local[p.dst] = 0.0 if p.hf_name is None else hf[p.hf_name][p.src]
    return local


def export(mapping, shards, size):
    """What the exporter does: put the rank shards back into HF tensors."""
    shapes = mapping.hf_shapes(tuple(shards[0].shape), size, DIMS)
    out = {n: torch.full(s, float("nan")) for n, s in shapes.items()}
    for r, shard in enumerate(shards):
        for p in mapping.pieces(tuple(shard.shape), r, size, DIMS):
            if p.hf_name is not None:
                out[p.hf_name][p.src] = shard[p.dst]
    return out


def numbered(*shape):
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)


@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize("bias", [False, True])
def test_fused_qkv_is_megatrons_grouped_layout(size, bias):
    rest = () if bias else (H,)
    q, k, v = (
        numbered(HEADS * D, *rest),
        1000 + numbered(GROUPS * D, *rest),
        2000 + numbered(GROUPS * D, *rest),
    )
    hf = {"q": q, "k": k, "v": v}
    # Megatron: per group, its q heads then its k head then its v head; TP ranks own whole groups.
    hpg = HEADS // GROUPS
    fused = torch.cat(
        [
            torch.cat([q[g * hpg * D : (g + 1) * hpg * D], k[g * D : (g + 1) * D], v[g * D : (g + 1) * D]])
            for g in range(GROUPS)
        ]
    )
    expected = fused.chunk(size)
    m = make_mapping("qkv", "decoder.layers.0.self_attention.linear_qkv.weight", ("q", "k", "v"))
    shards = [load(m, hf, tuple(expected[r].shape), r, size) for r in range(size)]
    for r in range(size):
        assert torch.equal(shards[r], expected[r])
    back = export(m, shards, size)
    assert all(torch.equal(back[n], hf[n]) for n in hf)


@pytest.mark.parametrize("size", [1, 2])
def test_gated_mlp_splits_gate_and_up_per_rank(size):
    gate, up = numbered(8, H), -numbered(8, H) - 1
    hf = {"gate": gate, "up": up}
    m = make_mapping("gated_mlp", "x", ("gate", "up"))
    shards = [load(m, hf, (16 // size, H), r, size) for r in range(size)]
    for r in range(size):
        n = 8 // size
        assert torch.equal(shards[r], torch.cat([gate[r * n : (r + 1) * n], up[r * n : (r + 1) * n]]))
    back = export(m, shards, size)
    assert torch.equal(back["gate"], gate) and torch.equal(back["up"], up)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_packed_qkv_and_gate_up_cut_like_their_separate_tensors(size):
    # Phi-3's qkv_proj = [q; k; v] and gate_up_proj = [gate; up]: the same shards as the separate tensors
    q, k, v = numbered(HEADS * D, H), 1000 + numbered(GROUPS * D, H), 2000 + numbered(GROUPS * D, H)
    separate = make_mapping("qkv", "w", ("q", "k", "v"))
    packed = make_mapping("qkv_packed", "w", ("qkv",))
    local = ((HEADS + 2 * GROUPS) * D // size, H)
    hf = {"q": q, "k": k, "v": v, "qkv": torch.cat([q, k, v])}
    shards = [load(packed, hf, local, r, size) for r in range(size)]
    for r in range(size):
        assert torch.equal(shards[r], load(separate, hf, local, r, size))
    assert packed.hf_shapes(local, size, DIMS) == {"qkv": tuple(hf["qkv"].shape)}
    assert torch.equal(export(packed, shards, size)["qkv"], hf["qkv"])

    gate, up = numbered(8, H), -numbered(8, H) - 1
    hf = {"gate": gate, "up": up, "gate_up": torch.cat([gate, up])}
    separate = make_mapping("gated_mlp", "x", ("gate", "up"))
    packed = make_mapping("gated_mlp_packed", "x", ("gate_up",))
    shards = [load(packed, hf, (16 // size, H), r, size) for r in range(size)]
    for r in range(size):
        assert torch.equal(shards[r], load(separate, hf, (16 // size, H), r, size))
    assert torch.equal(export(packed, shards, size)["gate_up"], hf["gate_up"])


def test_column_row_and_replicated():
    w = numbered(4, 6)
    col = make_mapping("column", "c", ("w",))
    row = make_mapping("row", "r", ("w",))
    rep = make_mapping("replicated", "n", ("w",))
    assert torch.equal(load(col, {"w": w}, (2, 6), 1, 2), w[2:])
    assert torch.equal(load(row, {"w": w}, (4, 3), 1, 2), w[:, 3:])
    assert torch.equal(load(rep, {"w": w}, (4, 6), 0, 1), w)
    assert col.hf_shapes((2, 6), 2, DIMS) == {"w": (4, 6)} and row.hf_shapes((4, 3), 2, DIMS) == {"w": (4, 6)}


def test_vocab_padding_is_zero_and_never_exported():
    emb = numbered(250, H)
    m = make_mapping("vocab", "embedding.word_embeddings.weight", ("e",))
    shards = [load(m, {"e": emb}, (128, H), r, 2) for r in range(2)]
    assert torch.equal(shards[0], emb[:128])
    assert torch.equal(shards[1][:122], emb[128:]) and torch.equal(shards[1][122:], torch.zeros(6, H))
    assert torch.equal(export(m, shards, 2)["e"], emb)
    with pytest.raises(ConfigError, match="padded vocab 256"):
        m.hf_shapes((100, H), 2, DIMS)


def test_groups_must_divide_over_tp():
    m = make_mapping("qkv", "w", ("q", "k", "v"))
    with pytest.raises(
        ConfigError, match="num_query_groups=4 is not divisible by the tensor-parallel size 8"
    ):
        m.pieces((3, H), 0, 8, DIMS)


def test_table_rows_are_checked():
    with pytest.raises(ConfigError, match="unknown"):
        make_mapping("diagonal", "w", ("a",))
    with pytest.raises(ConfigError, match="takes 3 HF names, got 2"):
        make_mapping("qkv", "w", ("a", "b"))


def test_family_tables_resolve_global_names():
    mixtral = family_for(["MixtralForCausalLM"])
    _, m = mixtral.resolve("decoder.layers.3.mlp.experts.local_experts.2.linear_fc1.weight")
    assert m.kind == "gated_mlp"
    assert m.hf == (
        "model.layers.3.block_sparse_moe.experts.2.w1.weight",
        "model.layers.3.block_sparse_moe.experts.2.w3.weight",
    )
    rule, m = family_for(["Qwen3MoeForCausalLM"]).resolve("decoder.layers.0.mlp.router.weight")
    assert m.hf == ("model.layers.0.mlp.gate.weight",) and not rule.is_expert
    _, m = family_for(["Qwen2ForCausalLM"]).resolve("decoder.layers.1.self_attention.linear_qkv.bias")
    assert m.hf[2] == "model.layers.1.self_attn.v_proj.bias"
    assert family_for(["LlamaForCausalLM"]).resolve("decoder.layers.1.self_attention.linear_qkv.bias") is None
    _, m = family_for(["Qwen3ForCausalLM"]).resolve("decoder.layers.7.self_attention.k_layernorm.weight")
    assert m.hf == ("model.layers.7.self_attn.k_norm.weight",)
    # every architecture a family folder declares has a conversion table, and each is a transformers class
    assert set(families()) == set(architecture_families())
    assert [name for name in families() if not hasattr(transformers, name)] == []
    # OLMo 2's whole-projection q norm is cut by heads (column); its post-branch norms sit in the linears
    _, m = family_for(["Olmo2ForCausalLM"]).resolve("decoder.layers.1.self_attention.q_layernorm.weight")
    assert m.kind == "column" and m.hf == ("model.layers.1.self_attn.q_norm.weight",)
    _, m = family_for(["Gemma2ForCausalLM"]).resolve("decoder.layers.0.mlp.linear_fc2.post_layernorm.weight")
    assert m.hf == ("model.layers.0.post_feedforward_layernorm.weight",)
    # one deepseek table, each architecture with its own model type; V3's routing bias is a buffer row
    v2, v3 = family_for(["DeepseekV2ForCausalLM"]), family_for(["DeepseekV3ForCausalLM"])
    assert (v2.name, v2.model_type, v3.name, v3.model_type) == (
        "deepseek",
        "deepseek_v2",
        "deepseek",
        "deepseek_v3",
    )
    _, m = v3.resolve("decoder.layers.1.mlp.router.expert_bias")
    assert m.hf == ("model.layers.1.mlp.gate.e_score_correction_bias",) and m.kind == "replicated"
    _, m = v2.resolve("decoder.layers.0.self_attention.linear_kv_up_proj.weight")
    assert m.hf == ("model.layers.0.self_attn.kv_b_proj.weight",) and m.kind == "column"
    # Gemma 3's per-head q/k norms are whole on every TP rank (replicated), its sandwich norms as Gemma 2's
    gemma3 = family_for(["Gemma3ForCausalLM"])
    _, m = gemma3.resolve("decoder.layers.2.self_attention.q_layernorm.weight")
    assert m.kind == "replicated" and m.hf == ("model.layers.2.self_attn.q_norm.weight",)
    _, m = gemma3.resolve("decoder.layers.2.self_attention.linear_proj.post_layernorm.weight")
    assert m.hf == ("model.layers.2.post_attention_layernorm.weight",)
    qwen2_moe = family_for(["Qwen2MoeForCausalLM"])
    rule, m = qwen2_moe.resolve("decoder.layers.5.mlp.shared_experts.gate_weight")
    assert m.hf == ("model.layers.5.mlp.shared_expert_gate.weight",) and m.kind == "replicated"
    _, m = qwen2_moe.resolve("decoder.layers.5.mlp.linear_fc1.weight")  # a dense layer
    assert m.hf == ("model.layers.5.mlp.gate_proj.weight", "model.layers.5.mlp.up_proj.weight")
    _, m = family_for(["Phi3ForCausalLM"]).resolve("decoder.layers.2.self_attention.linear_qkv.weight")
    assert m.kind == "qkv_packed" and m.hf == ("model.layers.2.self_attn.qkv_proj.weight",)


def test_canonical_names_are_global_and_local_spec():
    """Pipeline-local layer numbers, EP-local expert numbers and TE's names all map to one canonical name."""
    from types import SimpleNamespace

    from bridge.conversion.model_params import Ranks, canonical_name

    # a stage holding global layers 4 and 5 of a 4-expert model, on EP rank 1 of 2
    model = SimpleNamespace(
        decoder=SimpleNamespace(layers=[SimpleNamespace(layer_number=5), SimpleNamespace(layer_number=6)]),
        config=SimpleNamespace(num_moe_experts=4),
    )
    ranks = Ranks(tp=0, tp_size=1, etp=0, etp_size=1, ep=1, ep_size=2)
    cases = {
        "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight": "decoder.layers.5.mlp.experts.local_experts.2.linear_fc2.weight",
        "decoder.layers.0.mlp.experts.linear_fc1.weight1":  # TEGroupedMLP
        "decoder.layers.4.mlp.experts.local_experts.3.linear_fc1.weight",
        "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight": "decoder.layers.4.input_layernorm.weight",
        "decoder.layers.1.mlp.linear_fc1.layer_norm_weight": "decoder.layers.5.pre_mlp_layernorm.weight",
        # multi-latent attention (TE spec): the q / kv latent norms fused into the up projections
        "decoder.layers.0.self_attention.linear_q_up_proj.layer_norm_weight": (
            "decoder.layers.4.self_attention.q_layernorm.weight"
        ),
        "decoder.layers.1.self_attention.linear_kv_up_proj.layer_norm_weight": (
            "decoder.layers.5.self_attention.kv_layernorm.weight"
        ),
        "output_layer.weight": "output_layer.weight",
    }
    for local, canonical in cases.items():
        assert canonical_name(model, local, ranks) == canonical


def test_stacked_expert_views_cut_and_put_back_the_same_elements():
    # GPT-OSS's gate_up_proj [experts, hidden, 2 * ffn]: gate at even columns, up at odd, each served
    # as an nn.Linear weight [ffn, hidden]; the export writes them back where they came from.
    import torch

    from bridge.conversion.stacked_experts import StackedNames

    views = family_for(["GptOssForCausalLM"]).stacked_experts
    names = StackedNames(views)
    view, stacked, expert = names.resolve("model.layers.3.mlp.experts.2.up_proj.weight")
    assert (stacked, expert, view.start, view.step, view.transpose) == (
        "model.layers.3.mlp.experts.gate_up_proj",
        2,
        1,
        2,
        True,
    )
    assert names.views_of(stacked) == 2 and names.views_of("model.layers.3.mlp.experts.down_proj") == 1
    assert names.resolve("model.layers.3.mlp.router.weight") is None
    full = torch.arange(3 * 4 * 6).reshape(3, 4, 6)
    up = view.cut(full[expert])
    assert up.shape == view.virtual_shape((4, 6)) == (3, 4)
    assert torch.equal(up, full[2][:, 1::2].T)
    assert view.expert_shape(tuple(up.shape)) == (4, 6)


def test_mamba_in_proj_and_conv1d_split_each_block_over_tp():
    # in_proj [z; x; B; C; dt] = [8; 8; 4; 4; 2] rows: TP rank 1 of 2 holds the second half of each block
    from bridge.conversion.mappings import ModelDims, make_mapping

    dims = ModelDims(4, 4, 16, 250, 256, mamba_d_inner=8, mamba_groups_state=4, mamba_num_heads=2)
    in_proj = make_mapping("mamba_in_proj", "decoder.layers.0.mixer.in_proj.weight", ("w",))
    assert in_proj.hf_shapes((13, 64), 2, dims) == {"w": (26, 64)}
    rows = [
        (p.src[0].start, p.src[0].stop, p.dst[0].start, p.dst[0].stop)
        for p in in_proj.pieces((13, 64), 1, 2, dims)
    ]
    assert rows == [(4, 8, 0, 4), (12, 16, 4, 8), (18, 20, 8, 10), (22, 24, 10, 12), (25, 26, 12, 13)]
    conv = make_mapping("mamba_conv1d", "decoder.layers.0.mixer.conv1d.bias", ("b",))
    rows = [(p.src[0].start, p.src[0].stop) for p in conv.pieces((8,), 0, 2, dims)]
    assert rows == [(0, 4), (8, 10), (12, 14)]
