"""Loading a study file: parse, validate against its schema (ablate/studies/schema.py),
resolve its base recipe chain (ablate/adapters/builtin/provenance.py) and check its axes.

A study is small on purpose: `base` names a recipe (a YAML of TrainConfig values, which may
itself name a `base` to build on), `axes` maps dotted TrainConfig paths to the values to try,
and `mode` says how axes combine. Everything is checked against the trainer's TrainConfig
before anything runs, and every error names the file, the YAML line, the key path and, for a
typo, the nearest valid key (difflib) — an ablation that silently ran the default is worse
than one that did not start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError

from ablate.adapters.study import load_foreign
from ablate.errors import InputError
from ablate.adapters.builtin.config_paths import check_config_path
from ablate.studies.design import LoadedStudy  # its home is `design`; imported from here too
from ablate.adapters.builtin.provenance import apply_cli_overrides, resolve_base, validate_config
from ablate.studies.schema import Study
from ablate.studies.study_overrides import apply_study_overrides, split_study_overrides
from ablate.validation import validate_model
from ablate.yamlio import YamlDoc, load_yaml
from trainer.config import TrainConfig


def load_study(path: Path | str, overrides: Sequence[str] = ()) -> LoadedStudy:
    """Parse, validate and resolve a study file (nothing is written). `overrides` are
    `KEY=VALUE` strings (`sweep --override`) applied last, over the base, the study's own
    overrides and its budget."""
    path = Path(path)
    if path.suffix not in (".yaml", ".yml"):
        raise InputError(f"{path}: expected a study .yaml file")
    doc = load_yaml(path)
    _check_is_a_study(doc)
    study, doc = validate_model(doc, Study, "a study must be a mapping with at least `name`")
    study, config_overrides = _with_study_overrides(study, overrides)
    if study.trainer.kind != "ablate":  # another trainer: its own keys, checked by its adapter
        loaded = load_foreign(doc, study, config_overrides)
        loaded.cli_overrides = list(overrides)  # the record keeps `seeds=` too
        return loaded

    tree, prov, recipes = resolve_base(doc, study.base, study.overrides, study.budget)
    tree = apply_cli_overrides(tree, prov, config_overrides)
    _check_axes(study, doc)
    try:
        TrainConfig.model_validate(tree)
    except ValidationError as err:
        if base_is_a_run(study) or not _axes_may_fix(err, study):
            validate_config(tree, prov, str(path))  # raises the one-line error
    return LoadedStudy(study=study, doc=doc, base_tree=tree, prov=prov, recipes=recipes,
                       cli_overrides=list(overrides))


def _with_study_overrides(study: Study, overrides: Sequence[str]) -> tuple[Study, list[str]]:
    """`--override seeds=[0]` sets the study's own key; the rest are TrainConfig keys."""
    mine, rest = split_study_overrides(overrides)
    return apply_study_overrides(study, mine), rest


def _listed(items: list[str], most: int) -> str:
    return ", ".join(items[:most]) + (", ..." if len(items) > most else "")


def _check_is_a_study(doc: YamlDoc) -> None:
    """The two files people hand `ablate sweep` by mistake, said as such: an empty file, and a
    recipe (TrainConfig values, what `base:` names) instead of a study."""
    path, data = doc.path, doc.data
    if data in ({}, None):
        raise InputError(f"{path}: the file is empty; a study needs at least `name:` (see "
                         "recipes/loss_agg.yaml; `ablate schema` lists every key)")
    if not isinstance(data, dict) or "name" in data or "axes" in data:
        return
    recipe_keys = [k for k in data if k in TrainConfig.model_fields and k not in Study.model_fields]
    if recipe_keys:
        raise InputError(
            f"{path}: this is a TrainConfig recipe (keys {_listed(recipe_keys, 4)}), not a "
            f"study: run it once with `ablate run {path} --out results/NAME`, or sweep it from a "
            f"study file with `name:`, `base: {path.name}` (relative to the study) and `axes:`")


def base_is_a_run(study: Study) -> bool:
    """Whether the base config itself trains: then it must be valid on its own. In a grid or zip
    every run sets every axis, so a base that is only valid once an axis is applied (a cispo base
    with `loss.eps_high` and `loss.type: [ppo, dapo]`) is fine: `expand` validates each run.
    `_axes_may_fix` says which base errors an axis can make moot."""
    return not study.axes or study.mode in ("one_at_a_time", "leave_one_out")


def _axes_may_fix(err: ValidationError, study: Study) -> bool:
    """Whether every error is a check on a section an axis sets a key in (`loss` when an axis
    varies `loss.type`), so the runs may be valid. A bad value at a key itself (an override
    `loss.aggregation=median`) is an error whatever the axes do."""
    axes = [tuple(p.split(".")) for p in study.axes]
    return all(any(len(loc) < len(k) and k[:len(loc)] == loc for k in axes)
               for loc in (tuple(str(x) for x in e["loc"]) for e in err.errors()))


def _check_axes(study: Study, doc: YamlDoc) -> None:
    """Axis paths exist, values are non-empty lists, and the mode's shape rules hold."""
    if "axes" in doc.data and not study.axes:
        raise InputError(
            f"{doc.where(('axes',))}: axes is empty; list at least one path with values, or "
            "remove `axes` to run the base recipe alone"
        )
    for dotted, values in study.axes.items():
        where = doc.where(("axes", dotted))
        check_config_path(dotted, where, "axis")
        if not values:
            raise InputError(f"{where}: axis '{dotted}' has no values; list at least one")
        _check_no_repeats(dotted, values, doc)
    if study.mode == "leave_one_out":
        if not study.components:
            raise InputError(
                f"{doc.where(('mode',))}: mode leave_one_out needs `components:` (name -> "
                "reverted values of that component)"
            )
        if study.axes:
            raise InputError(
                f"{doc.where(('axes',))}: mode leave_one_out uses `components`, not `axes`"
            )
        for comp, reverted in study.components.items():
            if not reverted:
                raise InputError(f"{doc.where(('components', comp))}: component '{comp}' reverts nothing")
            for dotted in reverted:
                check_config_path(dotted, doc.where(("components", comp, dotted)), "component path")
    elif study.components:
        raise InputError(
            f"{doc.where(('components',))}: `components` is only used by mode leave_one_out "
            f"(mode is {study.mode})"
        )
    if study.mode in ("one_at_a_time", "zip") and not study.axes:
        raise InputError(f"{doc.where(('mode',))}: mode {study.mode} needs at least one axis")
    if study.mode == "zip":
        lengths = {d: len(v) for d, v in study.axes.items()}
        if len(set(lengths.values())) > 1:
            raise InputError(
                f"{doc.where(('axes',))}: mode zip needs axes of equal length, got {lengths}"
            )


def _value_key(v: Any) -> tuple[str, str]:
    """What makes two axis values the same run: 8 and 8.0 are one number, true is not 1."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return type(v).__name__, json.dumps(v, sort_keys=True, default=str)
    return "number", repr(float(v))


def _check_no_repeats(dotted: str, values: list[Any], doc: YamlDoc) -> None:
    """A value listed twice is a typo (it would be one run under two names, or silently one)."""
    first: dict[tuple[str, str], int] = {}
    for i, v in enumerate(values):
        j = first.setdefault(_value_key(v), i)
        if j != i:
            raise InputError(f"{doc.where(('axes', dotted, str(i)))}: axis '{dotted}' lists "
                             f"{json.dumps(v, default=str)} twice (items {j + 1} and {i + 1}); "
                             "list each value once")
