"""What a budget buys (score at compute C) and what a target costs (compute to reach score R).

Fits are made on the window (`--max-compute` can hold back later data to check a prediction)
and the sigmoid carries them beyond it; intervals come from the fit's parameter draws. The
variant to scale at a budget is the one with the highest predicted score there, which need not
be the one `compare` ranks first (a fast, low-ceiling recipe can win at small budgets; a variant
ranked first by B at a shared A can rise later). Every row carries compare's rank, and where the
recommendation and the rank disagree both rows say why (ablate.analysis.rank_reversals), as compare does.
"""

from __future__ import annotations

import math

from ablate.analysis import rank_reversals
from ablate.analysis.compare import rank_order
from ablate.analysis import A_MARGIN
from ablate.analysis.variant_fits import GroupFit
from ablate.number_text import compute, interval, number


def _num(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _a(f, v: float) -> str:
    """A value on A's scale at A's interval's precision."""
    return number(v, f.ci.get("A"))


def _fit_info(g: GroupFit) -> dict:
    """The window, skipped points, method and warnings of the fit behind a row."""
    d = g.as_dict()
    return {k: d.get(k) for k in ("window", "window_rule", "skipped", "method", "warnings",
                                  "verdict", "verdict_reason")}


def extrapolate(groups: list[GroupFit], *, budget: float | None = None,
                target: float | None = None, margin: float = A_MARGIN) -> list[dict]:
    """Per-variant dicts {"variant", "budget"|"target", "score"|"compute", "ci", "note",
    "recommended", "rank", "window", "skipped", "method", "warnings"}; failed fits carry "error"."""
    order, _ = rank_order(groups, margin)
    rank = {g.variant: i for i, g in enumerate(order, 1)}
    rows = []
    for g in groups:
        info = {"rank": rank.get(g.variant), **_fit_info(g)}
        if g.fit is None:
            row = {"variant": g.variant, "ci": None, "note": g.error, "error": g.error, **info}
            row.update({"budget": budget, "score": None} if budget is not None
                       else {"target": target, "compute": None})
            rows.append(row)
            continue
        f = g.fit
        if budget is not None:
            lo, hi = f.predict_interval(budget)
            rows.append({"variant": g.variant, "budget": budget, "score": float(f.predict(budget)),
                         "ci": [lo, hi], "note": "", **info})
        else:
            a_hi = f.ci.get("A", (f.A, f.A))[1]
            lo, hi = f.compute_for_interval(target)
            if target >= a_hi:
                rows.append({"variant": g.variant, "target": target, "compute": None, "ci": None,
                             "note": f"not reachable: above A's upper bound ({_a(f, a_hi)})", **info})
                continue
            c = f.compute_for(target)
            note = "" if math.isfinite(c) else (
                f"not reachable at the fitted A={_a(f, f.A)}; possible only if A is near its "
                f"upper bound ({_a(f, a_hi)})")
            rows.append({"variant": g.variant, "target": target, "compute": _num(c),
                         "ci": [_num(lo), _num(hi)], "note": note, **info})
    _recommend(rows, budget is not None)
    _explain(rows, order, groups, budget)
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


def _explain(rows: list[dict], order: list[GroupFit], groups: list[GroupFit],
             budget: float | None) -> None:
    """Where the recommendation is not compare's first-ranked variant, say so in both rows."""
    best = next((r for r in rows if r["recommended"]), None)
    if best is None or not order or best["rank"] == 1:
        return
    top = order[0]
    rec = next(g for g in groups if g.variant == best["variant"])
    c_max = rank_reversals.largest_compute(groups)
    at = budget if budget is not None else best["compute"]
    what = "at this budget" if budget is not None else "to reach this target"
    why = rank_reversals.why_reversed(top, rec, at, c_max)
    text = (f"compare ranks {top.variant} first and {rec.variant} #{best['rank']}; "
            f"{rec.variant} is better {what}: {why}")
    for r in rows:
        if r["variant"] in (top.variant, rec.variant):
            r["note"] = "; ".join(x for x in (r["note"], text) if x)


def extrapolate_answer(rows: list[dict], *, x: str, y: str, budget: float | None,
                       target: float | None) -> str:
    """One sentence over the rows: the recommended variant and its prediction with the
    interval's kind, or why there is none."""
    from ablate.analysis.answer import names_for  # the table's short labels, axis named once

    name = names_for([r["variant"] for r in rows])
    best = next((r for r in rows if r.get("recommended")), None)
    if best is None:
        if budget is None:
            return (f"No variant is predicted to reach {y}={target:g} (see each row's note).")
        return "No variant could be fit, so nothing is predicted."
    lo, hi = best["ci"]
    who = f"{name.prefix}{name(best['variant'])}"
    if budget is not None:
        said = (f"{who} is predicted highest at {x}={compute(budget)}: "
                f"{number(best['score'], best['ci'])} (95% predictive {interval(lo, hi)})")
    else:  # the compute's interval is the fitted curve's, not a run's (ranking_text.TARGET_INTERVAL)
        said = (f"{who} is predicted to reach {y}={target:g} first: at {x} "
                f"{number(best['compute'], best['ci'])} (95% interval of the fit "
                f"{interval(lo, hi)})")
    rank = best.get("rank")
    if rank is not None and rank != 1:
        said += f"; compare ranks it #{rank} (see its note)"
    if best.get("verdict") not in (None, "ok"):
        said += f"; its fit's verdict: {best['verdict']}"
    return said + "."
