"""DeepSeek-V2 / V3 HF config <-> GPTModelProvider fields: multi-latent attention, YaRN, DeepSeek MoE.

Each rule below is transformers' DeepseekV2/DeepseekV3 code (5.x) checked against Megatron-Core's MLA
and router (0.16.1, 0.19.2); what they compute differently is refused, never approximated.

- Attention: MLATransformerConfig (q_lora_rank, kv_lora_rank, qk_head_dim = qk_nope_head_dim,
  qk_pos_emb_head_dim = qk_rope_head_dim, v_head_dim). HF builds q_a_layernorm / kv_a_layernorm with
  a fixed eps of 1e-6, Megatron-Core with layernorm_epsilon: rms_norm_eps must be 1e-6 (as published).
- RoPE: both rotate the rope slice in interleaved pairs (Megatron-Core's MLA de-interleaves first); V3's
  rope_interleave=false is refused. YaRN maps to rope_type="yarn"; the softmax scale is
  mscale(factor, mscale_all_dim)^2 / sqrt(q_head_dim) on both sides (HF's yarn_apply_mscale, Megatron's
  MultiLatentAttention), and the cos/sin factor is HF's attention_factor = mscale(factor, mscale) /
  mscale(factor, mscale_all_dim) when both are set, else mscale(factor) (Megatron's concentration factor
  with the same values). An explicit attention_factor or truncate=false is refused.
- Routing. V2 (softmax): greedy top-k of the softmax, not renormalised (Megatron pre_softmax=True);
  group_limited_greedy picks groups by their best expert, Megatron by the sum of its top
  (topk // group_topk) experts: equal only when topk // topk_group == 1, refused otherwise (the
  published 236B has 6 // 3 = 2). V3 (noaux_tc): sigmoid, + e_score_correction_bias (Megatron's
  expert_bias) for the choice only, groups by the sum of their top 2 (Megatron: topk // group_topk,
  equal when that is 2, as published), renormalised top-k (Megatron always renormalises sigmoid top-k:
  norm_topk_prob=false with topk > 1 is refused), times routed_scaling_factor.
- Layers below first_k_dense_replace are dense MLPs of intermediate_size (moe_layer_freq list).
- Multi-token prediction (V3's num_nextn_predict_layers): Megatron-Core's mtp_num_layers (its MTP block,
  on the last pipeline stage), as Megatron-Bridge reads it; the checkpoint holds depth k as
  model.layers.<num_hidden_layers + k>.* (transformers builds none: its logits ignore them). A model built
  with fewer mtp_num_layers leaves the others' tensors out, listed (bridge.conversion.unmapped).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from bridge.errors import ConfigError
from bridge.models import transformer_fields  # read at call time: tests swap the release's fields
from bridge.models.hf_translation.common import BASE_DEFAULTS, get, mtp_layer_tensors, refuse

logger = logging.getLogger(__name__)

MODEL_TYPES = ("deepseek_v2", "deepseek_v3")
# DeepSeek-V3's architecture under another model type: Kimi-K2's config.json says "kimi_k2" (its remote
# code's class is a DeepseekV3Config), with DeepseekV3ForCausalLM as its architecture.
V3_MODEL_TYPES = ("deepseek_v3", "kimi_k2")
HF_RMS_EPS = 1e-6  # DeepseekV2/V3RMSNorm's default, used by q_a_layernorm / kv_a_layernorm

# transformers' config-class defaults for the fields read here (checked in test_conversion_hf_config).
_COMMON_DEFAULTS = dict(
    BASE_DEFAULTS,
    attention_bias=False,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": dict(
        _COMMON_DEFAULTS,
        vocab_size=102400,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=2048,
        mlp_bias=False,
        first_k_dense_replace=0,
        n_group=None,
        topk_group=None,
        n_routed_experts=64,
        n_shared_experts=2,
        routed_scaling_factor=1.0,
        topk_method="greedy",
        norm_topk_prob=False,
        num_experts_per_tok=None,
        moe_intermediate_size=1407,
    ),
    "deepseek_v3": dict(
        _COMMON_DEFAULTS,
        vocab_size=129280,
        hidden_size=7168,
        intermediate_size=18432,
        num_hidden_layers=61,
        num_attention_heads=128,
        num_key_value_heads=128,
        max_position_embeddings=4096,
        moe_intermediate_size=2048,
        n_shared_experts=1,
        n_routed_experts=256,
        routed_scaling_factor=2.5,
        n_group=8,
        topk_group=4,
        num_experts_per_tok=8,
        first_k_dense_replace=3,
        norm_topk_prob=True,
        rope_interleave=True,
        num_nextn_predict_layers=1,
    ),
}
CLASS_DEFAULTS["kimi_k2"] = CLASS_DEFAULTS["deepseek_v3"]


_get, _refuse = get, refuse


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_fields(cfg: Any, has_rope_interleave: bool | None = None) -> dict[str, Any]:
    """MLA's RoPE fields (default or YaRN); `has_rope_interleave`: the config class has the
    rope_interleave switch (default: DeepSeek-V3's model types)."""
    params = dict(_get(cfg, "rope_parameters") or {})
    scaling = {**(_get(cfg, "rope_scaling") or {}), **params}
    theta = scaling.get("rope_theta", _get(cfg, "rope_theta", 10000.0))
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    if has_rope_interleave is None:
        has_rope_interleave = _get(cfg, "model_type") in V3_MODEL_TYPES
    if has_rope_interleave and _get(cfg, "rope_interleave", True) is False:
        raise _refuse(
            "rope_interleave",
            False,
            "Megatron-Core's multi-latent attention rotates the rope slice in interleaved pairs (as "
            "DeepSeek's published weights are laid out); transformers' rope_interleave=false rotates halves",
            "convert a checkpoint with rope_interleave=true (every published DeepSeek-V3)",
        )
    if float(scaling.get("partial_rotary_factor", 1.0)) != 1.0:
        raise _refuse(
            "partial_rotary_factor",
            scaling["partial_rotary_factor"],
            "DeepSeek's RoPE covers the whole qk_rope_head_dim slice",
            "drop it (set qk_rope_head_dim instead)",
        )
    out: dict[str, Any] = dict(position_embedding_type="rope", rotary_base=theta, rotary_percent=1.0)
    if rope_type == "default":
        # Megatron's softmax scale still applies mscale(rotary_scaling_factor, mscale_all_dim)^2: 1 here.
        return out | dict(rope_type="rope", rotary_scaling_factor=1.0, mscale=1.0, mscale_all_dim=0.0)
    if rope_type != "yarn":
        raise _refuse(
            "rope_parameters.rope_type",
            rope_type,
            "DeepSeek's multi-latent attention takes 'default' or 'yarn' RoPE (Megatron-Core's MLA rope_type)",
            "convert a model with default or yarn RoPE",
        )
    if scaling.get("truncate", True) is False:
        raise _refuse(
            "rope_parameters.truncate",
            False,
            "Megatron-Core's YaRN always rounds the correction range to integers (truncate=true)",
            "drop truncate",
        )
    original = scaling.get("original_max_position_embeddings")
    if original is None:
        raise _refuse(
            "rope_parameters.original_max_position_embeddings",
            None,
            "YaRN needs the pre-training context length",
            "set it as in the published config.json",
        )
    factor = scaling.get("factor")
    if factor is None:
        factor = _get(cfg, "max_position_embeddings") / original  # transformers' rule
    factor = float(factor)
    hf_mscale, hf_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    # transformers' attention_factor (cos/sin scale) and Megatron's concentration factor for the values passed.
    if hf_mscale and hf_all:
        hf_factor = _yarn_mscale(factor, hf_mscale) / _yarn_mscale(factor, hf_all)
    else:
        hf_factor = _yarn_mscale(factor)
    mscale = float(hf_mscale) if hf_mscale else 1.0
    mscale_all_dim = float(hf_all or 0.0)
    megatron_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    explicit = scaling.get("attention_factor")
    if explicit is not None and float(explicit) != hf_factor or not math.isclose(hf_factor, megatron_factor):
        raise _refuse(
            "rope_parameters.attention_factor/mscale",
            (explicit, hf_mscale, hf_all),
            f"Megatron-Core's YaRN scales cos/sin by mscale(factor, mscale) / mscale(factor, "
            f"mscale_all_dim) = {megatron_factor}, the config asks for {explicit or hf_factor}",
            "convert a config whose YaRN attention factor follows from mscale / mscale_all_dim",
        )
    return out | dict(
        rope_type="yarn",
        rotary_scaling_factor=factor,
        original_max_position_embeddings=int(original),
        beta_fast=float(scaling.get("beta_fast") or 32),
        beta_slow=float(scaling.get("beta_slow") or 1),
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
    )


def _routing_fields(cfg: Any, v3: bool, experts: int, topk: int) -> dict[str, Any]:
    groups, group_topk = _get(cfg, "n_group"), _get(cfg, "topk_group")
    method = _get(cfg, "topk_method", "noaux_tc" if v3 else "greedy")
    renormalise = bool(_get(cfg, "norm_topk_prob", v3))
    out: dict[str, Any] = dict(moe_router_topk_scaling_factor=float(_get(cfg, "routed_scaling_factor", 1.0)))
    if v3:
        if method not in (None, "noaux_tc"):
            raise _refuse(
                "topk_method",
                method,
                "transformers' DeepseekV3 routes with noaux_tc (sigmoid + e_score_correction_bias) whatever "
                "the field says, so another value leaves the intended routing unclear",
                "use topk_method=noaux_tc (as published)",
            )
        if topk > 1 and not renormalise:
            raise _refuse(
                "norm_topk_prob",
                False,
                "Megatron-Core's sigmoid router always renormalises the top-k weights",
                "convert a model with norm_topk_prob=true (as published)",
            )
        out |= dict(
            moe_router_score_function="sigmoid",
            moe_router_pre_softmax=False,
            moe_router_enable_expert_bias=True,
        )
        per_group_sum = 2  # transformers sums each group's top-2 choice scores
    else:
        if method not in ("greedy", "group_limited_greedy"):
            raise _refuse(
                "topk_method",
                method,
                "transformers' DeepseekV2 routes with greedy or group_limited_greedy",
                "use one of those",
            )
        if renormalise:
            raise _refuse(
                "norm_topk_prob",
                True,
                "transformers' DeepseekV2 never renormalises the top-k weights (DeepSeek's own code does "
                "when this is set), so the checkpoint's routing is ambiguous",
                "convert a model with norm_topk_prob=false (as published)",
            )
        out |= dict(moe_router_score_function="softmax", moe_router_pre_softmax=True)
        if method == "greedy":
            return out
        per_group_sum = 1  # transformers picks groups by their best expert
    if not groups or int(groups) == 1:
        return out  # one group: every expert is eligible, plain top-k
    groups, group_topk = int(groups), int(group_topk or 0)
    if experts % groups or not 0 < group_topk <= groups:
        raise _refuse(
            "n_group/topk_group",
            (groups, group_topk),
            f"the {experts} experts must split into n_group equal groups, topk_group of them chosen",
            "use the published values",
        )
    if topk // group_topk != per_group_sum:
        rule = "the sum of its top-2 scores" if v3 else "its best expert's score"
        raise _refuse(
            "n_group/topk_group",
            (groups, group_topk),
            f"transformers ranks each group by {rule}; Megatron-Core's group-limited routing by the sum of "
            f"its top (num_experts_per_tok // topk_group) = {topk // group_topk} scores, which differs",
            f"convert a model whose num_experts_per_tok // topk_group is {per_group_sum} "
            "(DeepSeek-V2-Lite routes greedily; DeepSeek-V3 has 8 // 4), or train it with Megatron-Core's rule "
            "from the preset",
        )
    return out | dict(moe_router_num_groups=groups, moe_router_group_topk=group_topk)


def _moe_fields(cfg: Any, v3: bool, layers: int) -> dict[str, Any]:
    experts = _get(cfg, "n_routed_experts")
    if not experts:
        raise _refuse(
            "n_routed_experts",
            experts,
            "transformers' DeepSeek layers past first_k_dense_replace are MoE layers",
            "use the published config.json",
        )
    topk = int(_get(cfg, "num_experts_per_tok") or 0)
    if not 1 <= topk <= int(experts):
        raise _refuse(
            "num_experts_per_tok", topk, f"must be between 1 and {experts}", "use the published value"
        )
    shared = _get(cfg, "n_shared_experts")
    if not shared or int(shared) <= 0:
        raise _refuse(
            "n_shared_experts",
            shared,
            "transformers builds shared experts of n_shared_experts * moe_intermediate_size in every MoE layer",
            "use the published config.json",
        )
    if not v3 and int(_get(cfg, "moe_layer_freq", 1) or 1) != 1:
        raise _refuse(
            "moe_layer_freq",
            _get(cfg, "moe_layer_freq"),
            "transformers' DeepseekV2 makes every layer from first_k_dense_replace on a MoE layer",
            "convert a model with moe_layer_freq=1 (as published)",
        )
    dense = int(_get(cfg, "first_k_dense_replace", 0) or 0)
    if not 0 <= dense < layers:
        raise _refuse(
            "first_k_dense_replace",
            dense,
            f"must leave at least one MoE layer of the {layers}",
            "use the published value",
        )
    size = int(_get(cfg, "moe_intermediate_size"))
    out = dict(
        num_moe_experts=int(experts),
        moe_router_topk=topk,
        moe_ffn_hidden_size=size,
        moe_shared_expert_intermediate_size=int(shared) * size,
        moe_shared_expert_gate=False,
        moe_router_dtype="fp32",  # transformers' router computes its logits in fp32
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=float(_get(cfg, "aux_loss_alpha", 1e-4 if v3 else 1e-3) or 0.0),
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )
    out |= _routing_fields(cfg, v3, int(experts), topk)
    if dense:
        out["moe_layer_freq"] = [0] * dense + [1] * (layers - dense)
    return out


def check_plain(cfg: Any, latent_eps_fixed: bool = True) -> None:
    """SwiGLU, no biases, one key/value head per head; with `latent_eps_fixed` (the provider keeps
    layernorm_epsilon for the latent norms) rms_norm_eps must be transformers' fixed latent eps."""
    if _get(cfg, "hidden_act", "silu") != "silu":
        raise _refuse(
            "hidden_act", _get(cfg, "hidden_act"), "DeepSeek uses SwiGLU (silu)", "use a silu model"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if _get(cfg, flag, False):
            raise _refuse(
                flag, True, "the deepseek mapping has no biases", f"convert a model with {flag}=false"
            )
    heads, kv_heads = _get(cfg, "num_attention_heads"), _get(cfg, "num_key_value_heads")
    if kv_heads is not None and int(kv_heads) != int(heads):
        raise _refuse(
            "num_key_value_heads",
            kv_heads,
            f"multi-latent attention expands keys and values to every one of the {heads} heads",
            f"set num_key_value_heads={heads} (as published)",
        )
    eps = float(_get(cfg, "rms_norm_eps"))
    if latent_eps_fixed and eps != HF_RMS_EPS:
        raise _refuse(
            "rms_norm_eps",
            eps,
            f"transformers' q_a_layernorm / kv_a_layernorm use a fixed eps of {HF_RMS_EPS}, Megatron-Core's "
            "q/kv layernorms use layernorm_epsilon like every other norm",
            f"convert a model with rms_norm_eps={HF_RMS_EPS} (as published)",
        )


def mla_fields(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the generic dtype / size fields) with multi-latent attention's sizes (no RoPE, no experts)."""
    if not transformer_fields.MLA_FIELDS:
        raise _refuse(
            "model_type",
            _get(cfg, "model_type"),
            f"multi-latent attention needs MLATransformerConfig fields megatron-core {transformer_fields.INSTALLED_RELEASE} lacks",
            "install megatron-core 0.16.1 or 0.19.2",
        )
    nope, rope = int(_get(cfg, "qk_nope_head_dim")), int(_get(cfg, "qk_rope_head_dim"))
    q_lora = _get(cfg, "q_lora_rank")
    fields = dict(base)
    fields.pop("window_size", None)
    return fields | dict(
        num_query_groups=int(_get(cfg, "num_attention_heads")),
        kv_channels=nope + rope,  # the q/k head size the attention scores use
        multi_latent_attention=True,
        qk_layernorm=True,
        q_lora_rank=None if q_lora is None else int(q_lora),
        kv_lora_rank=int(_get(cfg, "kv_lora_rank")),
        qk_head_dim=nope,
        qk_pos_emb_head_dim=rope,
        v_head_dim=int(_get(cfg, "v_head_dim")),
    )


def mla_hf_fields(p: Any) -> dict[str, Any]:
    """config.json's sizes of a multi-latent-attention model (the keys every MLA family writes alike)."""
    return {
        "hidden_size": p.hidden_size,
        "intermediate_size": p.ffn_hidden_size,
        "num_hidden_layers": p.num_layers,
        "num_attention_heads": p.num_attention_heads,
        "num_key_value_heads": p.num_attention_heads,
        "q_lora_rank": p.q_lora_rank,
        "kv_lora_rank": p.kv_lora_rank,
        "qk_nope_head_dim": p.qk_head_dim,
        "qk_rope_head_dim": p.qk_pos_emb_head_dim,
        "v_head_dim": p.v_head_dim,
    }


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """The DeepSeek provider fields: `base` (the generic dtype / size fields) with MLA, RoPE and MoE
    (the translator's `translate` hook: it replaces the generic RoPE and expert translation)."""
    fields = mla_fields(cfg, base)
    check_plain(cfg)
    v3 = _get(cfg, "model_type") in V3_MODEL_TYPES
    layers = int(_get(cfg, "num_hidden_layers"))
    fields |= rope_fields(cfg)
    fields |= _moe_fields(cfg, v3, layers)
    fields["mtp_num_layers"] = int(_get(cfg, "num_nextn_predict_layers", 0) or 0) or None
    return fields


mtp_hf_tensors = mtp_layer_tensors  # the family hook: MTP layers at model.layers.<num_hidden_layers + k>


def config_dict(p: Any, model_type: str, architecture: str) -> dict[str, Any]:
    """config.json for a DeepSeek provider (the caller checks that it reads back as the provider)."""
    if not p.num_moe_experts:
        raise ConfigError(
            f"model.num_moe_experts=None: a {architecture} checkpoint has MoE layers. Fix: set the experts"
        )
    freq = p.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(p.num_layers)] if isinstance(freq, int) else list(freq)
    dense = pattern.index(1) if 1 in pattern else p.num_layers
    if pattern != [0] * dense + [1] * (p.num_layers - dense):
        raise ConfigError(
            f"model.moe_layer_freq={freq!r}: {architecture} has dense layers first, then MoE layers only "
            "(first_k_dense_replace). Fix: use a list of 0s followed by 1s"
        )
    v3 = model_type == "deepseek_v3"
    size = p.moe_ffn_hidden_size
    shared = (p.moe_shared_expert_intermediate_size or 0) // size if size else 0
    out: dict[str, Any] = {
        **mla_hf_fields(p),
        "n_routed_experts": p.num_moe_experts,
        "num_experts_per_tok": p.moe_router_topk,
        "moe_intermediate_size": size,
        "n_shared_experts": shared,
        "first_k_dense_replace": dense,
        "routed_scaling_factor": p.moe_router_topk_scaling_factor or 1.0,
        "n_group": p.moe_router_num_groups or 1,
        "topk_group": p.moe_router_group_topk or 1,
        "norm_topk_prob": p.moe_router_score_function == "sigmoid" or not p.moe_router_pre_softmax,
        "aux_loss_alpha": p.moe_aux_loss_coeff,
    }
    if v3:
        out |= {"topk_method": "noaux_tc", "rope_interleave": True}
        out["num_nextn_predict_layers"] = p.mtp_num_layers or 0
    else:
        grouped = bool(p.moe_router_num_groups and p.moe_router_num_groups > 1)
        out |= {"topk_method": "group_limited_greedy" if grouped else "greedy", "moe_layer_freq": 1}
    if p.rope_type == "yarn":
        out["rope_scaling"] = {
            "type": "yarn",
            "factor": p.rotary_scaling_factor,
            "original_max_position_embeddings": p.original_max_position_embeddings,
            "beta_fast": p.beta_fast,
            "beta_slow": p.beta_slow,
            "mscale": p.mscale,
            "mscale_all_dim": p.mscale_all_dim,
        }
    return out


def sizing_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The provider fields the planner sizes a DeepSeek config.json with (completed with CLASS_DEFAULTS).

    Sizes only: no routing check, so the planner also sizes a model whose routing does not convert
    (DeepSeek-V2's group-limited greedy)."""
    heads, layers = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
    dense = int(cfg.get("first_k_dense_replace") or 0)
    q_lora = cfg.get("q_lora_rank")
    return dict(
        num_layers=layers,
        num_attention_heads=heads,
        num_query_groups=heads,
        ffn_hidden_size=int(cfg["intermediate_size"]),
        num_moe_experts=int(cfg["n_routed_experts"]),
        hidden_size=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        kv_channels=int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"]),
        gated_linear_unit=True,  # SwiGLU
        share_embeddings_and_output_weights=bool(cfg.get("tie_word_embeddings", False)),
        qk_layernorm=True,
        moe_router_topk=int(cfg["num_experts_per_tok"]),
        moe_ffn_hidden_size=int(cfg["moe_intermediate_size"]),
        moe_shared_expert_intermediate_size=int(cfg["n_shared_experts"]) * int(cfg["moe_intermediate_size"]),
        moe_layer_freq=[0] * dense + [1] * (layers - dense) if dense else 1,
        multi_latent_attention=True,
        q_lora_rank=None if q_lora is None else int(q_lora),
        kv_lora_rank=int(cfg["kv_lora_rank"]),
        qk_head_dim=int(cfg["qk_nope_head_dim"]),
        qk_pos_emb_head_dim=int(cfg["qk_rope_head_dim"]),
        v_head_dim=int(cfg["v_head_dim"]),
    )
