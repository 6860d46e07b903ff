"""Hold a running curve to its forecast: on track, ahead, behind or departed (issue 33).

The forecast is frozen once, at the first evaluation where the run's sigmoid fit is identified
(the fit stands and `fit_trust.assess` does not call A unidentified or at its bound), or at a
compute the user names (`from_compute`). Every later evaluation is held against the frozen
forecast's predictive band at its compute. Freezing matters: a forecast refit on every new
point bends toward a collapse as it happens and never sees it.

The band (`Forecast`) is the score an *evaluation* of this run may read at compute C:
  * `intervals.score_draws` of the frozen fit: the parameters' uncertainty, the run's AR(1)
    drift past the window, and half of the draws taking the plateau explanation (nothing gained
    after the window's end, issue 24). The plateau half is what keeps a healthy run that
    saturates early from raising alarms: its lower edge sits near the window's last level;
  * plus the white evaluation noise of one evaluation, drawn per draw from the same REML
    posterior (`noise.reml_posterior`) the intervals use: a single evaluation scatters around
    the run's own curve by that much, and without it every noisy eval set would alarm.
The band is stored on a log-spaced compute grid (`GRID_POINTS` points from the freeze to past the
budget) and read by interpolation in log compute, so `ablate watch`, `ablate status` and the
trainer's trackers (which read the grid from the run dir's forecast.json without importing
ablate) all hold a point against the same numbers.

Verdicts (one per run, `judge`), from the evaluations after the freeze:
  departed   k consecutive evaluations below the band (`departed_at`: the compute of the first
             of them). Sticky: a run that fell off its curve once is reported so even if it comes
             back (`returned` says so): a payer wants to know of the collapse.
  behind     the latest evaluation is below the band, fewer than k in a row so far
  ahead      the latest evaluation is above the band (better than forecast is not a departure)
  on track   the latest evaluation is inside the band (or none is judged yet)
  waiting    no forecast yet; `needs` says how many more evaluations it takes at least
Defaults K = 3, LEVEL = 0.99: chosen on benchmarks/bench_watch.py (RESULTS.md "Watching a run").
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ablate.analysis import levenberg_marquardt as lm
from ablate.analysis.fit import Fit, FitError, MIN_POINTS, predictive_draws, predictive_interval
from ablate.analysis.fit_trust import MIN_TRUSTED_POINTS, assess
from ablate.analysis.fitters import fit_sigmoid
from ablate.analysis.noise import reml_posterior
from ablate.errors import InputError

K = 3  # consecutive evaluations below the band that make a departure
LEVEL = 0.99  # the band's central probability
N_DRAWS = 1000  # draws behind the frozen band
# draws behind the freeze scan's identification check (the A interval's width and bound): a
# 95% interval's ends move by ~0.005 between 200 and 1,000 draws, and the scan fits every
# prefix, so the band alone gets the full N_DRAWS
SCAN_DRAWS = 200
GRID_POINTS = 200  # log-spaced computes the band is stored at
TOL = 0.005  # "scaling stops paying": where the current fit is within TOL of its ceiling A
VERDICTS = ("on track", "ahead", "behind", "departed", "waiting")


@dataclass
class Forecast:
    """The frozen forecast: the fit's parameters and its band on a compute grid."""

    frozen_at: float  # largest compute of the points the frozen fit used
    n_points: int  # evaluations (rows) up to the freeze
    rule: str  # "identified" (first identified fit) or "given" (--from)
    level: float
    A: float
    B: float
    C_mid: float
    R0: float
    grid: list[float]  # computes, increasing (log-spaced)
    lo: list[float]
    mid: list[float]
    hi: list[float]

    def band(self, compute) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, median, hi) at `compute`, interpolated in log compute; NaN outside the grid."""
        return band_at(self.as_dict(), compute)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def band_at(forecast: dict, compute) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`Forecast.band` on a forecast's JSON dict (what forecast.json holds). The same
    interpolation as `trainer.rundir.forecast_band` (the trainer cannot import this)."""
    c = np.atleast_1d(np.asarray(compute, float))
    g = np.log(np.asarray(forecast["grid"], float))
    with np.errstate(divide="ignore"):
        lc = np.log(np.maximum(c, 1e-300))
    inside = (lc >= g[0] - 1e-12) & (lc <= g[-1] + 1e-12)
    out = []
    for k in ("lo", "mid", "hi"):
        v = np.interp(lc, g, np.asarray(forecast[k], float))
        out.append(np.where(inside, v, np.nan))
    return out[0], out[1], out[2]


@dataclass
class Point:
    """One evaluation after the freeze, against the band."""

    compute: float
    score: float
    lo: float
    mid: float
    hi: float
    side: str  # "in", "above", "below", "past" (beyond the band's grid: not judged)


@dataclass
class Judgement:
    """One run's verdict (the `--json` object of `ablate watch`, see `as_json`)."""

    run: str
    variant: str
    seed: int
    verdict: str
    reason: str
    evaluations: int
    last_compute: Optional[float]
    last_score: Optional[float]
    k: int
    level: float
    forecast: Optional[Forecast] = None
    points: list[Point] = field(default_factory=list)
    departed_at: Optional[float] = None  # compute of the first of the k evaluations below
    departed_eval: Optional[int] = None  # 0-based index (in the run's evaluations) of that one
    flagged_eval: Optional[int] = None  # index of the k-th: when the departure was known
    returned: bool = False  # back inside the band after departing
    needs: Optional[int] = None  # waiting: at least this many more evaluations
    budget: Optional[float] = None
    budget_rule: Optional[str] = None
    at_budget: Optional[dict] = None  # today's fit: {"score", "lo", "hi"} at the budget
    stops_paying: Optional[float] = None  # today's fit: compute within TOL of its A

    def as_json(self) -> dict[str, Any]:
        """One documented object per run (README "Watching a long run")."""
        f = self.forecast
        return {
            "run": self.run, "variant": self.variant, "seed": self.seed,
            "verdict": self.verdict, "reason": self.reason,
            "evaluations": self.evaluations, "last_compute": self.last_compute,
            "last_score": self.last_score, "k": self.k, "level": self.level,
            "forecast": None if f is None else {
                "frozen_at": f.frozen_at, "n_points": f.n_points, "rule": f.rule,
                "A": f.A, "B": f.B, "C_mid": f.C_mid, "R0": f.R0},
            "judged": sum(p.side != "past" for p in self.points),
            "outside": sum(p.side in ("above", "below") for p in self.points),
            "last_band": None if not self.points else [self.points[-1].lo, self.points[-1].hi],
            "departed_at": self.departed_at, "returned": self.returned, "needs": self.needs,
            "budget": self.budget, "budget_rule": self.budget_rule,
            "at_budget": self.at_budget, "stops_paying": self.stops_paying,
        }


def _fit(c: np.ndarray, y: np.ndarray, *, intervals: bool, n_boot: int = N_DRAWS,
         min_compute: Optional[float] = None) -> Fit:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_sigmoid(c, y, intervals=intervals, n_boot=n_boot, random_state=0,
                           min_compute=min_compute)


def _identified(fit: Fit) -> bool:
    verdict = assess(fit)[0]
    return not (verdict.startswith("not bending") or verdict == "A at bound")


def freeze_index(c: np.ndarray, y: np.ndarray, from_compute: Optional[float] = None
                 ) -> tuple[Optional[int], Optional[Fit], str]:
    """(n, fit, why): the frozen fit on the first n evaluations, or (None, None, why not).

    Scans prefixes in order; a cheap point fit first (refused or C_mid beyond the data: not
    identified), the intervals only where it stands. With `from_compute`, the prefix of
    evaluations with compute <= it, which must give a fit that stands (identified or not:
    the user chose it)."""
    if from_compute is not None:
        n = int(np.sum(c <= from_compute))
        try:
            return n, _fit(c[:n], y[:n], intervals=True), "given"
        except FitError as e:
            return None, None, f"--from {from_compute:g}: {e}"
    last = "too few evaluations"
    for n in range(max(MIN_TRUSTED_POINTS, MIN_POINTS), c.size + 1):
        try:
            pf = _fit(c[:n], y[:n], intervals=False)
        except FitError as e:
            last = str(e)
            continue
        if pf.C_mid > c[n - 1]:
            last = f"C_mid {pf.C_mid:.3g} beyond the last compute: not bending yet"
            continue
        # the point fit's window (its start read from the curve's shape) given back: the same
        # window without searching for it again
        f = _fit(c[:n], y[:n], intervals=True, n_boot=SCAN_DRAWS, min_compute=pf.min_compute)
        if _identified(f):
            return n, _fit(c[:n], y[:n], intervals=True, min_compute=pf.min_compute), "identified"
        last = assess(f)[1]
    return None, None, last


def _white_draws(fit: Fit, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-draw white evaluation-noise sd from the REML posterior of the frozen fit's residuals."""
    x, yw, sid = fit.fit_points
    theta = np.array([fit.A, math.log(fit.B), math.log(fit.C_mid)])
    f, J = lm.model(x, theta[None, :], np.array([fit.R0]))
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    noise = reml_posterior(J[0], yw - f[0], series, np.array([0, 1, 2]), n, rng)
    return np.sqrt(noise[:, 2])


def make_forecast(fit: Fit, n: int, rule: str, level: float, c_end: float) -> Forecast:
    """The frozen fit's band for one evaluation, on a log grid from its last compute to c_end."""
    c0 = float(math.exp(fit.window_end()))
    grid = np.geomspace(c0, max(c_end, c0 * 1.0001), GRID_POINTS)
    rng = np.random.default_rng(12345)
    draws = np.asarray(predictive_draws(fit, grid), float)  # (S, m)
    sd = _white_draws(fit, draws.shape[0], rng)
    draws = np.clip(draws + sd[:, None] * rng.standard_normal(draws.shape), 0.0, 1.0)
    a = (1 - level) / 2
    lo, mid, hi = np.nanquantile(draws, [a, 0.5, 1 - a], axis=0)
    return Forecast(frozen_at=c0, n_points=n, rule=rule, level=level, A=fit.A, B=fit.B,
                    C_mid=fit.C_mid, R0=fit.R0, grid=grid.tolist(), lo=lo.tolist(),
                    mid=mid.tolist(), hi=hi.tolist())


def needs_more(c: np.ndarray, y: np.ndarray) -> int:
    """At least how many more evaluations before a forecast can exist: up to the fewest points
    a trusted fit takes, else (a rising curve not bent yet) to reach the point fit's C_mid at
    the current spacing, else one."""
    if c.size < MIN_TRUSTED_POINTS:
        return MIN_TRUSTED_POINTS - c.size
    pos = c > 0
    if pos.sum() >= 3:
        theta, _ = lm.best_fit(np.log(c[pos]), y[pos], float(y[np.argmin(c)]))
        if theta is not None and np.isfinite(theta[2]):
            cm = math.exp(float(theta[2]))
            step = float(np.mean(np.diff(c[-min(c.size, 5):])))
            if cm > c[-1] and step > 0 and math.isfinite(cm):
                return int(min(max(1, math.ceil((cm - c[-1]) / step)), 10**6))
    return 1


def falling(c: np.ndarray, y: np.ndarray) -> bool:
    """A curve of enough evaluations whose score does not rise with compute: no evaluation to
    come will make its fit identified, so "needs N more" would be a false promise."""
    if c.size < MIN_TRUSTED_POINTS or np.ptp(y) == 0:
        return c.size >= MIN_TRUSTED_POINTS
    from scipy import stats

    rho = stats.spearmanr(c, y).statistic
    return not (np.isfinite(rho) and rho > 0)


def judge_points(c: np.ndarray, y: np.ndarray, forecast: Forecast | dict, start: int, k: int
                 ) -> tuple[list[Point], Optional[int]]:
    """Each evaluation from index `start` on against the band; and the index of the first of k
    consecutive below (None when no departure)."""
    fd = forecast.as_dict() if isinstance(forecast, Forecast) else forecast
    lo, mid, hi = band_at(fd, c[start:]) if c.size > start else ([], [], [])
    pts, run, dep = [], 0, None
    for i in range(c.size - start):
        if not np.isfinite(lo[i]):
            side = "past"
        else:
            side = "below" if y[start + i] < lo[i] else "above" if y[start + i] > hi[i] else "in"
        pts.append(Point(float(c[start + i]), float(y[start + i]), float(lo[i]), float(mid[i]),
                         float(hi[i]), side))
        if side == "past":
            continue
        run = run + 1 if side == "below" else 0
        if run >= k and dep is None:
            dep = start + i - k + 1
    return pts, dep


def verdict_of(points: list[Point], dep: Optional[int], k: int) -> tuple[str, bool]:
    """(verdict, returned) from judged points (see the module docstring)."""
    judged = [p for p in points if p.side != "past"]
    if dep is not None:
        return "departed", bool(judged and judged[-1].side != "below")
    if not judged:
        return "on track", False
    side = judged[-1].side
    return {"below": "behind", "above": "ahead"}.get(side, "on track"), False


def today(c: np.ndarray, y: np.ndarray, budget: float) -> tuple[Optional[dict], Optional[float]]:
    """Today's fit on every evaluation so far: its interval at the budget and the compute where
    scaling stops paying (within TOL of its A); (None, None) when it cannot be fit."""
    try:
        f = _fit(c, y, intervals=True)
    except FitError:
        return None, None
    lo, hi = predictive_interval(f, budget)
    stop = f.compute_for(f.A - TOL) if f.A - TOL > f.R0 else 0.0
    return ({"score": float(f.predict(budget)), "lo": float(lo), "hi": float(hi)},
            float(stop) if math.isfinite(stop) else None)


def judge(run: str, variant: str, seed: int, compute, score, *, k: int = K, level: float = LEVEL,
          from_compute: Optional[float] = None, budget: Optional[float] = None,
          budget_rule: Optional[str] = None, frozen: Optional[dict] = None,
          with_today: bool = True) -> Judgement:
    """One run's verdict against its frozen forecast (see the module docstring).

    `frozen`: a forecast already frozen (forecast.json's "forecast" dict): evaluations are held
    against it as it is, without refitting (`ablate status`). Raises InputError on options out
    of range; a run that cannot be judged gets verdict "waiting" with the reason."""
    if k < 1:
        raise InputError(f"--k {k}: must be an integer >= 1")
    if not 0.5 <= level < 1:
        raise InputError(f"--level {level}: must be in [0.5, 1), e.g. 0.99")
    c = np.asarray(compute, float)
    y = np.asarray(score, float)
    order = np.argsort(c, kind="stable")
    c, y = c[order], y[order]
    j = Judgement(run, variant, seed, "waiting", "", int(c.size),
                  float(c[-1]) if c.size else None, float(y[-1]) if c.size else None, k, level)
    if budget is None:
        budget, budget_rule = (2 * float(c[-1]) if c.size and c[-1] > 0 else None,
                               "2x the latest compute (pass --budget)")
    j.budget, j.budget_rule = budget, budget_rule or "given"
    if frozen is not None:
        fc = Forecast(**frozen)
        n = int(np.sum(c <= fc.frozen_at))
    else:
        n, fit, why = freeze_index(c, y, from_compute) if c.size else (None, None, "no evaluations")
        if n is None:
            j.needs = needs_more(c, y) if from_compute is None and not falling(c, y) else None
            if j.needs is None and from_compute is None:
                why = ("the score is flat or falling with compute (Spearman rho <= 0): there "
                       "is no rising curve to forecast")
            j.reason = (f"no forecast yet: needs at least {j.needs} more evaluation(s) "
                        f"({why})" if j.needs else f"no forecast: {why}")
            return j
        c_end = max(budget or 0.0, 2 * float(c[-1]), 4 * float(c[n - 1]))
        fc = make_forecast(fit, n, "given" if from_compute is not None else "identified", level,
                           c_end)
    j.forecast = fc
    j.points, dep = judge_points(c, y, fc, n, k)
    j.verdict, j.returned = verdict_of(j.points, dep, k)
    if dep is not None:
        j.departed_at, j.departed_eval, j.flagged_eval = float(c[dep]), dep, dep + k - 1
    j.reason = _reason(j)
    if with_today and budget and j.verdict != "departed":  # a sigmoid through a collapse misleads
        j.at_budget, j.stops_paying = today(c, y, budget)
    return j


def _reason(j: Judgement) -> str:
    judged = [p for p in j.points if p.side != "past"]
    f = j.forecast
    if j.verdict == "departed":
        return (f"{j.k} evaluations in a row below the {j.level:.0%} band from compute "
                f"{j.departed_at:.4g}" + ("; back inside since" if j.returned else ""))
    if not judged:
        return f"forecast frozen at compute {f.frozen_at:.4g}; no evaluation after it yet"
    p = judged[-1]
    where = {"in": "inside", "above": "above", "below": "below"}[p.side]
    return (f"latest {p.score:.3f} {where} the {j.level:.0%} band [{p.lo:.3f}, {p.hi:.3f}] at "
            f"compute {p.compute:.4g}")
