"""One coherent answer: the paper's ranking next to what each variant is predicted to reach.

`compare` ranks by the asymptote A (and, within the +-0.02 margin, by B refit at the shared A:
the paper's rule). `extrapolate` recommends the variant with the best predicted score at a
budget. The two can disagree, and then both must say so and why: B measures how steeply a curve
rises in log-compute, not *where* (that is C_mid), so a variant ranked first by B at a shared A
can be predicted last at every compute in the data when its C_mid is several times larger; and
a higher ceiling pays off only beyond the compute where the curves cross. This module finds
those disagreements and words them the same way for both commands.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from ablate.analysis.fit import Fit
from ablate.analysis.variant_fits import GroupFit

# Predicted scores closer than this are a tie for the purpose of calling an ordering reversed:
# half a point of pass rate is below what one evaluation of ~1,000 prompts resolves.
TIE = 0.005
_HORIZON = 1e3  # look for a crossover up to this many times the largest compute


def predicted(fit: Fit, compute: float) -> dict:
    """{"compute", "score", "ci"} of a fit at `compute` (JSON-ready)."""
    lo, hi = fit.predict_interval(compute)
    return {"compute": float(compute), "score": float(fit.predict(compute)), "ci": [lo, hi]}


def crossover(upper: Fit, lower: Fit, c_from: float, c_to: float) -> float | None:
    """Smallest compute in [c_from, c_to] where `upper` (ranked higher, predicted lower at
    c_from) catches up with `lower`; None if it does not within the range."""
    grid = np.geomspace(c_from, c_to, 256)
    d = np.asarray(upper.predict(grid)) - np.asarray(lower.predict(grid))
    ahead = np.flatnonzero(d >= 0)
    if ahead.size == 0:
        return None
    i = int(ahead[0])
    if i == 0:
        return float(grid[0])
    return float(brentq(lambda c: upper.predict(c) - lower.predict(c), grid[i - 1], grid[i]))


def why_reversed(hi: GroupFit, lo: GroupFit, compute: float, c_max: float) -> str:
    """Why `hi` (ranked above) is predicted below `lo` at `compute`, and where that flips."""
    a, b = hi.fit, lo.fit
    reasons = []
    if b.C_mid < a.C_mid:
        reasons.append(f"{lo.variant} rises earlier (C_mid {b.C_mid:.3g} vs {a.C_mid:.3g}, "
                       f"{a.C_mid / b.C_mid:.1f}x smaller)")
    if a.A > b.A:
        reasons.append(f"{hi.variant}'s higher ceiling (A {a.A:.3f} vs {b.A:.3f}) pays off only "
                       "at larger compute")
    else:
        reasons.append("the paper's rule ranked them by B at a shared A, and B measures how "
                       "steeply a curve rises, not where")
    cross = crossover(a, b, compute, c_max * _HORIZON)
    where = (f"{hi.variant} is predicted to overtake {lo.variant} at compute ~{cross:.3g}"
             if cross is not None else
             f"{hi.variant} is not predicted to overtake it within {_HORIZON:g}x the data's compute")
    return "; ".join(reasons) + "; " + where


def reversals(ranked: list[GroupFit], compute: float, c_max: float, label: str) -> dict[str, str]:
    """Per variant, a note for each higher-ranked variant it is predicted to beat at `compute`.

    `ranked` is in rank order (fitted variants only); `label` names the compute in the note
    ("the largest compute observed", "the budget")."""
    notes: dict[str, list[str]] = {}
    score = {g.variant: float(g.fit.predict(compute)) for g in ranked}
    for i, hi in enumerate(ranked):
        for lo in ranked[i + 1:]:
            if score[lo.variant] > score[hi.variant] + TIE:
                notes.setdefault(lo.variant, []).append(
                    f"ranks below {hi.variant} but is predicted higher at {label} "
                    f"({compute:.3g}: {score[lo.variant]:.3f} vs {score[hi.variant]:.3f}): "
                    + why_reversed(hi, lo, compute, c_max))
    return {v: " | ".join(n) for v, n in notes.items()}


def largest_compute(groups: list[GroupFit]) -> float:
    """The largest compute observed in any fitted variant's data (the common yardstick)."""
    cs = [float(np.max(g.fit.data[0])) for g in groups if g.fit is not None and g.fit.data]
    return max(cs) if cs else math.nan
