"""The CPU proxy recipe as the benchmarks start from it, and the one rule of their quick modes.

A harness's `--quick` mode is a smoke run (tests/test_benchmarks.py runs each in CI): it shows
that the harness still runs and prints its output's shape, not the warmed model's rates. So a
quick mode runs the proxy without its warm-up (`model.proxy.warmup_target: None`), which costs
~1.5-3 min on one core the first time a cache builds it (trainer/warmup.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "proxy.yaml"


def unwarmed(tree: dict) -> dict:
    """`tree` (a proxy config as plain data) with the warm-up off; returned for chaining."""
    tree["model"]["proxy"]["warmup_target"] = None
    return tree


def proxy_tree(warmed: bool = True) -> dict:
    """recipes/proxy.yaml as plain data; `warmed=False` for a quick mode."""
    tree = yaml.safe_load(RECIPE.read_text())
    return tree if warmed else unwarmed(tree)
