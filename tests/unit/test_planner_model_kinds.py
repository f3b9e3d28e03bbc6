"""The planner's sizes of hybrid Mamba models, Gated DeltaNet and MTP layers and a VLM's image side:
per-rank shares, memory, and training FLOPs against Megatron-Core's published formulas
(megatron/training/training.py, num_floating_point_operations: mamba_layer_flops, gdn_layer_flops,
attn_layer_flops, the MTP terms). Whole-model counts are checked in test_presets.py: hybrids and LLaVA
against transformers on the meta device, MTP layers against Megatron-Core's built MTP block."""

from dataclasses import replace

import pytest

from bridge.models import preset
from bridge.parallel.layout import ParallelLayout
from bridge.parallel.memory import TrainingSetup, estimate_memory, stage_memory
from bridge.parallel.param_count import count_parameters, padded_vocab_size, params_per_rank
from bridge.parallel.planner.speed import estimate_step, model_flops_per_token
from bridge.parallel.planner.stages import choose_split
from bridge.parallel.planner.systems import SYSTEMS

SEQ = 8192


def _shape(name):
    return replace(preset(name).model_shape(), seq_length=None)


def test_nemotronh_flops_are_megatron_cores_hybrid_formula():
    # nvidia/Nemotron-H-8B: per token, forward (Megatron-Core's hybrid_flops / tokens), times 3 for training.
    # Megatron-Core leaves out the Mamba conv1d; bridge counts it as 2 FLOPs per weight (as
    # gdn_layer_flops counts the GDN conv): + 2 * d_conv * (d_inner + 2 * groups * state) per Mamba layer.
    h, vocab, heads, groups, kv, ffn = 4096, 131072, 32, 8, 128, 21504
    m_heads, m_head_dim, state, m_groups, d_conv = 128, 64, 128, 8, 4
    pattern = preset("nemotronh_8b").hybrid_override_pattern
    n_attn, n_mamba, n_mlp = pattern.count("*"), pattern.count("M"), pattern.count("-")
    p = kv * heads / h
    attn = 4 * h * p * (h + h * groups / heads) + 2 * SEQ * h * p
    mlp = 4 * (ffn / h) * h**2  # squared ReLU: no gate
    d_in = m_heads * m_head_dim
    mamba = 2 * h * (2 * d_in + 2 * m_groups * state + m_heads) + 7 * d_in * state + 2 * d_in * h
    conv = 2 * d_conv * (d_in + 2 * m_groups * state)
    forward = n_attn * attn + n_mlp * mlp + n_mamba * (mamba + conv) + 2 * h * vocab
    # float sums of integers below 2^53 in another order: equal to ~1e-15
    assert model_flops_per_token(_shape("nemotronh_8b"), SEQ) == pytest.approx(3 * forward, rel=1e-12)


def test_gated_deltanet_flops_are_megatron_cores_formula():
    # Qwen3-Next-80B-A3B: 36 Gated DeltaNet layers (gdn_layer_flops), 12 gated softmax-attention layers
    # (the output gate doubles q's projection), every layer MoE: 10 of 512 experts of 512 and a shared
    # expert of 512 (SwiGLU: 3 matrices), plus the router (2 * h * experts) and the shared expert's gate
    # (2 * h), which bridge counts as matrix products and Megatron-Core leaves out.
    h, vocab, layers = 2048, 151936, 48
    heads, groups, kv = 16, 2, 256
    nk, nv, dk, dv, kernel = 16, 32, 128, 128, 4
    experts, topk, moe_ffn, shared = 512, 10, 512, 512
    qk_dim, v_dim = nk * dk, nv * dv
    gdn = 2 * (
        h * (2 * qk_dim + 2 * v_dim + 2 * nv) + kernel * (2 * qk_dim + v_dim) + nv * dv**2 * 4 + h * v_dim
    )
    q, kvs = heads * kv, groups * kv
    attn = 2 * (h * (2 * q + 2 * kvs) + q * h) + 2 * SEQ * q
    moe = 2 * h * (3 * moe_ffn * topk + 3 * shared) + 2 * h * experts + 2 * h
    n_gdn = layers * 3 // 4
    forward = n_gdn * gdn + (layers - n_gdn) * attn + layers * moe + 2 * h * vocab
    ours = model_flops_per_token(_shape("qwen3_next_80b_a3b"), SEQ)
    # bridge counts the q / k norm weights (2 * 256 per attention layer) as matrix weights: 6 * 512 * 12
    # FLOPs of ~1.3e10, a relative 2e-6
    # (counting softmax attention in all 48 layers, as before, would add 3 * 36 * 2 * SEQ * q: +5%)
    assert ours == pytest.approx(3 * forward, rel=1e-5)


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 2), (8, 2)])
def test_hybrid_rank_shares_add_up_to_the_model(tp, pp):
    # Every Mamba-2 weight is split by heads over tp; only each layer's pre-norm and the final norm are
    # copied on every tp rank.
    shape = _shape("nemotronh_8b")
    layout = ParallelLayout(tp * pp, tp=tp, pp=pp, sequence_parallel=tp > 1, model=shape)
    summed = sum(params_per_rank(shape, layout, s).total for s in range(pp)) * tp
    count = count_parameters(shape)
    padding = (padded_vocab_size(shape.vocab_size, tp) - shape.vocab_size) * shape.hidden_size * 2
    assert summed == count.total + (tp - 1) * count.norms + padding
    assert count.norms == (shape.num_layers + 1) * shape.hidden_size  # one pre-norm per hybrid layer


def test_hybrid_memory_and_step_follow_the_layer_kinds():
    shape = _shape("nemotronh_8b")
    layout = ParallelLayout(8, tp=2, sequence_parallel=True, model=shape)
    setup = TrainingSetup(SEQ, 1, 64)
    mem = estimate_memory(shape, layout, setup)
    assert mem.params * 1e9 == params_per_rank(shape, layout).total * 2  # bf16 weights
    # the same layers counted as GPT layers (attention + MLP each) hold more weights and activations
    as_gpt = replace(shape, hybrid_pattern=None, mamba=None)
    gpt_mem = estimate_memory(as_gpt, replace(layout, model=as_gpt), setup)
    assert mem.params < gpt_mem.params and mem.activations < gpt_mem.activations
    fields, split = choose_split(shape.num_layers, 1, None)
    est = estimate_step(shape, layout, setup, split, SYSTEMS["h100"], "infiniband")
    gpt_est = estimate_step(
        as_gpt, replace(layout, model=as_gpt), setup, split, SYSTEMS["h100"], "infiniband"
    )
    assert 0 < est.step_time_s < gpt_est.step_time_s


@pytest.mark.parametrize("name", ["deepseek_v3", "glm45"])
def test_an_mtp_layer_adds_megatron_cores_mtp_flops(name):
    # Megatron-Core's transformer_flops with mtp_num_layers: one more decoder layer of the last layer's kind
    # (MoE here), the MTP projection 2 * h^2 (its 3 h norms bridge leaves out, as it leaves out every norm)
    # and one more logits product 2 * h * vocab, forward; x 3 for training.
    shape = _shape(name)
    h, vocab = shape.hidden_size, shape.vocab_size
    deeper = replace(shape, num_layers=shape.num_layers + 1, moe_layer_freq=(*shape.moe_layers(), True))
    one_more_layer = model_flops_per_token(deeper, SEQ) - model_flops_per_token(shape, SEQ)
    added = model_flops_per_token(replace(shape, mtp_layers=1), SEQ) - model_flops_per_token(shape, SEQ)
    # differences of ~1e17-FLOP floats of integers: exact to ~1e-15 of the sum
    assert added == pytest.approx(one_more_layer + 3 * (2 * 2 * h * h + 2 * h * vocab), rel=1e-9)


def test_mtp_layers_sit_on_the_last_stage():
    # Unsplit (tp = ep = 1), the last stage holds the MTP layer whole and, with pp > 1, a copy of the
    # embedding for its input; the first stage is unchanged.
    plain = _shape("glm45_air")
    shape = replace(plain, mtp_layers=1)
    layout = ParallelLayout(2, pp=2, model=shape)
    first, last = (params_per_rank(shape, layout, s).total for s in (0, 1))
    first_plain, last_plain = (params_per_rank(plain, replace(layout, model=plain), s).total for s in (0, 1))
    mtp = count_parameters(shape).total - count_parameters(plain).total
    table = padded_vocab_size(shape.vocab_size, 1) * shape.hidden_size
    assert first == first_plain
    assert last - last_plain == mtp + table
    setup = TrainingSetup(SEQ, 1, 64)
    with_mtp, without = (stage_memory(m, replace(layout, model=m), setup, 1) for m in (shape, plain))
    assert with_mtp.params * 1e9 == last * 2  # bf16 weights
    # its activations: one more MoE layer, the [2h] pair and a second set of logits (fp32 copy too)
    logits = SEQ * padded_vocab_size(shape.vocab_size, 1) * (2 + 4)
    assert (with_mtp.activations - without.activations) * 1e9 > logits


def test_a_frozen_vision_tower_holds_weights_only():
    # LLaVA-1.5-7B: CLIP ViT-L/14-336 (frozen by default) and its projector on the first stage, whole on
    # each tp rank; the frozen tower has no fp32 gradient and no optimizer state.
    provider = preset("llava15_7b")
    shape = replace(provider.model_shape(), seq_length=None)
    plain = replace(shape, vision_params=0, frozen_params=0, image_tokens=0)
    layout = ParallelLayout(4, tp=2, pp=2, model=shape)
    setup = TrainingSetup(4096, 1, 64)
    first, first_plain = (stage_memory(m, replace(layout, model=m), setup, 0) for m in (shape, plain))
    # GB differences of floats: exact to ~1e-6 bytes of 1e9, so within a byte
    assert (first.params - first_plain.params) * 1e9 == pytest.approx(shape.vision_params * 2, abs=1)  # bf16
    trained = shape.vision_params - shape.frozen_params  # the projector
    assert (first.grads - first_plain.grads) * 1e9 == pytest.approx(trained * 4, abs=1)
    # the projector's fp32 master weights and Adam moments, sharded over dp = 1
    assert (first.optimizer - first_plain.optimizer) * 1e9 == pytest.approx(trained * 12, abs=1)
    assert shape.image_tokens == 576  # (336 / 14)^2 patches, the class token dropped
    # per text token the FLOPs hold no image side
    assert model_flops_per_token(shape, 4096) == model_flops_per_token(plain, 4096)


@pytest.mark.parametrize(
    "name,sizes,field",
    [
        ("nemotronh_8b", dict(cp=2), "cp"),  # Mamba layers: no context parallelism
        ("nemotronh_8b", dict(pp=2, vpp=2), "vpp"),  # MambaStack: no virtual stages
        ("nemotronh_8b", dict(tp=16), "mamba_num_groups"),  # 8 Mamba groups: tp must divide them
        # Gemma 3's image-block attention mask (its folder's CONTEXT_PARALLEL_REFUSED)
        ("gemma3_4b_it", dict(cp=2), "cp"),
    ],
)
def test_layouts_the_providers_refuse_are_refused_for_the_planner(name, sizes, field):
    from bridge.errors import ConfigError

    shape = _shape(name)
    if field == "mamba_num_groups":  # 32 KV heads, so that tp=16 passes the attention rules
        shape = replace(shape, num_query_groups=32)
    with pytest.raises(ConfigError, match=field):
        ParallelLayout(16, model=shape, **sizes)
