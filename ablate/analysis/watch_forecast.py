"""The forecast `ablate watch` holds a run to: when it is frozen, and the band it draws.

When (`freeze_index`): at the first evaluation n where the run's sigmoid fit is identified (the
fit stands and `fit_trust.assess` does not call A unidentified or at its bound) *and* its
ceiling has held over the last doubling of compute (STABLE): the fit on the evaluations up to
c[n] / STABLE was identified too and its A's 95% interval holds today's A. Why the second
test: a two-phase rise (a fast early gain, warm-up or format learning, then the slower RL rise)
fits an identified sigmoid at its first bend, and a forecast frozen there (issue 41: the
quickstart froze at ~2% of its run, A 0.65 where the runs end at 0.79-0.88) calls every later
evaluation "ahead". A ceiling that is really pinned does not move when the run spends twice
as much. `--from C` (rule "given") freezes on the evaluations up to C, as the user chose.

The band (`Forecast`) is the score an *evaluation* of this run may read at compute C:
  * `intervals.score_draws` of the frozen fit: the parameters' uncertainty, the run's AR(1)
    drift past the window, and half of the draws taking the plateau explanation (nothing gained
    after the window's end, issue 24): what keeps a healthy run that saturates early from
    raising alarms: its lower edge sits near the window's last level;
  * plus the white evaluation noise of one evaluation, drawn per draw from the same REML
    posterior (`noise.reml_posterior`) the intervals use.
`lo_w` is the lower edge of the same band for the *mean of W evaluations* (white noise / sqrt(W),
drift and curve as they are): a slow sag hides inside the one-evaluation band (its lower edge is
the plateau level less ~2.6 noise sd) but not inside this one (issue 41: 27% of sags were caught
by the one-evaluation band alone).
The band is stored on a log-spaced compute grid (GRID_POINTS points from the freeze to past the
budget) and read by interpolation in log compute (`band_at`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ablate.analysis import levenberg_marquardt as lm
from ablate.analysis.fit import Fit, FitError, MIN_POINTS, predictive_draws
from ablate.analysis.fit_trust import MIN_TRUSTED_POINTS, assess
from ablate.analysis.fitters import fit_sigmoid
from ablate.analysis.noise import reml_posterior

N_DRAWS = 1000  # draws behind the frozen band
# draws behind the freeze scan's identification check (the A interval's width and bound): a
# 95% interval's ends move by ~0.005 between 200 and 1,000 draws, and the scan fits every
# prefix, so the band alone gets the full N_DRAWS
SCAN_DRAWS = 200
GRID_POINTS = 200  # log-spaced computes the band is stored at
STABLE = 1.5  # the ceiling must hold over this factor of compute before it is frozen
W = 6  # evaluations averaged by the sag test (`lo_w`)
# the sag test's band: a mean of W evaluations has little white noise left, so its edge at 95%
# sits ~0.02 under the plateau; at the one-evaluation band's 99% half of the sags of >= 0.05 in
# benchmarks/bench_watch.py went unflagged (RESULTS.md "Watching a run", issue 41)
SAG_LEVEL = 0.95


@dataclass
class Forecast:
    """A frozen forecast: the fit's parameters and its band on a compute grid."""

    frozen_at: float  # largest compute of the points the frozen fit used
    n_points: int  # evaluations (rows) up to the freeze
    rule: str  # "identified" (first stable identified fit), "given" (--from), "renewed"
    level: float
    A: float
    B: float
    C_mid: float
    R0: float
    grid: list[float]  # computes, increasing (log-spaced)
    lo: list[float]
    mid: list[float]
    hi: list[float]
    lo_w: list[float]  # lower edge of the SAG_LEVEL band of a mean of `w` evaluations
    w: int = W
    A_ci: Optional[list[float]] = None

    def band(self, compute) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, median, hi) at `compute`, interpolated in log compute; NaN outside the grid."""
        return band_at(self.as_dict(), compute)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def band_at(forecast: dict, compute, keys=("lo", "mid", "hi")) -> list[np.ndarray]:
    """The forecast's `keys` at `compute`, interpolated in log compute; NaN outside the grid."""
    c = np.atleast_1d(np.asarray(compute, float))
    g = np.log(np.asarray(forecast["grid"], float))
    with np.errstate(divide="ignore"):
        lc = np.log(np.maximum(c, 1e-300))
    inside = (lc >= g[0] - 1e-12) & (lc <= g[-1] + 1e-12)
    return [np.where(inside, np.interp(lc, g, np.asarray(forecast[k], float)), np.nan)
            for k in keys]


def fit_quiet(c: np.ndarray, y: np.ndarray, *, intervals: bool, n_boot: int = N_DRAWS,
              min_compute: Optional[float] = None) -> Fit:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_sigmoid(c, y, intervals=intervals, n_boot=n_boot, random_state=0,
                           min_compute=min_compute)


def identified(fit: Fit) -> bool:
    verdict = assess(fit)[0]
    return not (verdict.startswith("not bending") or verdict == "A at bound")


class _Scan:
    """Fits of prefixes of one curve, each computed once: (fit or None, why not); the fit is
    one whose ceiling is identified (`identified`), else None."""

    def __init__(self, c: np.ndarray, y: np.ndarray) -> None:
        self.c, self.y, self.got = c, y, {}

    def __call__(self, n: int) -> tuple[Optional[Fit], str]:
        if n not in self.got:
            self.got[n] = self._fit(n)
        return self.got[n]

    def _fit(self, n: int) -> tuple[Optional[Fit], str]:
        c, y = self.c[:n], self.y[:n]
        if n < max(MIN_TRUSTED_POINTS, MIN_POINTS):
            return None, "too few evaluations"
        try:
            pf = fit_quiet(c, y, intervals=False)
        except FitError as e:
            return None, str(e)
        if pf.C_mid > c[-1]:
            return None, f"C_mid {pf.C_mid:.3g} beyond the last compute: not bending yet"
        # the point fit's window (its start read from the curve's shape) given back: the
        # same window without searching for it again
        f = fit_quiet(c, y, intervals=True, n_boot=SCAN_DRAWS, min_compute=pf.min_compute)
        return (f, "") if identified(f) else (None, assess(f)[1])


def _holds(earlier: Fit, later: Fit) -> bool:
    lo, hi = earlier.ci.get("A", (math.nan, math.nan))
    return bool(lo <= later.A <= hi)


@dataclass
class Freeze:
    """What the scan found: the frozen fit on the first n evaluations (None: not yet), and
    the first identified fit before it (`first`, `n_first`): a provisional forecast that
    departures are held to while the ceiling is not yet held (a collapse before the freeze)."""

    n: Optional[int]
    fit: Optional[Fit]
    why: str
    n_first: Optional[int] = None
    first: Optional[Fit] = None
    scan: Optional["_Scan"] = None  # the prefix fits it made: a provisional renewal reuses them


def freeze_index(c: np.ndarray, y: np.ndarray, from_compute: Optional[float] = None
                 ) -> tuple[Optional[int], Optional[Fit], str]:
    """(n, fit, why): the frozen fit on the first n evaluations, or (None, None, why not)."""
    got = scan_freeze(c, y, from_compute)
    return got.n, got.fit, got.why


def scan_freeze(c: np.ndarray, y: np.ndarray, from_compute: Optional[float] = None) -> Freeze:
    """Scan prefixes in order for the freeze (see the module docstring for the rule). With
    `from_compute`, the prefix of evaluations with compute <= it, which must give a fit that
    stands (identified or not: the user chose it)."""
    if from_compute is not None:
        n = int(np.sum(c <= from_compute))
        try:
            return Freeze(n, fit_quiet(c[:n], y[:n], intervals=True), "given")
        except FitError as e:
            return Freeze(None, None, f"--from {from_compute:g}: {e}")
    scan = _Scan(c, y)
    out = Freeze(None, None, "too few evaluations", scan=scan)
    for n in range(max(MIN_TRUSTED_POINTS, MIN_POINTS), c.size + 1):
        f, why = scan(n)
        if f is None:
            out.why = why
            continue
        if out.first is None:
            out.n_first, out.first = n, f
        h = int(np.sum(c[:n] <= c[n - 1] / STABLE))
        g = scan(h)[0] if h >= MIN_TRUSTED_POINTS else None
        if g is not None and _holds(g, f):
            out.n, out.fit = n, fit_quiet(c[:n], y[:n], intervals=True, min_compute=f.min_compute)
            out.why = "identified"
            return out
        out.why = (f"A {f.A:.3f} identified at compute {c[n - 1]:.3g}, not yet held over "
                   f"{STABLE:g}x its compute" + ("" if g is None else
                                                f" (A {g.A:.3f} at {c[h - 1]:.3g})"))
    return out


def white_draws(fit: Fit, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-draw white evaluation-noise sd from the REML posterior of the fit's residuals."""
    x, yw, sid = fit.fit_points
    theta = np.array([fit.A, math.log(fit.B), math.log(fit.C_mid)])
    f, J = lm.model(x, theta[None, :], np.array([fit.R0]))
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    noise = reml_posterior(J[0], yw - f[0], series, np.array([0, 1, 2]), n, rng)
    return np.sqrt(noise[:, 2])


def one_eval_band(fit: Fit, compute, level: float, w: int = 1) -> tuple[np.ndarray, ...]:
    """(lo, median, hi) of one evaluation (w = 1) or of a mean of w evaluations at `compute`:
    the fit's predictive draws plus white noise / sqrt(w)."""
    grid = np.atleast_1d(np.asarray(compute, float))
    rng = np.random.default_rng(12345)
    draws = np.asarray(predictive_draws(fit, grid), float).reshape(-1, grid.size)
    sd = white_draws(fit, draws.shape[0], rng) / math.sqrt(w)
    draws = np.clip(draws + sd[:, None] * rng.standard_normal(draws.shape), 0.0, 1.0)
    a = (1 - level) / 2
    return tuple(np.nanquantile(draws, [a, 0.5, 1 - a], axis=0))


def make_forecast(fit: Fit, n: int, rule: str, level: float, c_end: float) -> Forecast:
    """The frozen fit's band, on a log grid from its last compute to c_end."""
    c0 = float(math.exp(fit.window_end()))
    grid = np.geomspace(c0, max(c_end, c0 * 1.0001), GRID_POINTS)
    lo, mid, hi = one_eval_band(fit, grid, level)
    lo_w = one_eval_band(fit, grid, SAG_LEVEL, W)[0]
    return Forecast(frozen_at=c0, n_points=n, rule=rule, level=level, A=fit.A, B=fit.B,
                    C_mid=fit.C_mid, R0=fit.R0, grid=grid.tolist(), lo=lo.tolist(),
                    mid=mid.tolist(), hi=hi.tolist(), lo_w=lo_w.tolist(), w=W,
                    A_ci=[float(v) for v in fit.ci.get("A", (math.nan, math.nan))])


def needs_more(c: np.ndarray, y: np.ndarray) -> int:
    """At least how many more evaluations before a forecast can exist: up to the fewest points
    a trusted fit takes, else (a rising curve not bent yet) to reach the point fit's C_mid at
    the current spacing, else (bent, not yet held) to STABLE x the latest compute, else one."""
    if c.size < MIN_TRUSTED_POINTS:
        return MIN_TRUSTED_POINTS - c.size
    pos = c > 0
    step = float(np.mean(np.diff(c[-min(c.size, 5):]))) if c.size > 1 else 0.0
    if pos.sum() >= 3:
        theta, _ = lm.best_fit(np.log(c[pos]), y[pos], float(y[np.argmin(c)]))
        if theta is not None and np.isfinite(theta[2]):
            cm = math.exp(float(theta[2]))
            if cm > c[-1] and step > 0 and math.isfinite(cm):
                return int(min(max(1, math.ceil((cm - c[-1]) / step)), 10**6))
    if step > 0 and c[-1] > 0:
        return int(min(max(1, math.ceil((STABLE - 1) * c[-1] / step)), 10**6))
    return 1


def falling(c: np.ndarray, y: np.ndarray) -> bool:
    """A curve of enough evaluations whose score does not rise with compute: no evaluation to
    come will make its fit identified, so "needs N more" would be a false promise."""
    if c.size < MIN_TRUSTED_POINTS or np.ptp(y) == 0:
        return c.size >= MIN_TRUSTED_POINTS
    from scipy import stats

    rho = stats.spearmanr(c, y).statistic
    return not (np.isfinite(rho) and rho > 0)
