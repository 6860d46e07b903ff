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
skipped. Intervals are attached by `intervals`; the paper's grid is in `paper_grid`, the
refusals' and warnings' wording in `fit_diagnosis`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from ablate.analysis import levenberg_marquardt as lm
from ablate.analysis.fit import MIN_POINTS, N_BOOT, PAPER_GRIDS, Fit, FitError
from ablate.number_text import count
from ablate.analysis.fit_diagnosis import (bound_warnings, duplicate_warning, earlier_rise_hint,
                                           unidentified, unidentified_help)
from ablate.analysis.intervals import parameter_draws
from ablate.analysis.paper_grid import fit_paper
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
    of the paper method's C_mid grid (see `paper_grid.paper_cmid_grid`). Raises FitError when the curve cannot be
    fit, naming the cause and the option that helps; fits that stand but sit at a bound carry
    `warnings`. `bins`: average each seed's window into at most this many bins of consecutive
    points before fitting (see `bin_series`); R0 and the window are read from every point.
    """
    _check_options(method, paper_grid, bins)
    c, y = _validate(compute, score)
    sid = _seed_ids(seeds, c.size)
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    r0, n_seeds = _measured_r0(c, y, sid)
    # R0 is measured where every seed was evaluated at compute 0 (the trainer's step-0 eval);
    # else the first score is already on the curve, not its start, and R0 is fitted
    # (`start_bound`: the largest R0 the first scores allow).
    r0_hi = None if start_measured(c, sid) else start_bound(c, y, sid)
    win = _window(c, y, r0, min_compute, max_compute, r0_hi)
    pts = _window_points(c, y, sid, win, bins)
    x, yw, sw = pts.x, pts.y, pts.sid
    _check_rising(x, yw, c, y, win)
    r0_note: list[str] = []
    if r0_hi is not None:
        r0, theta, sse, r0_note = _fit_start(x, yw, r0, r0_hi, float(c.min()))
    if method == "paper":
        theta, sse, grid = fit_paper(x, yw, r0, float(c[win.inwin].max()), paper_grid)
    else:
        if r0_hi is None or theta is None:
            theta, sse = lm.best_fit(x, yw, r0)
        grid = None
    _check_point_fit(theta, sse, grid, r0, x, yw, c, y, win, max_compute)
    A, B, cm = float(theta[0]), float(math.exp(theta[1])), float(math.exp(theta[2]))
    ss_tot = float(np.sum((yw - yw.mean()) ** 2))
    r2 = 1.0 - sse / ss_tot if ss_tot > 0 else float("nan")
    fitted_r0 = r0_hi is not None and not r0_note[0].startswith("R0 not fitted")

    fit = Fit(A=A, B=B, C_mid=cm, R0=r0, ci={}, r2=r2, n_points=x.size, sse=sse, method=method,
              n_seeds=n_seeds, min_compute=win.lo, max_compute=None if max_compute is None else win.hi,
              skipped=win.skipped, window_rule=win.rule, grid=grid, data=(c, y, sid),
              warnings=r0_note + bound_warnings(A, B, cm, x, r2, grid) + pts.notes,
              binned_from=pts.binned_from, fit_points=(x, yw, sw),
              r0_rule="fitted" if fitted_r0 else "measured")
    if intervals and n_boot > 0:  # n_boot=0: point fit only, like intervals=False
        _attach_intervals(fit, x, yw, sw, np.array([A, theta[1], theta[2]]), r0, n_boot, rng,
                          r0_hi=r0_hi if fitted_r0 else None)
    return fit


def start_measured(c: np.ndarray, sid: np.ndarray) -> bool:
    """Whether every seed's curve has a point at compute 0: its start, measured."""
    return all(np.any(c[sid == s] <= 0) for s in np.unique(sid))


def start_bound(c: np.ndarray, y: np.ndarray, sid: np.ndarray) -> float:
    """The largest R0 a fitted start may take: a rising curve starts below its first score, so
    the seeds' mean first score plus twice the evaluation noise (from consecutive differences,
    MAD), at most 1."""
    d = []
    for s in np.unique(sid):
        ix = np.flatnonzero(sid == s)
        d.append(np.diff(y[ix[np.argsort(c[ix], kind="stable")]]))
    diffs = np.concatenate(d) if d else np.zeros(0)
    sd = float(np.median(np.abs(diffs - np.median(diffs))) / 0.6745 / math.sqrt(2)) if diffs.size else 0.0
    return float(min(1.0, _measured_r0(c, y, sid)[0] + 2.0 * sd))


def _fit_start(x: np.ndarray, y: np.ndarray, r0: float, r0_hi: float, c_first: float):
    """(R0, theta, sse, note) of the point fit with R0 free in [0, r0_hi]; where that fit does
    not pin the curve (not converged, A not above R0, unidentified), R0 stays the first score and
    the note says so in one line (theta None: the caller fits at that R0)."""
    th, sse = lm.best_fit_r0(x, y, r0_hi)
    if np.isfinite(sse) and th[0] > th[3] + 1e-6 and unidentified(th[:3], x, y) is None:
        return (float(th[3]), th[:3], sse,
                [f"R0 fitted: the first evaluation is at compute {c_first:.4g}, not 0 "
                 f"(R0 {th[3]:.3f}, the first score {r0:.3f})"])
    return (r0, None, np.inf,
            [f"R0 not fitted: the first evaluation is at compute {c_first:.4g}, not 0, and the "
             f"data does not pin the start, so R0 is the first score {r0:.3f}; A and B may be "
             "biased (log an evaluation at step 0)"])


def _attach_intervals(fit: Fit, x: np.ndarray, y: np.ndarray, sid: np.ndarray, theta: np.ndarray,
                      r0: float, n_boot: int, rng: np.random.Generator, *, fix_a: bool = False,
                      r0_hi: float | None = None) -> None:
    """Set `fit.samples`, `fit.ci` and `fit.interval_method` from `intervals.parameter_draws`."""
    fit.samples, fit.ci, fit.interval_method = parameter_draws(
        x, y, sid, theta, r0, n_boot, rng, data=fit.data, n_seeds=fit.n_seeds, fix_a=fix_a,
        r0_hi=r0_hi)


def _check_options(method: str, paper_grid: str, bins: int | None) -> None:
    """Refuse option values fit_sigmoid does not know, before touching the data."""
    if bins is not None and (not isinstance(bins, (int, np.integer)) or bins < MIN_POINTS):
        raise InputError(f"bins {bins!r}: must be an integer >= {MIN_POINTS}")
    if method not in ("default", "paper"):
        raise InputError(f"unknown fit method {method!r}; valid: default, paper")
    if paper_grid not in PAPER_GRIDS:
        raise InputError(f"unknown paper grid unit {paper_grid!r}; valid: {', '.join(PAPER_GRIDS)}")


def _seed_ids(seeds, n: int) -> np.ndarray:
    """Each point's seed as 0..k-1 (all 0 when no seeds are given)."""
    sid = np.zeros(n, int) if seeds is None else np.unique(np.asarray(seeds), return_inverse=True)[1].ravel()
    if sid.size != n:
        raise InputError(f"seeds has {sid.size} labels for {n} points")
    return sid


@dataclass
class _Window:
    """The fit window over all points: [lo, hi], how lo was chosen, and the masks."""

    lo: float
    hi: float
    rule: str  # "auto" (read from the curve's shape) or "given"
    positive: np.ndarray  # compute > 0 and <= hi
    inwin: np.ndarray  # positive and >= lo
    skipped: int  # positive points below lo


def _window(c: np.ndarray, y: np.ndarray, r0: float, min_compute: float | None,
            max_compute: float | None, r0_hi: float | None = None) -> _Window:
    """The window, refused when it holds fewer than MIN_POINTS points."""
    hi = np.inf if max_compute is None else float(max_compute)
    positive = (c > 0) & (c <= hi)
    lo = (_auto_start(c[positive], y[positive], r0, r0_hi) if min_compute is None
          else float(min_compute))
    inwin = positive & (c >= lo)
    win = _Window(lo=lo, hi=hi, rule="auto" if min_compute is None else "given", positive=positive,
                  inwin=inwin, skipped=int(np.sum(positive & (c < lo))))
    n = int(inwin.sum())
    if n < MIN_POINTS:
        raise FitError(f"only {count(n, 'point')} with compute in [{lo:.4g}, {hi:.4g}]; "
                       f"need at least {MIN_POINTS} (widen --min-compute/--max-compute)",
                       cause="too short")
    return win


@dataclass
class _Points:
    """The points the sigmoid is fit to: log compute, score, seed id (binned when asked)."""

    x: np.ndarray
    y: np.ndarray
    sid: np.ndarray
    notes: list[str]  # warnings about the data itself
    binned_from: int | None  # points in the window before binning, None when not binned


def _window_points(c: np.ndarray, y: np.ndarray, sid: np.ndarray, win: _Window,
                   bins: int | None) -> _Points:
    """The window's points in log compute, binned per seed when `bins` asks for fewer."""
    x, yw, sw = np.log(c[win.inwin]), y[win.inwin], sid[win.inwin]
    notes = duplicate_warning(c[win.inwin], sw)
    binned_from = None
    if bins is not None and np.bincount(sw).max() > bins:
        binned_from = x.size
        x, yw, sw = bin_series(x, yw, sw, bins)
    return _Points(x=x, y=yw, sid=sw, notes=notes, binned_from=binned_from)


def _check_rising(x: np.ndarray, yw: np.ndarray, c: np.ndarray, y: np.ndarray,
                  win: _Window) -> None:
    """Refuse a window without a range of compute, or whose score does not rise with it."""
    if np.ptp(x) <= 0:
        raise FitError("all points in the window have the same compute; need a range of compute")
    rho = stats.spearmanr(x, yw).statistic if np.ptp(yw) > 0 else 0.0
    if not np.isfinite(rho) or rho <= 0:
        raise FitError(f"score is flat or decreasing with compute in the window (Spearman "
                       f"rho {rho:.2f}); the sigmoid needs a rising curve"
                       + earlier_rise_hint(c, y, win.positive, win.lo, win.skipped))


def _check_point_fit(theta, sse: float, grid: dict | None, r0: float, x: np.ndarray,
                     yw: np.ndarray, c: np.ndarray, y: np.ndarray, win: _Window,
                     max_compute: float | None) -> None:
    """Refuse a point fit that did not converge, does not rise above R0, was chosen by the
    paper grid's edge, or does not pin A and C_mid; each says the cause and what helps."""
    if theta is None or not np.isfinite(sse):
        raise FitError("the fit did not converge")
    A = float(theta[0])
    if A <= r0 + 1e-6:
        raise FitError(f"fitted asymptote A={A:.3f} is not above the starting score R0={r0:.3f}: "
                       "flat or decreasing curve")
    if grid is not None and grid["edge"]:
        raise FitError("paper grid: the best fit is on the edge of the grid even after extending "
                       f"it ({'; '.join(grid['edge'])}), so the grid, not the data, chose it; "
                       "--method default reports such fits with bound warnings")
    why = unidentified(theta, x, yw)
    if why:
        raise FitError(f"A and C_mid are not identified ({why}): "
                       + unidentified_help(c, y, win.positive, win.lo, win.skipped, max_compute, r0),
                       cause="unidentified")


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
        _attach_intervals(out, x, yw, sw, theta, fit.R0, n_boot, np.random.default_rng(0), fix_a=True)
    return out


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
        raise InputError(f"compute has {count(int(np.sum(~np.isfinite(c))), 'NaN/inf value')}; "
                         "all compute values must be finite numbers >= 0")
    if not np.all(np.isfinite(y)):
        raise InputError(f"score has {count(int(np.sum(~np.isfinite(y))), 'NaN/inf value')}; "
                         "all scores must be finite numbers in [0, 1]")
    if np.any(c < 0):
        raise InputError("compute has negative values; compute must be >= 0")
    if np.any((y < 0) | (y > 1)):
        raise InputError(f"score has values outside [0, 1] (min {y.min():.4g}, max {y.max():.4g}); "
                         "the sigmoid models a pass rate in [0, 1]")
    return c, y


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
    sid = _seed_ids(seeds, c.size)
    r0, _ = _measured_r0(c, y, sid)
    r0_hi = None if start_measured(c, sid) else start_bound(c, y, sid)
    hi = np.inf if max_compute is None else float(max_compute)
    positive = (c > 0) & (c <= hi)
    if not positive.any():
        return None
    lo = _auto_start(c[positive], y[positive], r0, r0_hi)
    return lo if lo > c[positive].min() else None


def _auto_start(c: np.ndarray, y: np.ndarray, r0: float, r0_hi: float | None = None) -> float:
    """`ablate.analysis.window.auto_min_compute` with the default point fit, all candidate
    windows fit in one batched LM call (a window is a 0/1 weight on the points) from shared starts (the
    grid's best on every point): ~10 ms per 100-point curve instead of one grid search each.
    `r0_hi` not None: the start is not measured, so each window's fit fits R0 too (in
    [0, r0_hi]): a late first evaluation is not an early phase off the curve."""
    if c.size == 0:
        return 0.0
    x_all = np.log(c)
    fit_r0 = r0_hi is not None
    th0 = lm.r0_starts(x_all, y, r0_hi) if fit_r0 else lm.starts(x_all, y, r0)
    r0_arg = r0_hi if fit_r0 else r0

    def fits_of(los: list[float]) -> list[tuple[float, bool]]:
        S, L = len(th0), len(los)
        W = np.repeat(np.array([(c >= lo).astype(float) for lo in los]), S, axis=0)
        th, sse = lm.solve(x_all, np.broadcast_to(y, W.shape), W, np.tile(th0, (L, 1)),
                           np.full(S * L, r0_arg), fit_r0=fit_r0)
        out = []
        for j, lo in enumerate(los):
            m = c >= lo
            i = j * S + int(np.argmin(sse[j * S:(j + 1) * S]))
            x, yy = x_all[m], y[m]
            rising = m.sum() >= 4 and np.ptp(yy) > 0 and stats.spearmanr(x, yy).statistic > 0
            r0_i = th[i, 3] if fit_r0 else r0
            ok = bool(rising and th[i, 0] > r0_i + 1e-6 and unidentified(th[i, :3], x, yy) is None)
            out.append((float(sse[i]) if m.sum() >= 4 else np.inf, ok))
        return out

    return auto_min_compute(c, fits_of, MIN_POINTS)[0]
