"""Loading a study file: parse, validate against its schema (ablate/studies/schema.py), then
the adapter of its trainer (ablate/adapters: the built-in trainer's resolves the base recipe
chain and checks the axes against TrainConfig; another trainer's checks its own keys) resolves
its base config. Nothing is written, and every error names the file, the YAML line, the key
path and, for a typo, the nearest valid key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ablate.adapters import adapter_for
from ablate.adapters.builtin import recipe_keys
from ablate.errors import InputError
from ablate.studies.design import LoadedStudy  # its home is `design`; imported from here too
from ablate.studies.schema import Study
from ablate.studies.study_overrides import apply_study_overrides, split_study_overrides
from ablate.validation import validate_model
from ablate.yamlio import YamlDoc, load_yaml


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
    try:
        adapter = adapter_for(study.trainer)
    except InputError as e:  # the `trainer:` block lacks what its kind needs
        raise InputError(f"{doc.where(('trainer',))}: {e}") from None
    tree, prov, recipes = adapter.load_base(doc, study, config_overrides)
    return LoadedStudy(study=study, doc=doc, base_tree=tree, prov=prov, recipes=recipes,
                       cli_overrides=list(overrides))  # the record keeps `seeds=` too


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
    found = [k for k in data if k in recipe_keys() and k not in Study.model_fields]
    if found:
        raise InputError(
            f"{path}: this is a TrainConfig recipe (keys {_listed(found, 4)}), not a "
            f"study: run it once with `ablate run {path} --out results/NAME`, or sweep it from a "
            f"study file with `name:`, `base: {path.name}` (relative to the study) and `axes:`")
