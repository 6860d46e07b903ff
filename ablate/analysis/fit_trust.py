"""Whether a fit can be trusted, in one word and one reason, so no one reads a bare A = 1.0.

Verdicts, in the order they are tested (the first that applies is reported; `reasons` lists
all). Noise is tested before the bend: a noisy run's A interval is wide for the noise's sake,
and "train longer" would not be the remedy.
  "A at bound"                          the asymptote sits at 1.0: the data does not pin it
  "not bending yet: A unidentified"     C_mid is beyond the data (the curve has not reached half
                                        its gain), A's interval reaches the bound, or it is
                                        wider than A_WIDTH_MAX while the curve fits well (R^2 >=
                                        R2_MIN): A is an extrapolation, not a measurement
  "too noisy: R^2 x"                    R^2 < R2_MIN *and* A's 95% interval is wider than
                                        A_WIDTH_MAX: the noise swamps the rise and it shows in
                                        the ceiling
  "too short: n points"                 fewer than MIN_TRUSTED_POINTS points in the window
  "ok"

Why these numbers: A_WIDTH_MAX = 0.1 (A known to +-0.05, 2.5x the paper's +-0.02 run-to-run
margin): wider than that the fit cannot separate recipes whose ceilings differ by less than 0.05.
(Twice the margin, 0.04, would flag half of the well-bent synthetic benchmark runs, whose median
single-run width is 0.041: a single run cannot do better than about the paper's margin.) R2_MIN = 0.8: on the
published curves (benchmarks/published), windows holding the rise fit with R^2 0.82-0.92 and windows
holding only a plateau with 0.29-0.60. A low R^2 alone is not a verdict: a dense log of a small
eval set (1,000 points of a noisy score) can have R^2 0.5 and still pin A to +-0.01, and then
the verdict is "ok" with the R^2 named in the reason. A high R^2 alone is not one either: a run
that ends near C_mid fits with R^2 ~1 and leaves A open by +-0.1. MIN_TRUSTED_POINTS = 10: with 5-9 points
three parameters and a noise model leave almost no degrees of freedom to check the shape.
"""

from __future__ import annotations

import math

from ablate.analysis.fit import Fit

R2_MIN = 0.8
A_WIDTH_MAX = 0.1
MIN_TRUSTED_POINTS = 10
OK = "ok"


def assess(fit: Fit) -> tuple[str, str, list[str]]:
    """(verdict, reason, every reason that applies) for a fit that stands."""
    found: list[tuple[str, str]] = []
    lo, hi = fit.ci.get("A", (math.nan, math.nan))
    width = hi - lo if math.isfinite(hi - lo) else math.nan
    c_hi = fit.window_max()
    if fit.A >= 0.99:
        found.append(("A at bound", f"A = {fit.A:.3f} sits at its bound 1.0: the data does not "
                      "pin the ceiling; train longer or read B and C_mid only"))
    noisy = math.isfinite(fit.r2) and fit.r2 < R2_MIN and not (width <= A_WIDTH_MAX)
    if noisy:
        found.append((f"too noisy: R^2 {fit.r2:.2f}",
                      f"R^2 {fit.r2:.2f} < {R2_MIN} and A's 95% interval is "
                      + (f"{width:.3f} wide (> {A_WIDTH_MAX})" if math.isfinite(width)
                         else "not computed")
                      + ": evaluation noise swamps the rise; evaluate on more prompts or "
                      "samples, add seeds, or pool variants' seeds"))
    # a wide A from noise is reported as noise, not as a missing bend
    elif c_hi is not None and fit.C_mid > c_hi:
        found.append(("not bending yet: A unidentified",
                      f"C_mid {fit.C_mid:.3g} is beyond the last compute fit ({c_hi:.3g}): the "
                      "curve has not reached half its gain, so A is an extrapolation; train longer"))
    elif math.isfinite(hi) and hi >= 0.99 and fit.A < 0.99:
        found.append(("not bending yet: A unidentified",
                      f"A's 95% interval reaches the bound ({lo:.3f}-{hi:.3f}): the curve has not "
                      "bent enough to pin its ceiling; train longer"))
    elif width > A_WIDTH_MAX and not (fit.r2 < R2_MIN) and c_hi is not None:
        reached = (float(fit.predict(c_hi)) - fit.R0) / max(fit.A - fit.R0, 1e-12)
        found.append(("not bending yet: A unidentified",
                      f"A's 95% interval is {width:.3f} wide (> {A_WIDTH_MAX}) although the curve "
                      f"fits well (R^2 {fit.r2:.2f}): by the last compute it has made "
                      f"{reached:.0%} of its fitted gain, too little bend to pin the ceiling; "
                      "train longer"))
    if fit.n_points < MIN_TRUSTED_POINTS:
        found.append((f"too short: {fit.n_points} points",
                      f"only {fit.n_points} points in the window (fewer than "
                      f"{MIN_TRUSTED_POINTS}): too few to check the sigmoid's shape; evaluate "
                      "more often or lower --min-compute"))
    if not found:
        why = f"R^2 {fit.r2:.2f}" + (f", A to +-{width / 2:.3f}" if math.isfinite(width) else "")
        if math.isfinite(fit.r2) and fit.r2 < R2_MIN:
            why += " (a low R^2 from evaluation noise; the many points still pin A)"
        return OK, why, []
    return found[0][0], found[0][1], [r for _, r in found]


def refused(cause: str, error: str) -> tuple[str, str]:
    """(verdict, reason) of a variant whose fit was refused: `cause` is the FitError's."""
    return _REFUSED.get(cause, "no fit"), error


_REFUSED = {"unidentified": "not bending yet: A unidentified", "too short": "too short"}
