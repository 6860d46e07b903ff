"""The study file: which recipe to start from, what to vary, how many seeds, how long.

A study is small on purpose: `base` names a recipe (a YAML of TrainConfig values, which may
itself name a `base` to build on), `axes` maps dotted TrainConfig paths to the values to try,
and `mode` says how axes combine. Everything is checked against the trainer's TrainConfig
before anything runs, and every error names the file, the YAML line, the key path and, for a
typo, the nearest valid key (difflib) — an ablation that silently ran the default is worse
than one that did not start.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ablate.adapters.base import TrainerSpec
from ablate.errors import InputError
from ablate.studies.stagespec import StageSpec
from ablate.yamlio import KeyPath, YamlDoc, load_yaml
from trainer.config import BudgetConfig, TrainConfig

# Default run limit. Expanding validates each run's config (~0.3 ms each on a 2-core machine),
# so 10,000 runs expand in ~3 s while 3.2M would take ~16 min and gigabytes; and 10,000 full
# trainer jobs is already more than any cluster allocation runs as one ablation.
MAX_VARIANTS = 10_000

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FitSpec(_Strict):
    """Defaults for the curve engine (`ablate fit/compare` read them from the study dir)."""

    x: str = Field("gpu_hours", description="Compute column of metrics.jsonl (gpu_hours, flops...).")
    y: str = Field("eval/pass_rate", description="Score column (mean@k pass rate on held-out prompts).")
    min_compute: Optional[float] = Field(
        None, ge=0, description="Start of the fit window: skip the early, nearly linear phase."
    )
    max_compute: Optional[float] = Field(
        None, gt=0, description="End of the fit window (fit on a prefix, extrapolate beyond)."
    )


class Study(_Strict):
    """One study file. `ablate schema` prints this as JSON Schema for editors."""

    name: str = Field(
        description="Study name; results go to <results>/<name>/ (letters, digits, '_', '-', '.')."
    )
    description: str = Field("", description="Free text: the question this study answers.")
    base: Optional[str] = Field(
        None,
        description="Recipe to start from: a YAML of TrainConfig values, path relative to this "
        "file. A recipe may itself have `base:` (chained). None = the TrainConfig defaults.",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Changes to the base for every variant; nested or dotted keys "
        "(`loss: {eps_max: 8}` or `loss.eps_max: 8`).",
    )
    axes: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Dotted TrainConfig path -> values to try, e.g. `loss.aggregation: [sample, "
        "prompt, token]`.",
    )
    components: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="leave_one_out only: component name -> the dotted paths and *reverted* "
        "values that remove that component from the full recipe.",
    )
    mode: Literal["grid", "one_at_a_time", "leave_one_out", "zip"] = Field(
        "grid",
        description="grid: every combination; one_at_a_time: each axis value against the base; "
        "leave_one_out: the base plus one variant per reverted component; zip: i-th values of "
        "all axes together.",
    )
    seeds: list[int] = Field([0], min_length=1, description="One run per variant and seed.")
    budget: Optional[BudgetConfig] = Field(
        None, description="Replaces TrainConfig.budget for every run: steps, gpu_hours or flops."
    )
    fit: FitSpec = Field(default_factory=FitSpec, description="Curve-fit defaults for compare.")
    profile: Optional[str] = Field(
        None,
        description="Launch profile: a name in sweeps/ (e.g. `slurm`) or a YAML path relative "
        "to this file; `--profile` on the command line wins.",
    )
    stages: Optional[StageSpec] = Field(
        None, description="Adaptive study: intermediate budgets after which variants are "
        "fitted and those that cannot win stop; survivors continue to `budget` (needs `budget`).",
    )
    max_attempts: int = Field(
        3, ge=1, description="A failed run is resubmitted by a later `ablate sweep` until it "
        "has been submitted this many times."
    )
    trainer: TrainerSpec = Field(
        default_factory=TrainerSpec, description="Which trainer runs the variants: the built-in "
        "one (kind ablate), or TRL, verl or any command, whose own keys the axes then are "
        "(README: Bring your own trainer).")
    max_variants: int = Field(
        MAX_VARIANTS, ge=1, description="Refuse a study that expands to more runs than this "
        "(variants x seeds), counted before expanding: a grid of 5 axes x 20 values is 3.2M "
        "runs, almost always a typo. Raise it if you mean it."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not _NAME_RE.match(v) or ".." in v:
            raise ValueError(
                f"'{v}' is not a plain folder name: use letters, digits, '_', '-', '.' (it becomes "
                "<results>/<name>/ and must not escape it)"
            )
        return v

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        dup = sorted({s for s in v if v.count(s) > 1})
        if dup:
            raise ValueError(f"seed(s) {dup} listed twice; each seed once")
        return v


# ---------------------------------------------------------------------------------------------
# TrainConfig paths: what dotted keys exist, and suggestions for the ones that do not.


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (unwrapping Optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        m = _model_of(arg)
        if m is not None:
            return m
    return None


def fields_at(model: type[BaseModel], keys: KeyPath) -> list[str] | None:
    """Field names of the (nested) model at `keys`, or None if `keys` is not a model."""
    for k in keys:
        f = model.model_fields.get(k)
        sub = _model_of(f.annotation) if f is not None else None
        if sub is None:
            return None
        model = sub
    return list(model.model_fields)


def leaf_paths(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted path to a non-model field (what axes may vary)."""
    out: list[str] = []
    for name, f in model.model_fields.items():
        sub = _model_of(f.annotation)
        if sub is not None:
            out.extend(leaf_paths(sub, f"{prefix}{name}."))
        else:
            out.append(prefix + name)
    return out


def suggest(word: str, options: list[str]) -> str:
    """`(did you mean 'x'?)` or a short list of valid options."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"(did you mean '{close[0]}'?)"
    shown = ", ".join(options[:12]) + (", ..." if len(options) > 12 else "")
    return f"(valid: {shown})"


def check_config_path(dotted: str, where: str, what: str) -> None:
    """Refuse a dotted path that is not a TrainConfig field, suggesting the nearest one."""
    keys = tuple(dotted.split("."))
    for i, k in enumerate(keys):
        names = fields_at(TrainConfig, keys[:i])
        if names is None:  # descended into a leaf (e.g. a list): the rest is not addressable
            raise InputError(
                f"{where}: {what} '{dotted}': '{'.'.join(keys[:i])}' is a value, not a section"
            )
        if k not in names:
            full = [p for p in leaf_paths() if p.count(".") == len(keys) - 1] or leaf_paths()
            hint = suggest(dotted, full) if "(did" in suggest(dotted, full) else suggest(k, names)
            raise InputError(f"{where}: {what} '{dotted}' is not a TrainConfig path {hint}")


# ---------------------------------------------------------------------------------------------
# Nested dicts with provenance: which file and line set each value.

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


def format_validation_error(
    err: ValidationError, where: Callable[[KeyPath], str], model: type[BaseModel], prefix: str = ""
) -> str:
    """One line for the first pydantic error: location, key path, problem, valid options."""
    e = err.errors(include_url=False)[0]
    loc = tuple(str(x) for x in e["loc"])
    dotted = prefix + ".".join(loc)
    if e["type"] == "extra_forbidden":
        names = fields_at(model, loc[:-1]) or []
        return f"{where(loc)}: unknown key '{dotted}' {suggest(loc[-1], names)}"
    if e["type"] == "missing":
        return f"{where(loc)}: missing required key '{dotted}'"
    got = e.get("input")
    got_s = repr(got)
    if len(got_s) > 60:
        got_s = got_s[:57] + "..."
    msg = e["msg"].removeprefix("Value error, ")
    return f"{where(loc)}: {dotted or '<root>'}: {msg} (got {got_s})"


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


# ---------------------------------------------------------------------------------------------
# Loading: study file + chained base recipes.


@dataclass
class LoadedStudy:
    """A validated study plus the resolved base config (nested dict) it expands from."""

    study: Study
    doc: YamlDoc
    base_tree: dict[str, Any]
    prov: Provenance = field(default_factory=dict)
    recipes: list[Path] = field(default_factory=list)
    cli_overrides: list[str] = field(default_factory=list)  # `sweep --override KEY=VALUE`, as given

    @property
    def path(self) -> Path:
        return self.doc.path


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
        ppath = path.parent / parent
        if not ppath.exists():
            raise InputError(f"{doc.where(('base',))}: base recipe '{parent}' not found (looked for {ppath})")
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
        bpath = doc.path.parent / base
        if not bpath.exists():
            raise InputError(f"{doc.where(('base',))}: base recipe '{base}' not found (looked for {bpath})")
        tree, prov, recipes = load_recipe(bpath, (doc.path.resolve(),))
    tree = merge_layer(tree, prov, overrides, doc, ("overrides",), "overrides")
    if budget is not None:
        tree = set_path(tree, ("budget",), budget.model_dump(exclude_none=True))
        prov[("budget",)] = doc.where(("budget",))
    return tree, prov, recipes


M = TypeVar("M", bound=BaseModel)


def load_model(path: Path, model: type[M], what: str) -> tuple[M, YamlDoc]:
    """Strict-load a YAML file and validate it as `model`; errors name file, line and key."""
    return validate_model(load_yaml(path), model, what)


def validate_model(doc: YamlDoc, model: type[M], what: str) -> tuple[M, YamlDoc]:
    """`load_model` on an already parsed file."""
    path = doc.path
    if not isinstance(doc.data, dict):
        raise InputError(f"{path}:1: {what}")
    try:
        return model.model_validate(doc.data), doc
    except ValidationError as err:
        raise InputError(format_validation_error(err, doc.where, model)) from None


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
        from ablate.adapters.study import load_foreign

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
    from ablate.studies.study_overrides import apply_study_overrides, split_study_overrides

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


def study_json_schema() -> dict[str, Any]:
    """JSON Schema of the study file, with axis/override keys enumerated for completion."""
    schema = Study.model_json_schema()
    paths = sorted(leaf_paths())
    props = schema["properties"]
    props["axes"]["propertyNames"] = {"enum": paths}
    props["overrides"]["description"] += " Valid dotted keys: see axes.propertyNames."
    return schema
