"""Studies on another trainer: their base config (keys checked by the adapter) and runs.

The axes, overrides and base recipe of such a study are the trainer's own keys (a flat mapping;
nested YAML is flattened to dotted keys, as Hydra names them). Each run's config.yaml is a
`ForeignConfig`: the trainer block, the seed and the overrides, which the job hands back to the
adapter to build the command. The adapters (ablate/adapters/foreign.py) call this module; it
builds no study of its own (ablate/studies/ does, through the adapter).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from ablate import shipped
from ablate.adapters.base import TrainerSpec, config_hash
from ablate.adapters.budget import check_budgets
from ablate.errors import InputError
from ablate.validation import Strict
from ablate.yamlio import YamlDoc, load_yaml
from ablate.adapters.builtin import BudgetConfig


class ForeignConfig(Strict):
    """What a run of another trainer is: written as `<run_dir>/config.yaml`."""

    trainer: TrainerSpec
    seed: int
    overrides: dict[str, Any]
    # The study's budget, kept apart from the overrides so an adaptive study's stages
    # (ablate/studies/adaptive.py) can rewrite it per stage as they do for the built-in trainer;
    # steps reach the trainer as its own key (ForeignAdapter.run_overrides), gpu_hours are
    # measured by the runner (ablate/adapters/budget.py).
    budget: Optional[BudgetConfig] = None


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> dotted keys (`actor: {lr: 1}` -> `actor.lr: 1`)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _layer(adapter: Any, tree: dict[str, Any], layer: Any, where: str) -> dict[str, Any]:
    if not isinstance(layer, dict):
        raise InputError(f"{where}: must be a mapping of {adapter.kind} keys")
    flat = flatten(layer)
    for k in flat:
        adapter.check_key(k, where)
    return {**tree, **flat}


def _base(doc: YamlDoc, base: str | None, adapter: Any) -> dict[str, Any]:
    if base is None:
        return {}
    path = shipped.find(base, "recipes", doc.path.parent, what="base recipe",
                        where=doc.where(("base",)))  # the rule of a study's `base:`
    data = load_yaml(path).data or {}
    return _layer(adapter, {}, data, f"{path}")


def _cli(tree: dict[str, Any], adapter: Any, overrides: Sequence[str]) -> dict[str, Any]:
    for item in overrides:
        key, sep, raw = item.partition("=")
        where = f"--override {item}"
        if not sep or not key.strip():
            raise InputError(f"{where}: expected KEY=VALUE with a {adapter.kind} key")
        adapter.check_key(key.strip(), where)
        try:
            tree = {**tree, key.strip(): yaml.safe_load(raw) if raw.strip() else None}
        except yaml.YAMLError as e:
            raise InputError(f"{where}: value is not valid YAML ({str(e).splitlines()[0]})") from None
    return tree


def load_foreign(adapter: Any, doc: YamlDoc, study: Any, overrides: Sequence[str]) -> dict[str, Any]:
    """A study's base tree: a flat mapping of the trainer's own keys, every key (base recipe,
    overrides, `--override`, axes, components) checked by the adapter."""
    s = study
    check_budgets(doc, s, adapter)
    tree = _base(doc, s.base, adapter)
    tree = _layer(adapter, tree, s.overrides, doc.where(("overrides",)))
    tree = _cli(tree, adapter, overrides)
    for key, values in s.axes.items():
        adapter.check_key(key, doc.where(("axes", key)))
        if not values:
            raise InputError(f"{doc.where(('axes', key))}: axis '{key}' has no values; list at least one")
    for comp, reverted in s.components.items():
        for key in reverted:
            adapter.check_key(key, doc.where(("components", comp, key)))
    if s.mode in ("one_at_a_time", "zip") and not s.axes:
        raise InputError(f"{doc.where(('mode',))}: mode {s.mode} needs at least one axis")
    if s.mode == "zip" and len({len(v) for v in s.axes.values()}) > 1:
        raise InputError(f"{doc.where(('axes',))}: mode zip needs axes of equal length")
    return tree


def foreign_run_id(cfg: ForeignConfig) -> str:
    """The run id: a hash of what the run computes. How ablate stops the trainer (signal,
    grace) is left out, as the built-in trainer's checkpoint cadence is, so changing it
    resumes the run instead of starting a new one."""
    dump = cfg.model_dump(mode="json", exclude={"trainer": {"stop_signal", "stop_grace_s"}})
    for part, key in ((dump, "budget"), (dump["trainer"], "stop_when")):
        if part.get(key) is None:  # unset: the id of a study written before these existed
            part.pop(key, None)
    return config_hash(dump)


def run_dir_config(run_dir: Path) -> ForeignConfig:
    return ForeignConfig.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))
