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
                                  "verdict", "verdict_reason", "fell")}


def extrapolate(groups: list[GroupFit], *, budget: float | None = None,
                target: float | None = None, margin: float = A_MARGIN, frame=None) -> list[dict]:
    """Per-variant dicts {"variant", "budget"|"target", "score"|"compute", "ci", "note",
    "recommended", "rank", "window", "skipped", "method", "warnings"}; failed fits carry "error".

    With `target` and the curves' `frame` (ablate.analysis.sources.Curves.frame): a variant
    whose runs already reached the target (a mean of sag.W evaluations) is answered by the
    data: its row's compute is where a run first reached it (`reached`, `ci` null), never "not
    reachable", and a run that fell after it is named (a sigmoid cannot fall, so a fit on a
    run that peaked and fell may put the target above its A)."""
    order, _ = rank_order(groups, margin)
    rank = {g.variant: i for i, g in enumerate(order, 1)}
    got = _reached(frame, target) if target is not None and frame is not None else {}
    rows = []
    for g in groups:
        info = {"rank": rank.get(g.variant), **_fit_info(g)}
        if g.variant in got:
            rows.append(_observed_row(g, target, got[g.variant], info))
            continue
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
            rows.append({"variant": g.variant, "target": target, **_predicted(f, target),
                         "reached": None, **info})
    _recommend(rows, budget is not None)
    _explain(rows, order, groups, budget)
    return rows


def _predicted(f, target: float) -> dict:
    """The fit's compute to reach `target`: {"compute", "ci", "note"}."""
    a_hi = f.ci.get("A", (f.A, f.A))[1]
    if target >= a_hi:
        return {"compute": None, "ci": None,
                "note": f"not reachable: above A's upper bound ({_a(f, a_hi)})"}
    lo, hi = f.compute_for_interval(target)
    c = f.compute_for(target)
    note = "" if math.isfinite(c) else (
        f"not reachable at the fitted A={_a(f, f.A)}; possible only if A is near its "
        f"upper bound ({_a(f, a_hi)})")
    return {"compute": _num(c), "ci": [_num(lo), _num(hi)], "note": note}


def _reached(frame, target: float) -> dict[str, tuple[int, float, float]]:
    """{variant: (seed, compute, mean)}: the run of each variant that reached `target` first."""
    from ablate.analysis.sag import reached, runs_of

    out: dict[str, tuple[int, float, float]] = {}
    for (v, seed), c, y in runs_of(frame):
        hit = reached(c, y, target)
        if hit is not None and (v not in out or hit[0] < out[v][1]):
            out[v] = (seed, *hit)
    return out


def _observed_row(g: GroupFit, target: float, hit: tuple[int, float, float], info: dict) -> dict:
    """A variant whose data reached the target: where, whether it then fell, what the fit says."""
    from ablate.analysis.sag import W

    seed, at, mean = hit
    parts = [f"reached (observed): seed {seed}'s mean of {W} evaluations {mean:.3f} at compute "
             f"{compute(at)}"]
    if g.falls:  # the verdict's reason, before this note, says by how much
        parts.append("then " + ", ".join(f"seed {s}" for s, _ in g.falls) + " fell from its peak")
    if g.fit is not None:
        pred = _predicted(g.fit, target)
        if pred["compute"] is None:
            parts.append(f"the fit alone would say {pred['note']}")
    elif g.error:
        parts.append(g.error)
    return {"variant": g.variant, "target": target, "compute": at, "ci": None,
            "note": "; ".join(parts), "reached": {"seed": seed, "compute": at, "mean": mean},
            **({"error": g.error} if g.fit is None else {}), **info}


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
    who = f"{name.prefix}{name(best['variant'])}"
    if best.get("reached"):  # the data answered: no fit's interval to give
        said = (f"{who} reached {y}={target:g} first: at {x} {compute(best['compute'])} "
                f"(observed, seed {best['reached']['seed']})")
        if best.get("rank") not in (None, 1):
            said += f"; compare ranks it #{best['rank']} (see its note)"
        fell = [name(r["variant"]) for r in rows if r.get("reached") and r.get("fell")]
        if fell:
            said += f"; {', '.join(fell)} then fell from its peak (see its note)"
        return said + "."
    lo, hi = best["ci"]
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
