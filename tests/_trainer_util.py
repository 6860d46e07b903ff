"""Shared helpers for the trainer tests: the proxy recipe shrunk to a few steps.

The warmed proxy model is cached on disk by its config (trainer.policy.proxy_path), so every
test module and test process builds it at most once per test session (conftest.py points
ABLATE_CACHE at a fresh temp dir unless the environment already chose one).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PROXY = yaml.safe_load((REPO / "recipes" / "proxy.yaml").read_text())
# Tests name their evaluation steps with every_steps; the recipe's log-spaced extra points
# (eval.per_decade) would add steps 1, 2, 3, 4, 6, ... to every one of them.
PROXY["eval"]["per_decade"] = None


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def tiny(**over) -> dict:
    """The proxy recipe (same cached model) with a tiny batch, eval and budget."""
    base = merge(PROXY, {
        "rollout": {"prompts_per_step": 8, "generations_per_prompt": 4},
        "eval": {"every_steps": 2, "num_prompts": 24, "samples_per_prompt": 2},
        "budget": {"steps": 4},
        "checkpoint": {"every_steps": 2},
    })
    return merge(base, over)


def config(d: dict):
    from trainer.config import TrainConfig

    return TrainConfig.model_validate(d)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def set_dotted(tree: dict, over: dict) -> dict:
    """`tree` with each `a__b__c=value` of `over` set at tree[a][b][c] (tests' config edits)."""
    for dotted, value in over.items():
        *path, key = dotted.split("__")
        node = tree
        for p in path:
            node = node.setdefault(p, {})
        node[key] = value
    return tree


def close(value, rel: float = 1e-4):
    """`value` as an expected metric: numbers compare with a relative tolerance, anything else
    (None: a column a row does not have yet, such as step 0's train/reward) exactly. pytest
    >= 9.2 refuses `pytest.approx(None)`."""
    import pytest

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return pytest.approx(value, rel=rel)
    return value
