"""Study -> variants: every point of the design, times seeds, each a validated TrainConfig.

A variant's id is a short hash of its resolved config (seed included), so the same run has the
same id whatever study file produced it; that is what makes re-launching idempotent (a rerun
finds the run dir by id) and lets "add one value to an axis" add only the new runs.
"""

from __future__ import annotations

from typing import Any

from ablate.adapters.study import expand_foreign
from ablate.errors import InputError
# The design's pieces live in `design` (shared with ablate.adapters.study); imported from here too.
from ablate.studies.design import (Assignment, LoadedStudy, Variant, check_size, design_points,
                                   points, run_id_of)
from ablate.adapters.builtin.provenance import Provenance, set_path, validate_config
from ablate.studies.study import base_is_a_run

__all__ = ["Variant", "check_size", "design_points", "expand", "points", "run_id_of"]
_points = points  # the name tests/test_expand.py imports


def _apply(base: dict[str, Any], prov: Provenance, assign: list[Assignment]) -> tuple[dict[str, Any], Provenance]:
    tree = base
    if assign:
        prov = dict(prov)
    for keys, value, where in assign:
        tree = set_path(tree, keys, value)
        prov[keys] = where
    return tree, prov


def expand(ls: LoadedStudy) -> list[Variant]:
    """All variants of a loaded study; identical configs collapse into the first one listed."""
    if ls.study.trainer.kind != "ablate":  # axes are another trainer's keys (ablate/adapters)
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
    for name, assign in points(ls):
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
