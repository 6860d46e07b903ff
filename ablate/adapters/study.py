"""Studies on another trainer: load (keys checked by the adapter) and expand to variants.

The axes, overrides and base recipe of such a study are the trainer's own keys (a flat mapping;
nested YAML is flattened to dotted keys, as Hydra names them). Each run's config.yaml is a
`ForeignConfig`: the trainer block, the seed and the overrides, which the job hands back to the
adapter to build the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from ablate import shipped
from ablate.adapters import adapter_for
from ablate.adapters.base import Adapter, TrainerSpec
from ablate.adapters.budget import check_budgets
from ablate.errors import InputError
from ablate.studies.design import LoadedStudy, Variant, check_size, points, run_id_of
from ablate.validation import Strict
from ablate.yamlio import YamlDoc, load_yaml
from trainer.config import BudgetConfig


class ForeignConfig(Strict):
    """What a run of another trainer is: written as `<run_dir>/config.yaml`."""

    trainer: TrainerSpec
    seed: int
    overrides: dict[str, Any]
    # The study's budget, kept apart from the overrides so an adaptive study's stages
    # (ablate/studies/adaptive.py) can rewrite it per stage as they do for the built-in trainer;
    # steps reach the trainer as its own key (`run_overrides`), gpu_hours are measured by the
    # runner (ablate/adapters/budget.py).
    budget: Optional[BudgetConfig] = None


def run_overrides(cfg: ForeignConfig) -> dict[str, Any]:
    """The variant's overrides plus the budget's steps as the trainer's own key (max_steps,
    trainer.total_training_steps, ...): what the trainer is run with."""
    over = dict(cfg.overrides)
    if cfg.budget is not None and cfg.budget.steps is not None:
        over[adapter_for(cfg.trainer).steps_key()] = cfg.budget.steps
    return over


def is_foreign(raw: Any) -> bool:
    """Whether a run's config.yaml (parsed) is for another trainer than the built-in one."""
    return isinstance(raw, dict) and isinstance(raw.get("trainer"), dict) and \
        raw["trainer"].get("kind", "ablate") != "ablate"


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


def _layer(adapter: Adapter, tree: dict[str, Any], layer: Any, where: str) -> dict[str, Any]:
    if not isinstance(layer, dict):
        raise InputError(f"{where}: must be a mapping of {adapter.kind} keys")
    flat = flatten(layer)
    for k in flat:
        adapter.check_key(k, where)
    return {**tree, **flat}


def _base(doc: YamlDoc, base: str | None, adapter: Adapter) -> dict[str, Any]:
    if base is None:
        return {}
    path = shipped.find(base, "recipes", doc.path.parent, what="base recipe",
                        where=doc.where(("base",)))  # the rule of a study's `base:`
    data = load_yaml(path).data or {}
    return _layer(adapter, {}, data, f"{path}")


def _cli(tree: dict[str, Any], adapter: Adapter, overrides: Sequence[str]) -> dict[str, Any]:
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


def load_foreign(doc: YamlDoc, study: Any, overrides: Sequence[str]) -> LoadedStudy:
    """A LoadedStudy whose base tree is a flat mapping of the trainer's own keys."""
    s = study
    where = doc.where(("trainer",))
    try:
        adapter = adapter_for(s.trainer)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
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
    return LoadedStudy(study=s, doc=doc, base_tree=tree, cli_overrides=list(overrides))


def expand_foreign(ls: LoadedStudy) -> list[Variant]:
    """Variants of a study on another trainer; each variant composed/checked by the adapter."""
    check_size(ls)
    s = ls.study
    adapter = adapter_for(s.trainer)
    out: list[Variant] = []
    seen: set[str] = set()
    for name, assign in points(ls):
        over = {**ls.base_tree, **{".".join(k): v for k, v, _ in assign}}
        for seed in s.seeds:
            cfg = ForeignConfig(trainer=s.trainer, seed=seed, overrides=over, budget=s.budget)
            if seed == s.seeds[0]:  # the trainer's steps key included (verl composes it)
                adapter.check_overrides(run_overrides(cfg), assign[-1][2] if assign else str(ls.path))
            rid = foreign_run_id(cfg)
            if rid not in seen:
                seen.add(rid)
                out.append(Variant(run_id=rid, name=name, seed=seed, config=cfg))  # type: ignore[arg-type]
    if not out:
        raise InputError(f"{ls.path}: the study expands to no runs")
    return out


def foreign_run_id(cfg: ForeignConfig) -> str:
    """The run id: a hash of what the run computes. How ablate stops the trainer (signal,
    grace) is left out, as the built-in trainer's checkpoint cadence is, so changing it
    resumes the run instead of starting a new one."""
    dump = cfg.model_dump(mode="json", exclude={"trainer": {"stop_signal", "stop_grace_s"}})
    for part, key in ((dump, "budget"), (dump["trainer"], "stop_when")):
        if part.get(key) is None:  # unset: the id of a study written before these existed
            part.pop(key, None)
    return run_id_of(dump)


def run_dir_config(run_dir: Path) -> ForeignConfig:
    return ForeignConfig.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))


class NoPlan:
    """The memory plan of a run on another trainer: none (that trainer sizes itself); has the
    attributes `sweep --dry-run` prints, all empty, and a note saying why."""

    def __init__(self, kind: str) -> None:
        self.note = f"trainer kind {kind}: no memory plan (ablate plans only its own trainer)"
        self.fits = None
        self.train: dict[str, float] = {}
        self.generation: dict[str, float] = {}

    def __getattr__(self, name: str) -> None:  # every other plan field: not known
        return None
