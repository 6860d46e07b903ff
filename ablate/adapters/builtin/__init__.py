"""The built-in trainer (`trainer/`) as an adapter: its config language (TrainConfig paths:
config_paths.py; recipes with `base:` chains and each value's file:line: provenance.py)."""
