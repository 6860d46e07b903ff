"""What a fit's refusals and warnings say, in words: why A and C_mid are not identified and
which option helps, a rise that happened before the window, repeated compute values, and fits
that stand but sit at a bound. Kept apart from the fitting itself (fitters.py) so the wording
can be read and changed in one place."""

from __future__ import annotations

import math

import numpy as np

from ablate.analysis import levenberg_marquardt as lm
from ablate.number_text import computes_apart, count


def duplicate_warning(c: np.ndarray, sid: np.ndarray) -> list[str]:
    """A warning when one seed has several points at the same compute (a resumed run that
    re-logged steps, or several runs sharing a variant without a seed column)."""
    pairs = np.column_stack([sid, c])
    n_dup = len(pairs) - len(np.unique(pairs, axis=0))
    if not n_dup:
        return []
    verb = "repeats" if n_dup == 1 else "repeat"
    return [f"{count(n_dup, 'point')} {verb} a compute value already seen in the same seed "
            "(a resumed run re-logging steps, or several runs without a seed column); they are "
            "fit as separate evaluations"]


def unidentified(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> str | None:
    """Why the point fit does not pin A and C_mid, or None when it does."""
    if theta[2] >= x.max() + lm.M_ABOVE - 1e-6:
        return "C_mid ran to its limit, thousands of times the largest compute"
    if theta[1] <= math.log(lm.B_MIN) + 1e-9:
        return f"B ran to its lower limit {lm.B_MIN}"
    if theta[0] >= 0.999 and y.max() < 0.9:
        return f"A ran to its bound 1.0 while no score in the window exceeds {y.max():.3f}"
    return None


def earlier_rise_hint(c, y, positive, lo, skipped) -> str:
    """"; the rise is before the window..." when the skipped early points hold the curve's rise."""
    if not skipped:
        start = c == c.min()
        late = positive & (c >= lo)
        if c.min() < lo and y[start].mean() < y[late].mean() - 3 * max(y[late].std(), 1e-3):
            return (f"; the whole rise, from R0={y[start].mean():.3f} at compute {c.min():.4g} to "
                    f"~{y[late].mean():.3f}, happened before the first evaluation in the window "
                    f"(compute {c[late].min():.4g}): evaluate more often early in the run, no "
                    "window setting can recover B and C_mid")
        return ""
    early = positive & (c < lo)
    late = positive & (c >= lo)
    if y[early].mean() < y[late].mean() - 1e-9:
        return (f"; the curve rose before the window starts ({count(skipped, 'point')} below "
                f"compute {lo:.4g} skipped): lower --min-compute, e.g. --min-compute 0")
    return ""


def unidentified_help(c, y, positive, lo, skipped, max_compute, r0) -> str:
    """The real cause of an unidentified fit and the option that helps."""
    hint = earlier_rise_hint(c, y, positive, lo, skipped)
    if hint:
        m = positive.copy()
        x_all = np.log(c[m])
        theta, _ = lm.best_fit(x_all, y[m], r0)
        if unidentified(theta, x_all, y[m]) is None:
            return "the window holds only the plateau" + hint
    if max_compute is not None and np.any(c > max_compute):
        return (f"the curve has not bent by --max-compute {max_compute:.4g}; "
                f"{count(int(np.sum(c > max_compute)), 'later point')} held out: raise "
                "--max-compute")
    return ("the curve is still rising at its last point without bending towards a ceiling; "
            "train longer (more compute), no window setting can identify the ceiling")


def bound_warnings(A: float, B: float, cm: float, x: np.ndarray, r2: float,
                    grid: dict | None) -> list[str]:
    """Fits that stand but sit at a bound or outside the data, said in words."""
    out = []
    if A >= 0.99:
        out.append(f"A at its bound ({A:.3f}, max 1.0): the ceiling is not pinned by the data")
    c_lo, c_hi = math.exp(x.min()), math.exp(x.max())
    if cm > c_hi:
        out.append(f"C_mid beyond the data ({cm / c_hi:.3g}x the largest compute in the window): "
                   "the curve has not reached half its gain, so A is an extrapolation")
    elif cm < c_lo:
        shown, start = computes_apart(cm, c_lo)
        out.append(f"C_mid before the window ({shown} < its start {start}): the data shows "
                   "only the saturation, so B and C_mid are weakly identified")
    if B <= lm.B_MIN * 1.05 or B >= lm.B_MAX * 0.95:
        out.append(f"B at the limit of its range ({B:.3g}; the fitter allows {lm.B_MIN}-{lm.B_MAX:g})")
    if np.isfinite(r2) and r2 < 0:
        out.append(f"fits worse than a flat line (R^2 {r2:.2f})")
    if grid is not None and grid["extended"]:
        out.append("the paper grid's optimum was on its edge; grid extended ("
                   + ", ".join(dict.fromkeys(grid["extended"])) + ")")
    return out
