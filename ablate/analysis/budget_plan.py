"""`ablate plan`: given fitted variants and a compute budget, what to scale and what to expect.

For a budget C (compute of the run to make, in the fit's x units) each variant's score at C is
predicted from its fit's parameter draws. The recommendation is the variant with the least
expected regret, E[max_v S_v(C) - S_chosen(C)] over the draws (variants' fits are independent,
so the i-th draws of all variants form one joint draw); that is also the one with the highest
expected score. Each row also says how likely the variant is to be the best at C, and how far
it is worth scaling: the compute at which its predicted curve is within `tol` of its score at C
(beyond it the budget buys less than `tol`), and the compute that adds to what its runs used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ablate.analysis.fit import predictive_draws, sigmoid
from ablate.analysis.variant_fits import GroupFit
from ablate.number_text import compute, estimate, interval, number


@dataclass
class PlanRow:
    variant: str
    score: Optional[float]  # predicted at the budget
    ci: Optional[list[float]]
    p_best: Optional[float]
    expected_regret: Optional[float]  # if this variant is the one scaled
    scale_to: Optional[float]  # compute worth spending (<= budget)
    score_at_scale_to: Optional[float]
    observed: Optional[float]  # largest compute its runs reached
    extra_compute: Optional[float]  # scale_to - observed (>= 0)
    A: Optional[float]
    A_ci: Optional[list[float]]
    recommended: bool = False
    error: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _draws(fit, n: int) -> np.ndarray:
    """[4, n] parameter draws (A, B, C_mid, R0); the point fit repeated when it has none."""
    s = fit.samples
    if not s:
        return np.array([[fit.A], [fit.B], [fit.C_mid], [fit.R0]]).repeat(n, axis=1)
    return np.stack([np.asarray(s[k], float)[:n] for k in ("A", "B", "C_mid", "R0")])


def plan(groups: list[GroupFit], budget: float, *, tol: float = 0.005) -> dict[str, Any]:
    """{"budget", "tol", "recommended", "expected_regret", "rows": [PlanRow...]} (rows by
    expected regret, failed fits last)."""
    ok = [g for g in groups if g.fit is not None]
    rows: list[PlanRow] = []
    if ok:
        n = min(len(g.fit.samples.get("A", [0])) if g.fit.samples else 10**9 for g in ok)
        n = n if n < 10**9 else 1
        # The same draws as each variant's interval: parameters, drift, plateau.
        S = np.stack([np.asarray(predictive_draws(g.fit, budget), float)[:n] if g.fit.samples
                      else sigmoid(budget, *_draws(g.fit, n)) for g in ok])  # [variants, draws]
        S = np.where(np.isfinite(S), S, np.nan)
        best = np.nanmax(S, axis=0)
        regret = np.nanmean(best[None, :] - S, axis=1)
        winners = np.nanargmax(np.where(np.isnan(S), -np.inf, S), axis=0)
        for i, g in enumerate(ok):
            f = g.fit
            score = float(f.predict(budget))
            lo, hi = f.predict_interval(budget)
            target = score - tol
            c_tol = f.compute_for(target) if target > f.R0 else 0.0
            scale_to = float(min(budget, c_tol)) if math.isfinite(c_tol) else float(budget)
            observed = float(np.max(f.data[0])) if f.data is not None else None
            rows.append(PlanRow(
                g.variant, score, [float(lo), float(hi)], float(np.mean(winners == i)),
                float(regret[i]), scale_to, float(f.predict(scale_to)), observed,
                None if observed is None else max(0.0, scale_to - observed),
                f.A, list(f.ci.get("A", (f.A, f.A)))))
        rows.sort(key=lambda r: r.expected_regret)
        rows[0].recommended = True
    for g in groups:
        if g.fit is None:
            rows.append(PlanRow(g.variant, *([None] * 10), error=g.error))
    rec = rows[0] if rows and rows[0].recommended else None
    return {"budget": budget, "tol": tol, "recommended": rec.variant if rec else None,
            "expected_regret": rec.expected_regret if rec else None,
            "rows": [r.to_json() for r in rows]}


def plan_answer(result: dict[str, Any], *, x: str) -> str:
    """The plan in one sentence: what to scale, how far, what it should reach (and the
    interval's kind), or why nothing can be recommended."""
    from ablate.analysis.answer import names_for  # the table's short labels, axis named once

    rec = next((r for r in result["rows"] if r["recommended"]), None)
    if rec is None:
        return "No variant could be fit, so nothing can be recommended."
    name = names_for([r["variant"] for r in result["rows"]])
    lo, hi = rec["ci"]
    extra = "" if rec["extra_compute"] is None else \
        f", {compute(rec['extra_compute'])} more than its runs used"
    return (f"Scale {name.prefix}{name(rec['variant'])} (P(best) {rec['p_best']:.2f}, expected regret "
            f"{rec['expected_regret']:.4f}): to {compute(rec['scale_to'])} {x}{extra}; predicted "
            f"{number(rec['score'], rec['ci'])} at the budget {compute(result['budget'])} "
            f"(95% predictive {interval(lo, hi)}).")


def plot_plan(groups: list[GroupFit], result: dict[str, Any], path: str | Path, *,
              x: str = "compute", y: str = "score") -> Path:
    """Predicted curves to the budget with 95% bands; the recommended variant bold, with a
    marker where scaling it stops paying (within tol of its score at the budget)."""
    import matplotlib  # local: heavy (~0.5 s), needed only when a picture is drawn

    matplotlib.use("Agg")  # before pyplot: no display on compute nodes
    import matplotlib.pyplot as plt

    budget = result["budget"]
    rows = {r["variant"]: r for r in result["rows"]}
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, g in enumerate(x for x in groups if x.fit is not None):
        f, r, col = g.fit, rows[g.variant], colors[i % len(colors)]
        c0 = float(np.min(f.data[0][f.data[0] > 0])) if f.data is not None else budget / 1e3
        xs = np.geomspace(c0, budget, 200)
        rec = r["recommended"]
        ax.plot(xs, f.predict(xs), color=col, lw=2.6 if rec else 1.3,
                label=f"{g.variant}: {estimate(r['score'], r['ci'])}, "
                f"P(best) {r['p_best']:.2f}" + (" (scale this)" if rec else ""))
        if f.samples:
            ax.fill_between(xs, *f.prediction_band(xs), color=col, alpha=0.12, lw=0)
        if f.data is not None:
            ax.scatter(f.data[0][f.data[0] > 0], f.data[1][f.data[0] > 0], s=6, color=col, alpha=0.5)
        if rec:
            ax.scatter([r["scale_to"]], [r["score_at_scale_to"]], marker="*", s=160, color=col,
                       zorder=5)
    ax.axvline(budget, color="k", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"plan at budget {compute(budget)}: scale {result['recommended']} "
                 f"(expected regret {result['expected_regret']:.4f})", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
