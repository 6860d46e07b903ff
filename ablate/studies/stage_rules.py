"""Which variants an adaptive study stops after a stage (pure: fits in, stops out).

After each stage every variant is fitted (its seeds pooled, one window for all) and stops when

  * interval rule: its A's 95% upper bound is below another variant's A lower bound (it cannot
    be the best however the uncertainty falls), or
  * margin rule (only with `stages.baseline`): its fitted A is below the baseline's by more than
    `stages.margin` (the paper's rule for "worse than the base"), or
  * collapse rule: its fit is refused and its score fell with training (the mean of its last 3
    evaluations, seeds averaged, is COLLAPSE_DROP below its best 3-evaluation mean) to below
    the best variant's A lower bound. Unstable recipes do this, the paper's reason to drop
    them: on the proxy an LR 40x the recipe's falls from 0.49 to 0.03, and sampling at
    temperature 0.2 rises to 0.72 and sinks back to 0.5 (benchmarks/RESULTS.md). Their fits
    are refused ("flat or decreasing"), so no rule on A could ever stop them.

  * departed rule (opt in: `stages.stop_departed`): every run of the variant that has a frozen
    forecast has departed from it (ablate.analysis.watch: k evaluations in a row below the band),
    e.g. a late collapse whose fit still stands because the rise dominates the window.

Any other variant whose fit fails (too few points, not yet rising) is kept: nothing is stopped
on a curve we cannot read. The controller that applies these is ablate.studies.adaptive.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ablate.number_text import count
from ablate.analysis import A_MARGIN

if TYPE_CHECKING:
    import pandas as pd

    from ablate.analysis.variant_fits import GroupFit

# How far a refused fit's score must fall from its best before the collapse rule stops it: well
# beyond eval noise (+-0.02 on the proxy's 256-problem pool), so a flat, noisy curve that has
# not started rising is never taken for a collapse.
COLLAPSE_DROP = 0.05


@dataclass
class Decision:
    stage: int
    budget: dict[str, float]
    kept: list[str]
    stopped: dict[str, str]  # variant -> reason
    fits: dict[str, dict[str, Any]]  # variant -> {"A", "A_ci"} or {"error"}

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "budget": self.budget, "kept": self.kept,
                "stopped": self.stopped, "fits": self.fits, "at": time.time()}


def decide(groups: list[GroupFit], *, margin: float = A_MARGIN, baseline: str | None = None,
           stage: int = 0, budget: dict[str, float] | None = None,
           dead: dict[str, str] | None = None,
           levels: dict[str, tuple[float, float]] | None = None,
           departed: dict[str, str] | None = None) -> Decision:
    """Which variants stop after a stage. `dead` maps variants whose runs all ended without a
    curve to continue (diverged / failed for good) to why; they stop too. `levels` maps a
    variant to its observed (best, recent) score (`score_levels`), for the collapse rule."""
    dead = dict(dead or {})
    ok = [g for g in groups if g.fit is not None and g.variant not in dead]
    ci = {g.variant: g.fit.ci.get("A", (g.fit.A, g.fit.A)) for g in ok}
    stopped: dict[str, str] = {v: why for v, why in dead.items()}
    fits: dict[str, dict[str, Any]] = {}
    for g in groups:
        fits[g.variant] = ({"A": g.fit.A, "A_ci": list(ci.get(g.variant, (g.fit.A, g.fit.A)))}
                           if g.fit is not None else {"error": g.error})
    if ok:
        top = max(ok, key=lambda g: (ci[g.variant][0], g.fit.A))
        top_lo = ci[top.variant][0]
        base = next((g for g in ok if g.variant == baseline), None)
        for g in ok:
            hi = ci[g.variant][1]
            if g is not top and hi < top_lo:
                stopped[g.variant] = (f"stage {stage}: A upper bound {hi:.3f} < {top.variant}'s "
                                      f"A lower bound {top_lo:.3f}")
            elif base is not None and g is not base and g.fit.A < base.fit.A - margin:
                stopped[g.variant] = (f"stage {stage}: A {g.fit.A:.3f} below baseline "
                                      f"{base.variant}'s {base.fit.A:.3f} by more than {margin:g}")
        for g in groups:
            lv = (levels or {}).get(g.variant)
            if g.fit is None and g.variant not in stopped and lv and collapsed(lv, top_lo):
                stopped[g.variant] = (f"stage {stage}: score fell from {lv[0]:.3f} to {lv[1]:.3f} "
                                      f"(collapsed), below {top.variant}'s A lower bound "
                                      f"{top_lo:.3f}")
    for v, why in (departed or {}).items():
        stopped.setdefault(v, f"stage {stage}: {why}")
    kept = [g.variant for g in groups if g.variant not in stopped]
    return Decision(stage, dict(budget or {}), kept, stopped, fits)


def collapsed(level: Sequence[float], bound: float) -> bool:
    """The collapse rule (module docstring) on a (best, recent) score level: the score fell
    COLLAPSE_DROP from its best, to below `bound` (the best variant's A lower bound)."""
    best, recent = level
    return recent < min(best - COLLAPSE_DROP, bound)


def run_level(scores: Any, k: int = 3) -> tuple[float, float] | None:
    """(best, recent) of one run's scores in compute order: its running mean over `k`
    evaluations at its highest and at its last (averaging keeps one lucky draw from being the
    best); None with fewer than k evaluations."""
    y = np.asarray(scores, dtype=float)
    if y.size < k:
        return None
    smooth = np.convolve(y, np.ones(k) / k, mode="valid")
    return float(smooth.max()), float(smooth[-1])


def score_levels(frame: pd.DataFrame, k: int = 3) -> dict[str, tuple[float, float]]:
    """variant -> (best, recent) score, its seeds' `run_level`s averaged, from a tidy curves
    frame (columns variant, seed, compute, score)."""
    out = {}
    for v, g in frame.sort_values("compute").groupby("variant", sort=False):
        runs = [lv for _, r in g.groupby("seed") if (lv := run_level(r["score"], k)) is not None]
        if runs:
            out[str(v)] = (float(np.mean([b for b, _ in runs])),
                           float(np.mean([r for _, r in runs])))
    return out


def departed_variants(frame: pd.DataFrame) -> dict[str, str]:
    """variant -> why, for the departed rule: every run (seed) of the variant that has a frozen
    forecast departed from it, and at least one has one (ablate.analysis.watch with its
    defaults). A tidy curves frame in (columns variant, seed, compute, score)."""
    from ablate.analysis.watch import judge

    out = {}
    for v, g in frame.sort_values("compute").groupby("variant", sort=False):
        js = [judge(f"{v}/seed{s}", str(v), int(s), r["compute"], r["score"], with_today=False)
              for s, r in g.groupby("seed")]
        js = [j for j in js if j.forecast is not None]
        if js and all(j.verdict == "departed" for j in js):
            at = min(j.departed_at for j in js)
            out[str(v)] = (f"departed from its frozen forecast from compute {at:.4g} "
                           f"({count(len(js), 'run')}, {js[0].k} evaluations in a row below the "
                           f"{js[0].level:.0%} band)")
    return out
