"""What a budget buys (score at compute C) and what a target costs (compute to reach score R).

Fits are made on the window (`--max-compute` can hold back later data to check a prediction)
and the sigmoid carries them beyond it; intervals come from the fit's parameter draws. The
variant to scale at a budget is the one with the highest predicted score there, which need not
be the one with the highest A (a fast, low-ceiling recipe can win at small budgets).
"""

from __future__ import annotations

import math

from ablate.fitgroups import GroupFit


def _num(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def extrapolate(groups: list[GroupFit], *, budget: float | None = None,
                target: float | None = None) -> list[dict]:
    """Per-variant dicts {"variant", "budget"|"target", "score"|"compute", "ci", "note",
    "recommended"}; failed fits carry "error"."""
    rows = []
    for g in groups:
        if g.fit is None:
            row = {"variant": g.variant, "ci": None, "note": g.error, "error": g.error}
            row.update({"budget": budget, "score": None} if budget is not None
                       else {"target": target, "compute": None})
            rows.append(row)
            continue
        f = g.fit
        if budget is not None:
            lo, hi = f.predict_interval(budget)
            rows.append({"variant": g.variant, "budget": budget, "score": float(f.predict(budget)),
                         "ci": [lo, hi], "note": ""})
        else:
            a_hi = f.ci.get("A", (f.A, f.A))[1]
            lo, hi = f.compute_for_interval(target)
            if target >= a_hi:
                rows.append({"variant": g.variant, "target": target, "compute": None, "ci": None,
                             "note": f"not reachable: above A's upper bound ({a_hi:.3f})"})
                continue
            c = f.compute_for(target)
            note = "" if math.isfinite(c) else (
                f"not reachable at the fitted A={f.A:.3f}; possible only if A is near its "
                f"upper bound ({a_hi:.3f})")
            rows.append({"variant": g.variant, "target": target, "compute": _num(c),
                         "ci": [_num(lo), _num(hi)], "note": note})
    _recommend(rows, budget is not None)
    return rows


def _recommend(rows: list[dict], by_budget: bool) -> None:
    """Mark the variant to scale: best score at the budget, or least compute to the target."""
    if by_budget:
        cands = [r for r in rows if r.get("score") is not None]
        best = max(cands, key=lambda r: r["score"], default=None)
    else:
        cands = [r for r in rows if r.get("compute") is not None]
        best = min(cands, key=lambda r: r["compute"], default=None)
    for r in rows:
        r["recommended"] = r is best
