"""Config trees with provenance: a run's TrainConfig is built as a nested dict from layers (a
chain of base recipes, a study's overrides and budget, `--override KEY=VALUE`), recording which
file and line set each value, so that a value TrainConfig refuses is reported where it was
written, not where it ended up.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from pydantic import ValidationError

from ablate import shipped
from ablate.errors import InputError
from ablate.adapters.builtin.config_paths import check_config_path
from ablate.validation import fields_at, format_validation_error
from ablate.yamlio import KeyPath, YamlDoc, load_yaml
from trainer.config import BudgetConfig, TrainConfig

Provenance = dict[KeyPath, str]


def set_path(tree: dict[str, Any], keys: KeyPath, value: Any) -> dict[str, Any]:
    """Copy-on-write set of `tree[k0][k1]...= value`; returns the new root (inputs untouched)."""
    root = dict(tree)
    node = root
    for k in keys[:-1]:
        child = node.get(k)
        child = dict(child) if isinstance(child, dict) else {}
        node[k] = child
        node = child
    node[keys[-1]] = value
    return root


def _flatten(tree: Any, keys: KeyPath = ()) -> list[tuple[KeyPath, Any]]:
    """Leaves of a nested mapping whose keys may be dotted ('loss.type' == loss: {type})."""
    if not isinstance(tree, dict):
        return [(keys, tree)]
    out = []
    for k, v in tree.items():
        sub = keys + tuple(str(k).split("."))
        if isinstance(v, dict) and fields_at(TrainConfig, sub) is not None:
            out.extend(_flatten(v, sub))
        else:
            out.append((sub, v))
    return out


def merge_layer(
    tree: dict[str, Any], prov: Provenance, layer: Any, doc: YamlDoc, doc_keys: KeyPath, what: str
) -> dict[str, Any]:
    """Apply one recipe layer (nested or dotted keys) onto `tree`, checking every path."""
    if not isinstance(layer, dict):
        raise InputError(f"{doc.where(doc_keys)}: {what} must be a mapping of TrainConfig keys")
    for keys, value in _flatten(layer):
        dotted = ".".join(keys)
        where = doc.where(doc_keys + _doc_keys(layer, keys))
        check_config_path(dotted, where, "key")
        tree = set_path(tree, keys, copy.deepcopy(value))
        prov[keys] = where
    return tree


def _doc_keys(layer: dict[str, Any], keys: KeyPath) -> KeyPath:
    """The YAML key path (as written, dotted or nested) of a flattened config path."""
    out: KeyPath = ()
    node: Any = layer
    i = 0
    while i < len(keys) and isinstance(node, dict):
        for j in range(len(keys), i, -1):
            k = ".".join(keys[i:j])
            if k in node:
                out += (k,)
                node = node[k]
                i = j
                break
        else:
            break
    return out


def validate_config(tree: dict[str, Any], prov: Provenance, fallback: str) -> TrainConfig:
    """TrainConfig from a nested dict; errors point at the file/line that set the bad value."""
    try:
        return TrainConfig.model_validate(tree)
    except ValidationError as err:

        msg = str(err.errors(include_url=False)[0]["msg"])

        def where(loc: KeyPath) -> str:
            for n in range(len(loc), 0, -1):
                if loc[:n] in prov:
                    return prov[loc[:n]]
            # A check on a whole section (`loss`: "loss.type 'cispo' does not take eps_high")
            # points at the line that set a key under it the message names (the last such key
            # in provenance order, i.e. the order keys were first written), else at any key under it.
            under = [k for k in prov if len(k) > len(loc) and k[:len(loc)] == loc]
            named = [k for k in under if re.search(rf"\b{re.escape(k[-1])}\b", msg)]
            return prov[(named or under)[-1]] if under else fallback

        raise InputError(format_validation_error(err, where, TrainConfig)) from None


def find_recipe(ref: str, near: Path, where: str) -> Path:
    """A `base:` recipe: relative to the file naming it, then the current folder, then the
    recipes ablate ships (ablate/shipped.py; a user's file of that name wins)."""
    return shipped.find(ref, "recipes", near, what="base recipe", where=where)


def load_recipe(path: Path, chain: tuple[Path, ...] = ()) -> tuple[dict[str, Any], Provenance, list[Path]]:
    """A recipe YAML (TrainConfig values, optional `base:`) merged over its bases."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise InputError(f"{path}: circular base: {cycle}")
    doc = load_yaml(path)
    data = doc.data
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: a recipe must be a mapping of TrainConfig keys")
    data = dict(data)
    tree: dict[str, Any] = {}
    prov: Provenance = {}
    files: list[Path] = []
    parent = data.pop("base", None)
    if parent is not None:
        if not isinstance(parent, str) or not parent:
            raise InputError(f"{doc.where(('base',))}: base must be a relative path to a recipe")
        ppath = find_recipe(parent, path.parent, doc.where(('base',)))
        tree, prov, files = load_recipe(ppath, (*chain, resolved))
    if "axes" in data or "seeds" in data or "name" in data:
        raise InputError(
            f"{path}: is a study (has name/axes/seeds), but is used as a base recipe; a base must "
            "be plain TrainConfig values"
        )
    tree = merge_layer(tree, prov, data, doc, (), "a recipe")
    return tree, prov, [*files, path]


def resolve_base(doc: YamlDoc, base: Optional[str], overrides: dict[str, Any],
                 budget: Optional[BudgetConfig]) -> tuple[dict[str, Any], Provenance, list[Path]]:
    """Config tree of a study-like file: its base recipe chain, then overrides, then budget."""
    tree: dict[str, Any] = {}
    prov: Provenance = {}
    recipes: list[Path] = []
    if base is not None:
        bpath = find_recipe(base, doc.path.parent, doc.where(('base',)))
        tree, prov, recipes = load_recipe(bpath, (doc.path.resolve(),))
    tree = merge_layer(tree, prov, overrides, doc, ("overrides",), "overrides")
    if budget is not None:
        tree = set_path(tree, ("budget",), budget.model_dump(exclude_none=True))
        prov[("budget",)] = doc.where(("budget",))
    return tree, prov, recipes


# Keys whose value is a file or folder: an existing relative path is made absolute, so a job
# started from another working directory (a Slurm node, a background process) finds it.
PATH_KEYS = ("model.name_or_path", "task.path")


def apply_cli_overrides(tree: dict[str, Any], prov: Provenance,
                        overrides: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs onto a config tree: KEY a dotted TrainConfig path, VALUE parsed as
    YAML (`8` is an int, `true` a bool, `[a, b]` a list, anything else a string)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        where = f"--override {item}"
        if not sep or not key:
            raise InputError(f"{where}: expected KEY=VALUE with a dotted TrainConfig key, e.g. "
                             "--override model.name_or_path=/models/qwen3-8b")
        check_config_path(key, where, "key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            raise InputError(f"{where}: value is not valid YAML ({str(e).splitlines()[0]})") from None
        if key in PATH_KEYS and isinstance(value, str) and Path(value).expanduser().exists():
            value = str(Path(value).expanduser().resolve())
        keys = tuple(key.split("."))
        tree = set_path(tree, keys, value)
        prov[keys] = where
    return tree
