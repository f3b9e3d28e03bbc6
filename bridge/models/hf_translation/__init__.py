"""The generic Hugging Face config.json <-> GPTModelProvider translator (models layer, pure Python).

`read` turns a config.json (or a transformers PretrainedConfig) into provider fields, `write` a
provider back into a config.json, `sizing` a config.json into the ModelShape the planner counts.
What differs between families is not here: each family folder's `hf_config.py` declares it as the
hooks `rules.FamilyRules` lists, and `registry` finds them. No module here names a family.
"""
