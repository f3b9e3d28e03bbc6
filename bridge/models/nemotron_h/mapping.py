"""Nemotron-H / Nemotron Nano 2 (NemotronHForCausalLM): Hugging Face <-> Megatron-Core names, as data.

One HF block per layer (`backbone.layers.N`: a pre-norm `norm` and a `mixer` that is a Mamba-2 mixer, an
attention, or an MLP) against MambaModel's layers of the local hybrid spec (bridge.models.hybrid_build):
Mamba layers `norm` + `mixer.*`, attention layers `input_layernorm` + `self_attention.*`, MLP layers
`pre_mlp_layernorm` + `mlp.*`. The HF names are the checkpoints' (`backbone.`, which transformers reads as its `model.` and writes back); the mixer's
packed in_proj [z; x; B; C; dt] and conv1d [x; B; C] are cut per block for tensor parallelism
(bridge.conversion.mappings.MambaInProj / MambaConv1d). Megatron-Core 0.16.1 names the conv
`mixer.conv1d.weight` / `.bias`, 0.19 `mixer.conv1d_weight` / `conv1d_bias`: rows for both.
Nemotron 3's MoE layers (`mixer.gate`, `mixer.experts.N`, `mixer.shared_experts`, the latent projections)
are MoELayer's (`mlp.router`, `mlp.experts.local_experts.N`, `mlp.shared_experts`, `mlp.fc1/fc2_latent_proj`,
full on every TP rank); the checkpoints hold one up/down pair per expert (transformers stacks them on load).
"""

ARCHITECTURES = ("NemotronHForCausalLM",)
HF_MODEL_TYPE = "nemotron_h"
PROVIDER_KIND = "hybrid"  # MambaModelProvider (bridge.models.provider_kinds)
PROVIDER_FIELDS: dict = {}

L = "backbone.layers.{layer}"
M = "decoder.layers.{layer}"
E = f"{M}.mlp.experts.local_experts.{{expert}}"
X = f"{L}.mixer.experts.{{expert}}"

MAPPINGS = (
    ("vocab", "embedding.word_embeddings.weight", "backbone.embeddings.weight"),
    ("vocab", "output_layer.weight", "lm_head.weight"),
    ("replicated", "decoder.final_norm.weight", "backbone.norm_f.weight"),
    # the one pre-norm of each block, under the name its layer kind gives it
    ("replicated", f"{M}.norm.weight", f"{L}.norm.weight"),
    ("replicated", f"{M}.input_layernorm.weight", f"{L}.norm.weight"),
    ("replicated", f"{M}.pre_mlp_layernorm.weight", f"{L}.norm.weight"),
    # Mamba-2 mixer
    ("mamba_in_proj", f"{M}.mixer.in_proj.weight", f"{L}.mixer.in_proj.weight"),
    ("mamba_conv1d", f"{M}.mixer.conv1d.weight", f"{L}.mixer.conv1d.weight"),
    ("mamba_conv1d", f"{M}.mixer.conv1d.bias", f"{L}.mixer.conv1d.bias"),
    ("mamba_conv1d", f"{M}.mixer.conv1d_weight", f"{L}.mixer.conv1d.weight"),
    ("mamba_conv1d", f"{M}.mixer.conv1d_bias", f"{L}.mixer.conv1d.bias"),
    ("column", f"{M}.mixer.dt_bias", f"{L}.mixer.dt_bias"),
    ("column", f"{M}.mixer.A_log", f"{L}.mixer.A_log"),
    ("column", f"{M}.mixer.D", f"{L}.mixer.D"),
    ("column", f"{M}.mixer.norm.weight", f"{L}.mixer.norm.weight"),
    ("row", f"{M}.mixer.out_proj.weight", f"{L}.mixer.out_proj.weight"),
    # attention (no RoPE)
    (
        "qkv",
        f"{M}.self_attention.linear_qkv.weight",
        (f"{L}.mixer.q_proj.weight", f"{L}.mixer.k_proj.weight", f"{L}.mixer.v_proj.weight"),
    ),
    ("row", f"{M}.self_attention.linear_proj.weight", f"{L}.mixer.o_proj.weight"),
    # squared-ReLU MLP without gate
    ("column", f"{M}.mlp.linear_fc1.weight", f"{L}.mixer.up_proj.weight"),
    ("row", f"{M}.mlp.linear_fc2.weight", f"{L}.mixer.down_proj.weight"),
    # Nemotron 3's MoE: sigmoid router with its score-correction bias, squared-ReLU experts without gate
    ("replicated", f"{M}.mlp.router.weight", f"{L}.mixer.gate.weight"),
    ("replicated", f"{M}.mlp.router.expert_bias", f"{L}.mixer.gate.e_score_correction_bias"),
    ("column", f"{E}.linear_fc1.weight", f"{X}.up_proj.weight"),
    ("row", f"{E}.linear_fc2.weight", f"{X}.down_proj.weight"),
    ("column", f"{M}.mlp.shared_experts.linear_fc1.weight", f"{L}.mixer.shared_experts.up_proj.weight"),
    ("row", f"{M}.mlp.shared_experts.linear_fc2.weight", f"{L}.mixer.shared_experts.down_proj.weight"),
    ("replicated", f"{M}.mlp.fc1_latent_proj.weight", f"{L}.mixer.fc1_latent_proj.weight"),
    ("replicated", f"{M}.mlp.fc2_latent_proj.weight", f"{L}.mixer.fc2_latent_proj.weight"),
)
