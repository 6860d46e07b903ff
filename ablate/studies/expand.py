"""Study -> variants: every point of the design, times seeds, each a config its trainer's adapter
validated (the built-in trainer's: a TrainConfig; another trainer's: its own keys).

A variant's id is a short hash of its resolved config (seed included), so the same run has the
same id whatever study file produced it; that is what makes re-launching idempotent (a rerun
finds the run dir by id) and lets "add one value to an axis" add only the new runs.
"""

from __future__ import annotations

from ablate.adapters import adapter_for
from ablate.adapters.builtin import run_id_of  # the built-in trainer's ids (tune, tests)
from ablate.errors import InputError
# The design's pieces live in `design`; imported from here too.
from ablate.studies.design import LoadedStudy, Variant, check_size, design_points, points

__all__ = ["Variant", "check_size", "design_points", "expand", "points", "run_id_of"]
_points = points  # the name tests/test_expand.py imports


def expand(ls: LoadedStudy) -> list[Variant]:
    """All variants of a loaded study; identical configs collapse into the first one listed.
    The adapter checks what it can before any run is built (a bad axis value at its own
    line), then builds each design point's config per seed."""
    check_size(ls)
    adapter = adapter_for(ls.study.trainer)
    adapter.check_values(ls)
    out: list[Variant] = []
    seen: set[str] = set()
    for name, assign in points(ls):
        for seed, cfg in adapter.point_runs(ls, assign):
            rid = adapter.run_id(cfg)
            if rid in seen:  # identical to an earlier point (e.g. a value equal to the base)
                continue
            seen.add(rid)
            out.append(Variant(run_id=rid, name=name, seed=seed, config=cfg))
    if not out:
        raise InputError(f"{ls.path}: the study expands to no runs")
    return out
