"""Ministral 3 text presets: none yet (the published checkpoints are Mistral3ForConditionalGeneration
folders; their language model converts from them, bridge/models/mistral3)."""
