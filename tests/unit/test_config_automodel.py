"""`--config-file` in NeMo AutoModel's `distributed:` form, mapped onto ConfigContainer fields."""

from __future__ import annotations

import textwrap

import pytest

from bridge.config.container import ConfigContainer
from bridge.config.layout import run_layout
from bridge.config.run_plan import build_plan
from bridge.config.yaml_io import merge_yaml
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider


def base(**model_fields) -> ConfigContainer:
    fields = dict(
        num_layers=8,
        hidden_size=64,
        num_attention_heads=8,
        num_query_groups=8,
        vocab_size=1024,
        seq_length=128,
    )
    fields.update(model_fields)
    cfg = ConfigContainer(model=GPTModelProvider(**fields))
    cfg.train.global_batch_size = 64
    cfg.train.train_iters = 10
    cfg.scheduler.lr_warmup_iters = 0
    return cfg


def merge(text: str, cfg: ConfigContainer | None = None):
    return merge_yaml(cfg or base(), textwrap.dedent(text), source="run.yaml")


def test_seed_structure_maps_onto_fields():
    # AutoModel's full `distributed:` section layout (strategy changed to megatron, which allows TP/PP).
    cfg, warnings = merge(
        """
        distributed:
          strategy: megatron
          dp_size: none
          dp_replicate_size: none
          tp_size: 2
          pp_size: 2
          cp_size: 1
          ep_size: 1
          sequence_parallel: true
          activation_checkpointing: true
          pipeline:
            pp_schedule: 1f1b
            pp_microbatch_size: 2
        """
    )
    assert warnings == []
    m = cfg.model
    assert (
        m.tensor_model_parallel_size,
        m.pipeline_model_parallel_size,
        m.context_parallel_size,
        m.expert_model_parallel_size,
        m.sequence_parallel,
    ) == (2, 2, 1, 1, True)
    d = cfg.distributed
    assert (d.strategy, d.dp_size, d.dp_replicate_size, d.activation_checkpointing, d.pp_schedule) == (
        "megatron",
        None,
        None,
        True,
        "1f1b",
    )
    assert cfg.train.micro_batch_size == 2
    assert build_plan(cfg, 8, cuda=True).warnings == ()
    assert run_layout(cfg, 8).describe() == "TP=2 PP=2 CP=1 EP=1 ETP=1 DP=2 EDP=4 world=8 SP"


def test_seed_tp_pp_example_interleaved_needs_virtual_stages():
    # AutoModel's "TP plus PP for a large multi-node model" example (tp 8, pp 4, interleaved1f1b),
    # with strategy megatron.
    cfg, _ = merge(
        """
        distributed:
          strategy: megatron
          tp_size: 8
          pp_size: 4
          cp_size: 1
          ep_size: 1
          pipeline:
            pp_schedule: interleaved1f1b
            pp_microbatch_size: 1
        """
    )
    assert cfg.distributed.pp_schedule == "interleaved_1f1b"
    with pytest.raises(
        ConfigError, match=r"interleaving needs virtual pipeline stages.*virtual_pipeline_model_parallel_size"
    ):
        build_plan(cfg, 32)


def test_layers_per_stage_gives_virtual_pipeline_size():
    cfg, _ = merge(
        """
        distributed:
          pp_size: 2
          pipeline: {pp_schedule: interleaved_1f1b, layers_per_stage: 2}
        """
    )
    assert cfg.model.virtual_pipeline_model_parallel_size == 2  # 8 layers / (2 stages * 2 layers)
    assert build_plan(cfg, 2, cuda=True).warnings == ()
    with pytest.raises(ConfigError, match=r"layers_per_stage=3: model.num_layers=8 must split"):
        merge("distributed: {pp_size: 2, pipeline: {layers_per_stage: 3}}")


def test_dp_size_is_checked_against_the_derived_value():
    cfg, _ = merge("distributed: {tp_size: 2, dp_size: 4}")
    assert build_plan(cfg, 8, cuda=True).warnings == ()
    with pytest.raises(ConfigError, match=r"distributed.dp_size = 4: .* = 4 / \(2 \* 1 \* 1\) = 2"):
        build_plan(cfg, 4)


def test_hsdp_and_step_scheduler_and_packing():
    cfg, _ = merge(
        """
        distributed: {strategy: fsdp2, dp_replicate_size: 2}
        step_scheduler: {global_batch_size: 32, local_batch_size: 1, max_steps: 100, ckpt_every_steps: 0, val_every_steps: 0}
        packed_sequence: {packed_sequence_size: 128}
        """
    )
    assert (cfg.distributed.strategy, cfg.distributed.dp_replicate_size) == ("fsdp2", 2)
    assert (cfg.train.global_batch_size, cfg.train.micro_batch_size, cfg.train.train_iters) == (32, 1, 100)
    assert (cfg.checkpoint.save_interval, cfg.validation.eval_interval, cfg.dataset.packed_sequence_size) == (
        0,
        0,
        128,
    )
    # The mapping is right, and HSDP is an fsdp2 layout (PyTorch FSDP2): dp_replicate 2 x dp_shard 4.
    assert run_layout(cfg, 8).dense_mesh_shape == (1, 2, 4, 1, 1)


def test_same_size_given_both_ways_must_agree():
    cfg, _ = merge("distributed: {tp_size: 2}\nmodel: {tensor_model_parallel_size: 2}\n")
    assert cfg.model.tensor_model_parallel_size == 2
    with pytest.raises(ConfigError) as err:
        merge("distributed: {tp_size: 2}\nmodel: {tensor_model_parallel_size: 4}\n")
    msg = str(err.value)
    assert (
        "distributed.tp_size=2" in msg
        and "model.tensor_model_parallel_size=4" in msg
        and "Fix: give it once" in msg
    )
    with pytest.raises(
        ConfigError, match=r"distributed.pipeline.pp_microbatch_size=2 and step_scheduler.local_batch_size=1"
    ):
        merge("distributed: {pipeline: {pp_microbatch_size: 2}}\nstep_scheduler: {local_batch_size: 1}\n")
    with pytest.raises(
        ConfigError,
        match=r"distributed.pipeline.pp_schedule='1f1b' and distributed.pp_schedule='interleaved_1f1b'",
    ):
        merge("distributed: {pp_schedule: interleaved_1f1b, pipeline: {pp_schedule: 1f1b}}")


def test_unknown_keys_fail_with_suggestions():
    with pytest.raises(
        ConfigError, match=r"unknown key distributed.tp_sise.*Did you mean distributed.tp_size"
    ):
        merge("distributed: {tp_size: 1, tp_sise: 2}")
    with pytest.raises(ConfigError, match=r"unknown key distributed.pipeline.pp_shedule.*pp_schedule"):
        merge("distributed: {pp_size: 2, pipeline: {pp_shedule: 1f1b}}")
    with pytest.raises(ConfigError, match=r"unknown key step_scheduler.num_epochs"):
        merge("step_scheduler: {num_epochs: 2}")


def test_every_seed_schedule_name_maps_onto_pp_schedule():
    names = {
        "1f1b": "1f1b",
        "interleaved1f1b": "interleaved_1f1b",
        "interleaved_1f1b": "interleaved_1f1b",
        "gpipe": "gpipe",
        "looped_bfs": "looped_bfs",
        "dfs": "dfs",
        "zero_bubble": "zero_bubble",
        "v_schedule": "v_schedule",
        "LoopedBFS": "looped_bfs",  # torch's get_schedule_class names, any case
        "InterleavedZeroBubble": "zero_bubble",
        "ZBVZeroBubble": "v_schedule",
    }
    for given, expected in names.items():
        cfg, warnings = merge(f"distributed: {{pp_size: 2, pipeline: {{pp_schedule: {given}}}}}")
        assert (cfg.distributed.pp_schedule, warnings) == (expected, []), given
    with pytest.raises(
        ConfigError, match=r"pp_schedule='pipedream' is not a pipeline schedule. Fix: use one of 1f1b"
    ):
        merge("distributed: {pp_size: 2, pipeline: {pp_schedule: pipedream}}")


def test_scale_grads_in_schedule_maps_onto_its_field_with_any_strategy():
    cfg, warnings = merge(
        "distributed: {pp_size: 2, pipeline: {pp_schedule: gpipe, pp_microbatch_size: 2, "
        "scale_grads_in_schedule: true}}"
    )
    assert warnings == []
    assert (cfg.distributed.pp_schedule, cfg.distributed.scale_grads_in_schedule) == ("gpipe", True)
    assert cfg.train.micro_batch_size == 2
    plan = build_plan(cfg, 4, cuda=True)  # pp 2 x dp 2, global 64 / (2 x 2) = 16 micro batches
    assert (plan.pipeline.engine, plan.pipeline.torch_class, plan.pipeline.scale_grads_in_schedule) == (
        "torch",
        "ScheduleGPipe",
        True,
    )
    assert plan.num_microbatches == 16


def test_fsdp2_only_keys_warn_with_fsdp2_and_fail_otherwise():
    _, warnings = merge("distributed: {strategy: fsdp2, pipeline: {patch_inner_model: false}}")
    assert warnings == [
        "distributed.pipeline.patch_inner_model has no Megatron-Core equivalent and is ignored (accepted for strategy fsdp2).",
    ]
    with pytest.raises(
        ConfigError,
        match=r"patch_inner_model is an FSDP2 setting of NeMo AutoModel and strategy is 'megatron'",
    ):
        merge("distributed: {pipeline: {patch_inner_model: false}}")


def test_defer_fsdp_grad_sync_is_a_field_of_fsdp2():
    cfg, warnings = merge("distributed: {strategy: fsdp2, tp_size: 1, defer_fsdp_grad_sync: false}")
    assert (cfg.distributed.defer_fsdp_grad_sync, warnings) == (False, [])
    build_plan(cfg, 4, cuda=False)
    cfg, _ = merge("distributed: {tp_size: 1, defer_fsdp_grad_sync: false}")
    with pytest.raises(
        ConfigError,
        match=r"distributed.defer_fsdp_grad_sync = False: an FSDP2 setting, and strategy is 'megatron'",
    ):
        build_plan(cfg, 4, cuda=False)


def test_moe_sub_config_rules():
    moe_base = base(num_moe_experts=8, moe_router_topk=2)
    cfg, warnings = merge(
        "distributed: {strategy: fsdp2, ep_size: 8, moe: {reshard_after_forward: true, wrap_outer_model: true}}",
        moe_base,
    )
    assert cfg.model.expert_model_parallel_size == 8
    assert cfg.distributed.moe_reshard_after_forward is True  # a field: it acts (strategies.py)
    assert warnings == [
        "distributed.moe.wrap_outer_model has no Megatron-Core equivalent and is ignored (accepted for strategy fsdp2)."
    ]
    cfg, _ = merge(
        "distributed: {strategy: fsdp2, ep_size: 2, moe: {activation_checkpointing: true}}", moe_base
    )
    assert cfg.distributed.activation_checkpointing is True
    with pytest.raises(ConfigError, match=r"distributed.moe is given but ep_size=1"):
        merge("distributed: {strategy: fsdp2, moe: {reshard_after_forward: false}}", moe_base)
    with pytest.raises(
        ConfigError, match=r"unknown key distributed.moe.reshard_after_fwd.*reshard_after_forward"
    ):
        merge("distributed: {strategy: fsdp2, ep_size: 8, moe: {reshard_after_fwd: false}}", moe_base)
    with pytest.raises(ConfigError, match=r"distributed.moe.reshard_after_forward is an FSDP2 setting"):
        merge("distributed: {strategy: megatron, ep_size: 8, moe: {reshard_after_forward: false}}", moe_base)


def test_moe_reshard_after_forward_needs_expert_parallelism():
    cfg, _ = merge("distributed: {strategy: fsdp2, tp_size: 1}\n")
    cfg.distributed.moe_reshard_after_forward = True
    with pytest.raises(
        ConfigError, match=r"distributed.moe_reshard_after_forward = True: applies to the MoE mesh"
    ):
        build_plan(cfg, 4, cuda=False)


def test_model_save_format_safetensors_is_understood():
    cfg, warnings = merge(
        "distributed: {strategy: fsdp2}\ncheckpoint: {model_save_format: safetensors, save_consolidated: true}"
    )
    assert (cfg.checkpoint.save_consolidated, warnings) == (True, [])
    with pytest.raises(ConfigError, match=r"checkpoint.model_save_format='torch_save': bridge writes"):
        merge("checkpoint: {model_save_format: torch_save}")


def test_own_shape_file_passes_through_unchanged():
    cfg, warnings = merge(
        "distributed: {strategy: megatron, overlap_grad_reduce: false}\ntrain: {train_iters: 3}\n"
    )
    assert (cfg.distributed.overlap_grad_reduce, cfg.train.train_iters, warnings) == (False, 3, [])
