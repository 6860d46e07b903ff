"""A study of the built-in trainer: its keys are TrainConfig paths, its base a recipe chain.

`load_base` resolves the base config (recipes, the study's overrides and budget, `--override`)
with each value's file:line, and checks the axes; `point_runs` gives one design point's
validated TrainConfig per seed. The study layer (ablate/studies/study.py, expand.py) calls them
through the adapter, as it calls another trainer's.

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
from typing import Any, Iterator, Sequence

from pydantic import ValidationError

from ablate import shipped
from ablate.adapters.base import config_hash
from ablate.adapters.builtin.config_paths import check_config_path
from ablate.adapters.builtin.provenance import (Provenance, apply_cli_overrides, resolve_base,
                                                set_path, validate_config)
from ablate.errors import InputError
from ablate.yamlio import YamlDoc
from trainer.config import TrainConfig

Assignment = tuple[tuple[str, ...], Any, str]  # (config keys, value, where it was written)


def load_base(doc: YamlDoc, study: Any, overrides: Sequence[str]
              ) -> tuple[dict[str, Any], Provenance, list[Path]]:
    """(config tree, provenance, recipe files) of a study, its axes checked. A base that is
    not valid alone is refused unless every run sets an axis that may make it valid."""
    tree, prov, recipes = resolve_base(doc, study.base, study.overrides, study.budget)
    tree = apply_cli_overrides(tree, prov, overrides)
    _check_axes(study, doc)
    try:
        TrainConfig.model_validate(tree)
    except ValidationError as err:
        if base_is_a_run(study) or not _axes_may_fix(err, study):
            validate_config(tree, prov, str(doc.path))  # raises the one-line error
    _need_base(doc, study)  # last: a wrong key or value is the more useful line to read first
    return tree, prov, recipes


def _need_base(doc: YamlDoc, study: Any) -> None:
    """The built-in trainer's defaults are a full-size run (24 CPU-hours), not a starting point:
    a study that forgot `base:` would otherwise plan, and on Slurm submit, that run in silence.
    (Other trainers' studies may leave it out: their adapters build the base from their keys.)"""
    if study.base is None:
        names = ", ".join(shipped.shipped_names("recipes")) or "a recipe YAML of TrainConfig values"
        raise InputError(f"{doc.where(('name',))}: the study has no `base:` (the recipe its runs "
                         f"start from); add e.g. `base: proxy.yaml` (shipped: {names})")


def check_values(ls: Any) -> None:
    """Where a value alone against the base is a run, check each first, so an invalid value is
    reported at its own line before any combination. In a grid or zip only combinations run
    (and `validate_config` still names the line that set the bad value)."""
    s = ls.study
    for path, vals in s.axes.items() if base_is_a_run(s) else ():
        for i, v in enumerate(vals):
            keys = tuple(path.split("."))
            tree, prov = _apply(ls.base_tree, ls.prov, [(keys, v, ls.doc.where(("axes", path, str(i))))])
            validate_config(tree, prov, str(ls.path))


def point_runs(ls: Any, assign: list[Assignment]) -> Iterator[tuple[int, TrainConfig]]:
    """(seed, TrainConfig) of one design point for each of the study's seeds."""
    tree, prov = _apply(ls.base_tree, ls.prov, assign)
    for seed in ls.study.seeds:
        yield seed, validate_config(set_path(tree, ("seed",), seed), prov, str(ls.path))


def _apply(base: dict[str, Any], prov: Provenance, assign: list[Assignment]) -> tuple[dict[str, Any], Provenance]:
    tree = base
    if assign:
        prov = dict(prov)
    for keys, value, where in assign:
        tree = set_path(tree, keys, value)
        prov[keys] = where
    return tree, prov


def run_id_of(config_json: dict[str, Any]) -> str:
    """Short hash of the resolved config (which includes the seed): 12 hex chars. Settings that
    change where a run is logged, how often it checkpoints, or how its work is cut to fit the
    GPUs, not what it computes, are left out (`logging`, `checkpoint`, `rollout.vllm`,
    `engine.micro_batch_tokens`: micro-batches sum to the same gradient;
    `engine.collective_timeout_minutes`: how long a stuck job waits), so changing them to
    fix an OOM, add a tracker or checkpoint more often resumes the run instead of starting a
    new one."""
    config_json = {k: v for k, v in config_json.items() if k not in ("logging", "checkpoint")}
    for section, key in (("rollout", "vllm"), ("engine", "micro_batch_tokens"),
                         ("engine", "collective_timeout_minutes")):
        if isinstance(config_json.get(section), dict):
            config_json[section] = {k: v for k, v in config_json[section].items() if k != key}
    return config_hash(config_json)


def base_is_a_run(study: Any) -> bool:
    """Whether the base config itself trains: then it must be valid on its own. In a grid or zip
    every run sets every axis, so a base that is only valid once an axis is applied (a cispo base
    with `loss.eps_high` and `loss.type: [ppo, dapo]`) is fine: `expand` validates each run.
    `_axes_may_fix` says which base errors an axis can make moot."""
    return not study.axes or study.mode in ("one_at_a_time", "leave_one_out")


def _axes_may_fix(err: ValidationError, study: Any) -> bool:
    """Whether every error is a check on a section an axis sets a key in (`loss` when an axis
    varies `loss.type`), so the runs may be valid. A bad value at a key itself (an override
    `loss.aggregation=median`) is an error whatever the axes do."""
    axes = [tuple(p.split(".")) for p in study.axes]
    return all(any(len(loc) < len(k) and k[:len(loc)] == loc for k in axes)
               for loc in (tuple(str(x) for x in e["loc"]) for e in err.errors()))


def _check_axes(study: Any, doc: YamlDoc) -> None:
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
        _check_components(study, doc)
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


def _check_components(study: Any, doc: YamlDoc) -> None:
    """leave_one_out: components, not axes, each reverting at least one TrainConfig path."""
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
