"""The rules of each config section, next to the section they check (bridge.config.validation runs them).

rules        one_of / positive: the shapes most rules share
train        train, validation (evaluation)
optimizer    optimizer, scheduler (and scheduler_iters: the lengths Megatron-Core's scheduler gets)
muon         optimizer=muon: the release, package, strategy and precision Megatron-Core's Muon runs with
data         dataset: kind, split, blend list, files present (parse_split; blend_paths from
             bridge.config.blend_list)
tokenizer    tokenizer: type and vocabulary size against the model's
files        what the run reads, checked without torch: data files non-empty, a Hugging Face tokenizer
             folder with an eos token, NullTokenizer JSONL holding token ids
checkpoint   checkpoint: format, directories, resume step, retention
logger       logger, profiling
distributed  distributed: strategy, its knobs, what it needs from the machine
pipeline     distributed.pp_schedule against the layout and the batch
precision    mixed_precision, fp8
"""
