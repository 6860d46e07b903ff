"""Fitting the sigmoid (`fit_sigmoid`) to a curve: the window, two point estimators, refusals and
warnings in words, and `refit_with_A` for the paper's shared-A comparison.

Two point estimators:
  "default"  variable projection + batched Levenberg-Marquardt (`levenberg_marquardt`), all in numpy: a
             vectorized grid over (B, C_mid) with A solved in closed form, then LM on
             (A, log B, log C_mid) from the best few distinct starts at once. Continuous, so its
             SSE is at most the paper grid's.
  "paper"    the paper's grid: A in {0.450, ..., 0.800} x 100 C_mid values linear in [100, 40000],
             B by scipy curve_fit per pair, lowest SSE kept. The C_mid grid's unit is an explicit
             choice (`paper_grid`): "relative" (default) places it where it sits relative to the
             paper's 16k-GPU-hour runs, i.e. [100, 40000] x max_compute / 16000, so it works on
             FLOPs, steps or CPU-proxy device-hours alike; "gpu-hours" uses it verbatim (for data
             in paper-scale GPU-hours). An optimum on the grid's edge is not an answer: the grid
             is extended on that side (A by 0.005 steps down to R0 or up to 1, C_mid by further
             spans) until the optimum is inside; if it is still on an edge that cannot move (A
             at 1, C_mid beyond 3 spans) the fit is refused. `Fit.grid` records the grid used.

Fit window: `min_compute` / `max_compute`. When no minimum is given, `ablate.analysis.window`
reads the start from the curve's shape: early points are kept unless they are off the sigmoid
the later points follow (an F-test of nested fits); the Fit records the window and what was
skipped. Intervals are attached by `intervals`.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
from scipy import stats

from ablate.analysis import levenberg_marquardt as lm
from ablate.analysis.fit import (MIN_POINTS, N_BOOT, PAPER_A_GRID, PAPER_CMID_RANGE, PAPER_GRIDS,
                                 PAPER_RUN_GPU_HOURS, Fit, FitError)
from ablate.analysis.intervals import attach_intervals
from ablate.analysis.window import auto_min_compute
from ablate.errors import InputError


def fit_sigmoid(
    compute,
    score,
    *,
    min_compute: float | None = None,
    max_compute: float | None = None,
    method: Literal["default", "paper"] = "default",
    seeds=None,
    n_boot: int = N_BOOT,
    intervals: bool = True,
    random_state: int | np.random.Generator | None = 0,
    paper_grid: str = "relative",
    bins: int | None = None,
) -> Fit:
    """Fit R(C) on the window and attach 95% intervals.

    `seeds` labels each point's run (seeds of one variant are pooled for the point fit); with
    >= SEED_MIN_RUNS distinct seeds the intervals come from per-seed fits, else from the
    drift + white-noise bootstrap with a REML-posterior noise model. `min_compute=None` lets
    `ablate.analysis.window` choose the start from the curve's shape. `paper_grid` is the unit
    of the paper method's C_mid grid (see `paper_cmid_grid`). Raises FitError when the curve cannot be
    fit, naming the cause and the option that helps; fits that stand but sit at a bound carry
    `warnings`. `bins`: average each seed's window into at most this many bins of consecutive
    points before fitting (see `bin_series`); R0 and the window are read from every point.
    """
    if bins is not None and (not isinstance(bins, (int, np.integer)) or bins < MIN_POINTS):
        raise InputError(f"bins {bins!r}: must be an integer >= {MIN_POINTS}")
    if method not in ("default", "paper"):
        raise InputError(f"unknown fit method {method!r}; valid: default, paper")
    if paper_grid not in PAPER_GRIDS:
        raise InputError(f"unknown paper grid unit {paper_grid!r}; valid: {', '.join(PAPER_GRIDS)}")
    c, y = _validate(compute, score)
    sid = np.zeros(c.size, int) if seeds is None else np.unique(np.asarray(seeds), return_inverse=True)[1].ravel()
    if sid.size != c.size:
        raise InputError(f"seeds has {sid.size} labels for {c.size} points")
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)

    r0, n_seeds = _measured_r0(c, y, sid)

    hi = np.inf if max_compute is None else float(max_compute)
    positive = (c > 0) & (c <= hi)
    rule = "auto" if min_compute is None else "given"
    lo = _auto_start(c[positive], y[positive], r0) if min_compute is None else float(min_compute)
    inwin = positive & (c >= lo)
    skipped = int(np.sum(positive & (c < lo)))
    n = int(inwin.sum())
    if n < MIN_POINTS:
        raise FitError(f"only {n} point(s) with compute in [{lo:.4g}, {hi:.4g}]; "
                       f"need at least {MIN_POINTS} (widen --min-compute/--max-compute)",
                       cause="too short")
    x = np.log(c[inwin])
    yw, sw = y[inwin], sid[inwin]
    notes = _duplicate_warning(c[inwin], sw)
    binned_from = None
    if bins is not None and np.bincount(sw).max() > bins:
        binned_from = n
        x, yw, sw = bin_series(x, yw, sw, bins)
        n = x.size
    if np.ptp(x) <= 0:
        raise FitError("all points in the window have the same compute; need a range of compute")
    rho = stats.spearmanr(x, yw).statistic if np.ptp(yw) > 0 else 0.0
    if not np.isfinite(rho) or rho <= 0:
        raise FitError(f"score is flat or decreasing with compute in the window (Spearman "
                       f"rho {rho:.2f}); the sigmoid needs a rising curve"
                       + _earlier_rise_hint(c, y, positive, lo, skipped))

    grid = None
    if method == "paper":
        theta, sse, grid = _fit_paper(x, yw, r0, float(c[inwin].max()), paper_grid)
    else:
        theta, sse = lm.best_fit(x, yw, r0)
    if theta is None or not np.isfinite(sse):
        raise FitError("the fit did not converge")
    A, B, cm = float(theta[0]), float(math.exp(theta[1])), float(math.exp(theta[2]))
    if A <= r0 + 1e-6:
        raise FitError(f"fitted asymptote A={A:.3f} is not above the starting score R0={r0:.3f}: "
                       "flat or decreasing curve")
    if grid is not None and grid["edge"]:
        raise FitError("paper grid: the best fit is on the edge of the grid even after extending "
                       f"it ({'; '.join(grid['edge'])}), so the grid, not the data, chose it; "
                       "--method default reports such fits with bound warnings")
    why = _unidentified(theta, x, yw)
    if why:
        raise FitError(f"A and C_mid are not identified ({why}): "
                       + _unidentified_help(c, y, positive, lo, skipped, max_compute, r0),
                       cause="unidentified")
    ss_tot = float(np.sum((yw - yw.mean()) ** 2))
    r2 = 1.0 - sse / ss_tot if ss_tot > 0 else float("nan")

    fit = Fit(A=A, B=B, C_mid=cm, R0=r0, ci={}, r2=r2, n_points=n, sse=sse, method=method,
              n_seeds=n_seeds, min_compute=lo, max_compute=None if max_compute is None else hi,
              skipped=skipped, window_rule=rule, grid=grid, data=(c, y, sid),
              warnings=_bound_warnings(A, B, cm, x, r2, grid) + notes, binned_from=binned_from,
              fit_points=(x, yw, sw))
    if intervals and n_boot > 0:  # n_boot=0: point fit only, like intervals=False
        attach_intervals(fit, x, yw, sw, np.array([A, theta[1], theta[2]]), r0, n_boot, rng)
    return fit


def refit_with_A(fit: Fit, A: float, *, n_boot: int = N_BOOT) -> Fit:
    """Refit `fit`'s data with the asymptote held at `A` (the paper's shared-A rule), so the
    B of two recipes with nearly equal ceilings can be compared on equal terms. `n_boot=0`
    skips the intervals (callers that need only the point B)."""
    if fit.fit_points is not None:
        x, yw, sw = fit.fit_points
    else:
        c, y, sid = fit.data
        hi = np.inf if fit.max_compute is None else fit.max_compute
        inwin = (c > 0) & (c <= hi) & (c >= fit.min_compute)
        x, yw, sw = np.log(c[inwin]), y[inwin], sid[inwin]
    th0 = np.array([[A, math.log(fit.B), math.log(fit.C_mid)]])
    th, sse = lm.solve(x, yw[None], None, th0, np.array([fit.R0]), fix_a=True)
    theta = th[0]
    ss_tot = float(np.sum((yw - yw.mean()) ** 2))
    out = Fit(A=float(A), B=float(math.exp(theta[1])), C_mid=float(math.exp(theta[2])), R0=fit.R0,
              ci={}, r2=1.0 - float(sse[0]) / ss_tot if ss_tot > 0 else float("nan"),
              n_points=fit.n_points, sse=float(sse[0]), method=fit.method, n_seeds=fit.n_seeds,
              min_compute=fit.min_compute, max_compute=fit.max_compute, skipped=fit.skipped,
              window_rule=fit.window_rule, data=fit.data, binned_from=fit.binned_from,
              fit_points=(x, yw, sw))
    if fit.samples and n_boot > 0:
        attach_intervals(out, x, yw, sw, theta, fit.R0, n_boot, np.random.default_rng(0), fix_a=True)
    return out


def paper_cmid_grid(max_compute: float, unit: str = "relative") -> np.ndarray:
    """The paper's 100 C_mid values, linear in [100, 40000] GPU-hours.

    unit "gpu-hours": verbatim (the data is in paper-scale GPU-hours). "relative": multiplied by
    max_compute / 16000, i.e. placed where the grid sits relative to the paper's 16k-GPU-hour
    runs, whatever the compute unit (FLOPs, steps, device-hours).
    """
    if unit not in PAPER_GRIDS:
        raise InputError(f"unknown paper grid unit {unit!r}; valid: {', '.join(PAPER_GRIDS)}")
    lo, hi = PAPER_CMID_RANGE
    scale = 1.0 if unit == "gpu-hours" else max_compute / PAPER_RUN_GPU_HOURS
    return np.linspace(lo * scale, hi * scale, 100)


def bin_series(x: np.ndarray, y: np.ndarray, sid: np.ndarray,
               bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each seed's points averaged into at most `bins` bins of consecutive evaluations.

    Equal-count bins in evaluation order (not equal widths in compute): when evaluations are
    evenly spaced in steps, every bin averages the same number of them, so binned points keep
    one noise level and the AR(1) + white model still describes them (the white part shrinks by
    the bin size, the slow drift does not). Averaging, not thinning: keeping every k-th point
    throws the others' information away. x is log compute; a bin's x is the log of its mean
    compute, its y the mean score.
    """
    xs, ys, ss = [], [], []
    for s in np.unique(sid):
        ix = np.flatnonzero(sid == s)
        ix = ix[np.argsort(x[ix], kind="stable")]
        for part in np.array_split(ix, min(bins, ix.size)):
            xs.append(math.log(float(np.mean(np.exp(x[part])))))
            ys.append(float(np.mean(y[part])))
            ss.append(s)
    return np.array(xs), np.array(ys), np.array(ss)


def _validate(compute, score) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, dtype=float).ravel()
    y = np.asarray(score, dtype=float).ravel()
    if c.shape != y.shape:
        raise InputError(f"compute and score differ in length ({c.size} vs {y.size})")
    if not np.all(np.isfinite(c)):
        raise InputError(f"compute has {int(np.sum(~np.isfinite(c)))} NaN/inf value(s); "
                         "all compute values must be finite numbers >= 0")
    if not np.all(np.isfinite(y)):
        raise InputError(f"score has {int(np.sum(~np.isfinite(y)))} NaN/inf value(s); "
                         "all scores must be finite numbers in [0, 1]")
    if np.any(c < 0):
        raise InputError("compute has negative values; compute must be >= 0")
    if np.any((y < 0) | (y > 1)):
        raise InputError(f"score has values outside [0, 1] (min {y.min():.4g}, max {y.max():.4g}); "
                         "the sigmoid models a pass rate in [0, 1]")
    return c, y


def _duplicate_warning(c: np.ndarray, sid: np.ndarray) -> list[str]:
    """A warning when one seed has several points at the same compute (a resumed run that
    re-logged steps, or several runs sharing a variant without a seed column)."""
    pairs = np.column_stack([sid, c])
    n_dup = len(pairs) - len(np.unique(pairs, axis=0))
    if not n_dup:
        return []
    return [f"{n_dup} point(s) repeat a compute value already seen in the same seed (a resumed "
            "run re-logging steps, or several runs without a seed column); they are fit as "
            "separate evaluations"]


def _measured_r0(c: np.ndarray, y: np.ndarray, sid: np.ndarray) -> tuple[float, int]:
    """(R0, seeds): each seed's score at its smallest compute (compute 0 included), averaged."""
    starts = []
    for s in np.unique(sid):
        ix = np.flatnonzero(sid == s)
        starts.append(float(np.mean(y[ix][c[ix] == c[ix].min()])))
    return float(np.mean(starts)), len(starts)


def shape_start(compute, score, seeds=None, max_compute: float | None = None) -> float | None:
    """The start the curve's own shape asks for (what `fit_sigmoid(min_compute=None)` would
    use), or None when it keeps every positive point: no early phase to skip. Used by the
    analysis pipeline to give compared variants one window (ablate.analysis.pipeline)."""
    c, y = _validate(compute, score)
    sid = np.zeros(c.size, int) if seeds is None else \
        np.unique(np.asarray(seeds), return_inverse=True)[1].ravel()
    r0, _ = _measured_r0(c, y, sid)
    hi = np.inf if max_compute is None else float(max_compute)
    positive = (c > 0) & (c <= hi)
    if not positive.any():
        return None
    lo = _auto_start(c[positive], y[positive], r0)
    return lo if lo > c[positive].min() else None


def _auto_start(c: np.ndarray, y: np.ndarray, r0: float) -> float:
    """`ablate.analysis.window.auto_min_compute` with the default point fit, all candidate
    windows fit in one batched LM call (a window is a 0/1 weight on the points) from shared starts (the
    grid's best on every point): ~10 ms per 100-point curve instead of one grid search each."""
    if c.size == 0:
        return 0.0
    x_all = np.log(c)
    th0 = lm.starts(x_all, y, r0)

    def fits_of(los: list[float]) -> list[tuple[float, bool]]:
        S, L = len(th0), len(los)
        W = np.repeat(np.array([(c >= lo).astype(float) for lo in los]), S, axis=0)
        th, sse = lm.solve(x_all, np.broadcast_to(y, W.shape), W, np.tile(th0, (L, 1)),
                           np.full(S * L, r0))
        out = []
        for j, lo in enumerate(los):
            m = c >= lo
            i = j * S + int(np.argmin(sse[j * S:(j + 1) * S]))
            x, yy = x_all[m], y[m]
            rising = m.sum() >= 4 and np.ptp(yy) > 0 and stats.spearmanr(x, yy).statistic > 0
            ok = bool(rising and th[i, 0] > r0 + 1e-6 and _unidentified(th[i], x, yy) is None)
            out.append((float(sse[i]) if m.sum() >= 4 else np.inf, ok))
        return out

    return auto_min_compute(c, fits_of, MIN_POINTS)[0]


def _fit_paper(x, y, r0, c_max, unit):
    """The paper's grid over (A, C_mid) with scipy curve_fit for B; lowest SSE wins.

    An optimum on the grid's edge is the grid's answer, not the data's (A = 0.450 for a curve
    that never passes 0.07), so the grid is extended on that side and searched again: A by the
    same 0.005 steps down to just above R0 or up to 1.0, C_mid upward by further copies of its
    span (at most 3) and downward by 20 geometric steps to 1/100 of its lowest value. Returns
    (theta, sse, grid): grid records the ranges searched, the extensions and any edge the
    optimum still sits on (then the caller refuses the fit).
    """
    C, yy = np.exp(x), y
    step = 0.005
    A_vals = list(PAPER_A_GRID)
    cm_vals = list(paper_cmid_grid(c_max, unit))
    span = cm_vals[-1] - cm_vals[0]
    results: dict[tuple[float, float], tuple[float, float]] = {}
    extended: list[str] = []
    up_spans = down = 0
    for _ in range(8):
        for A in A_vals:
            for cm in cm_vals:
                if (A, cm) not in results:
                    results[(A, cm)] = _paper_pair(C, yy, r0, A, cm)
        (A, cm), (sse, B) = min(results.items(), key=lambda kv: kv[1][0])
        if not np.isfinite(sse):
            return None, np.inf, None
        edges, grew = [], False
        if A == A_vals[0] and A - step > r0:
            lo = max(r0 + step, step)
            A_vals = [round(v, 3) for v in np.arange(A - step, lo - 1e-9, -step)][::-1] + A_vals
            extended.append("A down"); grew = True
        elif A == A_vals[-1] and A < 1.0:
            A_vals = A_vals + [round(v, 3) for v in np.arange(A + step, 1.0 + 1e-9, step)]
            extended.append("A up"); grew = True
        elif A in (A_vals[0], A_vals[-1]):
            edges.append(f"A={A:.3f} (the bound)" if A >= 1.0 else f"A={A:.3f} (just above R0)")
        if cm == cm_vals[-1] and up_spans < 3:
            cm_vals = cm_vals + list(np.linspace(cm, cm + span, 101)[1:])
            up_spans += 1; extended.append("C_mid up"); grew = True
        elif cm == cm_vals[0] and down < 1:
            cm_vals = list(np.geomspace(cm / 100, cm, 21)[:-1]) + cm_vals
            down += 1; extended.append("C_mid down"); grew = True
        elif cm in (cm_vals[0], cm_vals[-1]):
            edges.append(f"C_mid={cm:.4g} (end of the extended grid)")
        if not grew:
            break
    grid = {"unit": unit, "A": [min(A_vals), max(A_vals), step],
            "C_mid": [float(min(cm_vals)), float(max(cm_vals)), len(cm_vals)],
            "extended": extended, "edge": edges}
    return np.array([A, math.log(B), math.log(cm)]), sse, grid


def _paper_pair(C, yy, r0, A, cm) -> tuple[float, float]:
    """(SSE, B) of the paper's inner step: B by scipy curve_fit at fixed (A, C_mid)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    def f(c, B):
        return r0 + (A - r0) / (1 + (cm / c) ** B)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            (B,), _ = curve_fit(f, C, yy, p0=[1.0])
    except (RuntimeError, ValueError, np.linalg.LinAlgError):
        return np.inf, np.nan
    if not (B > 0 and np.isfinite(B)):  # the model needs B > 0; curve_fit is unconstrained
        return np.inf, np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        sse = float(np.sum((yy - f(C, B)) ** 2))
    return (sse if np.isfinite(sse) else np.inf), float(B)


def _unidentified(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> str | None:
    """Why the point fit does not pin A and C_mid, or None when it does."""
    if theta[2] >= x.max() + lm.M_ABOVE - 1e-6:
        return "C_mid ran to its limit, thousands of times the largest compute"
    if theta[1] <= math.log(lm.B_MIN) + 1e-9:
        return f"B ran to its lower limit {lm.B_MIN}"
    if theta[0] >= 0.999 and y.max() < 0.9:
        return f"A ran to its bound 1.0 while no score in the window exceeds {y.max():.3f}"
    return None


def _earlier_rise_hint(c, y, positive, lo, skipped) -> str:
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
        return (f"; the curve rose before the window starts ({skipped} point(s) below "
                f"compute {lo:.4g} skipped): lower --min-compute, e.g. --min-compute 0")
    return ""


def _unidentified_help(c, y, positive, lo, skipped, max_compute, r0) -> str:
    """The real cause of an unidentified fit and the option that helps."""
    hint = _earlier_rise_hint(c, y, positive, lo, skipped)
    if hint:
        m = positive.copy()
        x_all = np.log(c[m])
        theta, _ = lm.best_fit(x_all, y[m], r0)
        if _unidentified(theta, x_all, y[m]) is None:
            return "the window holds only the plateau" + hint
    if max_compute is not None and np.any(c > max_compute):
        return (f"the curve has not bent by --max-compute {max_compute:.4g}; "
                f"{int(np.sum(c > max_compute))} later point(s) were held out: raise --max-compute")
    return ("the curve is still rising at its last point without bending towards a ceiling; "
            "train longer (more compute), no window setting can identify the ceiling")


def _bound_warnings(A: float, B: float, cm: float, x: np.ndarray, r2: float,
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
        out.append(f"C_mid before the window ({cm:.3g} < its start {c_lo:.3g}): the data shows "
                   "only the saturation, so B and C_mid are weakly identified")
    if B <= lm.B_MIN * 1.05 or B >= lm.B_MAX * 0.95:
        out.append(f"B at the limit of its range ({B:.3g}; the fitter allows {lm.B_MIN}-{lm.B_MAX:g})")
    if np.isfinite(r2) and r2 < 0:
        out.append(f"fits worse than a flat line (R^2 {r2:.2f})")
    if grid is not None and grid["extended"]:
        out.append("the paper grid's optimum was on its edge; grid extended ("
                   + ", ".join(dict.fromkeys(grid["extended"])) + ")")
    return out
