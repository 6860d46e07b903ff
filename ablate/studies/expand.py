"""Study -> variants: every point of the design, times seeds, each a validated TrainConfig.

A variant's id is a short hash of its resolved config (seed included), so the same run has the
same id whatever study file produced it; that is what makes re-launching idempotent (a rerun
finds the run dir by id) and lets "add one value to an axis" add only the new runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Iterator

from ablate.errors import InputError
from ablate.studies.provenance import Provenance, set_path, validate_config
from ablate.studies.schema import Study
from ablate.studies.study import LoadedStudy, base_is_a_run
from trainer.config import TrainConfig

Assignment = tuple[tuple[str, ...], Any, str]  # (config keys, value, where it was written)


@dataclass(frozen=True)
class Variant:
    """One run: a readable name (shared by its seeds), a seed, the full config, and its id."""

    run_id: str
    name: str
    seed: int
    config: TrainConfig

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "seed": self.seed,
            "config": self.config.model_dump(mode="json"),
        }


def fmt_value(v: Any) -> str:
    """Short, stable text for a value in a variant name (`loss.eps_max=8`, `...=true`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


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
    blob = json.dumps(config_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _points(ls: LoadedStudy) -> Iterator[tuple[str, list[Assignment]]]:
    """(name, assignments) for each design point, in the order the study lists them."""
    s, doc = ls.study, ls.doc
    axes = [
        [(tuple(path.split(".")), v, doc.where(("axes", path, str(i)))) for i, v in enumerate(vals)]
        for path, vals in s.axes.items()
    ]

    def name(assign: list[Assignment]) -> str:
        return ",".join(f"{'.'.join(k)}={fmt_value(v)}" for k, v, _ in assign) or "base"

    if s.mode == "grid":
        varied = [len(a) > 1 for a in axes]
        for combo in itertools.product(*axes):
            shown = [a for a, show in zip(combo, varied) if show] or list(combo)
            yield name(shown), list(combo)
    elif s.mode == "one_at_a_time":
        yield "base", []
        for axis in axes:
            for a in axis:
                yield name([a]), [a]
    elif s.mode == "zip":
        for combo in zip(*axes):
            yield name(list(combo)), list(combo)
    elif s.mode == "leave_one_out":
        yield "base", []
        for comp, reverted in s.components.items():
            assign = [
                (tuple(path.split(".")), v, doc.where(("components", comp, path)))
                for path, v in reverted.items()
            ]
            yield f"revert={comp}", assign


def _apply(base: dict[str, Any], prov: Provenance, assign: list[Assignment]) -> tuple[dict[str, Any], Provenance]:
    tree = base
    if assign:
        prov = dict(prov)
    for keys, value, where in assign:
        tree = set_path(tree, keys, value)
        prov[keys] = where
    return tree, prov


def design_points(s: Study) -> int:
    """How many design points `_points` yields, from the axis lengths alone (never expanding).
    Stages add none: each stage continues the same runs to a larger budget."""
    lengths = [len(v) for v in s.axes.values()]
    if s.mode == "grid":
        return math.prod(lengths)  # no axes: 1, the base
    if s.mode == "one_at_a_time":
        return 1 + sum(lengths)
    if s.mode == "zip":
        return min(lengths, default=1)  # load_study checked the lengths are equal
    return 1 + len(s.components)  # leave_one_out


def check_size(ls: LoadedStudy) -> None:
    """Refuse a study above its `max_variants` before building a single config: a grid of
    5 axes x 20 values (3.2M runs) would otherwise hang `sweep --dry-run` for many minutes."""
    s = ls.study
    runs = design_points(s) * len(s.seeds)
    if runs <= s.max_variants:
        return
    axes = " x ".join(f"{p} ({len(v)})" for p, v in s.axes.items()) or f"{len(s.components)} components"
    raise InputError(
        f"{ls.doc.where(('axes',))}: the study expands to {runs:,} runs ({s.mode}: {axes}; "
        f"{len(s.seeds)} seed(s)), above max_variants {s.max_variants:,}; drop values, use mode "
        "one_at_a_time, or set `max_variants:` in the study if you mean it")


def expand(ls: LoadedStudy) -> list[Variant]:
    """All variants of a loaded study; identical configs collapse into the first one listed."""
    if ls.study.trainer.kind != "ablate":  # axes are another trainer's keys (ablate/adapters)
        from ablate.adapters.study import expand_foreign

        return expand_foreign(ls)
    check_size(ls)
    s = ls.study
    # Where a value alone against the base is a run, check each first, so an invalid value is
    # reported at its own line before any combination. In a grid or zip only combinations run
    # (and `validate_config` still names the line that set the bad value).
    for path, vals in s.axes.items() if base_is_a_run(s) else ():
        for i, v in enumerate(vals):
            keys = tuple(path.split("."))
            tree, prov = _apply(ls.base_tree, ls.prov, [(keys, v, ls.doc.where(("axes", path, str(i))))])
            validate_config(tree, prov, str(ls.path))

    out: list[Variant] = []
    seen: dict[str, str] = {}
    for name, assign in _points(ls):
        tree, prov = _apply(ls.base_tree, ls.prov, assign)
        for seed in s.seeds:
            seeded = set_path(tree, ("seed",), seed)
            cfg = validate_config(seeded, prov, str(ls.path))
            dumped = cfg.model_dump(mode="json")
            rid = run_id_of(dumped)
            if rid in seen:  # identical to an earlier point (e.g. a value equal to the base)
                continue
            seen[rid] = name
            out.append(Variant(run_id=rid, name=name, seed=seed, config=cfg))
    if not out:
        raise InputError(f"{ls.path}: the study expands to no runs")
    return out
