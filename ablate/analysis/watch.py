"""Hold a running curve to its forecast: on track, ahead, behind or departed (issues 33, 41).

The forecast (ablate/analysis/watch_forecast.py: when it is frozen, the band it draws) is
frozen once its ceiling is identified and has held over a doubling of compute; every later
evaluation is held against the frozen band at its compute. Freezing matters: a forecast refit
on every new point bends toward a collapse as it happens and never sees it.

Evaluation by evaluation after the freeze (`walk`: what `ablate watch --follow` would have said
at each one, so one pass over a finished run gives the live verdicts):
  departed   k consecutive evaluations below the band (kind "collapse"), or the mean of the
             last W evaluations below the 95% band of such a mean (kind "sag": a slow decline that
             one evaluation's band hides). `departed_at`: the compute of the first of them.
             Sticky: a run that fell off its curve once is reported so even if it comes back
             (`returned` says so): a payer wants to know of the collapse.
  renewed    a run that leaves its band above for good (its latest k evaluations above it and
             most evaluations since the freeze outside it) gets a new forecast, frozen on every
             evaluation so far once that fit is identified; the first is kept for the record
             (`forecasts`), and the verdict's reason says so. Above for good means the freeze
             came too early (a two-phase rise), not that the run beats its curve.
Verdicts (one per run, `judge`), from the latest evaluation:
  departed   as above
  behind     the latest evaluation is below the band, fewer than k in a row so far, or below
             *today's* fit's band (the fit on every evaluation so far): a run sagging below its
             own current curve is never "ahead" of an old forecast
             or the run has fallen from its own peak (ablate/analysis/sag.py: the one rule
             compare, the report and status name a sag by): a collapse reads so whatever band
             the forecast drew
  ahead      the latest evaluation is above the band (better than forecast is not a departure)
  on track   the latest evaluation is inside the band (or none is judged yet)
  waiting    no forecast yet; `needs` says about how many more evaluations it takes
Defaults K = 3, LEVEL = 0.99: chosen on benchmarks/bench_watch.py (RESULTS.md "Watching a run").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import numpy as np

from ablate.analysis.fit import FitError, predictive_interval
from ablate.analysis.sag import Fall, fall_from_peak  # noqa: F401 - the one sag rule
from ablate.analysis.watch_forecast import (  # noqa: F401 - the watch API in one place
    N_DRAWS, SAG_LEVEL, SCAN_DRAWS, Forecast, Freeze, band_at, falling, fit_quiet, freeze_index,
    identified, make_forecast, needs_more, one_eval_band, scan_freeze)
from ablate.analysis.watch_forecast import _Scan
from ablate.errors import InputError
from ablate.number_text import compute, count, interval, number
from ablate.number_text import compute as _c_text  # where `judge`'s argument `compute` hides it

K = 3  # consecutive evaluations below the band that make a departure
LEVEL = 0.99  # the band's central probability
TOL = 0.005  # "scaling stops paying": where the current fit is within TOL of its ceiling A
RENEW_GROWTH = 1.1  # a failed renewal is tried again once compute has grown by this factor
# a provisional forecast (fit on the first evaluations whose ceiling is identified, before it
# held) is refit once the run has this factor of its compute: issue 51, a quickstart run held
# all its life to the band of its first 10 evaluations read "ahead 0.700 [0.607, 0.681]" after
# rising to 0.83 and falling back
OUTGROWN = 2.0
VERDICTS = ("on track", "ahead", "behind", "departed", "waiting")


@dataclass
class Point:
    """One evaluation after the freeze, against the band of the forecast in force then."""

    compute: float
    score: float
    lo: float
    mid: float
    hi: float
    side: str  # "in", "above", "below", "past" (beyond the band's grid: not judged)
    forecast: int = 0  # index in Judgement.forecasts of the forecast it was held to


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
    forecasts: list[Forecast] = field(default_factory=list)  # first, then each renewal
    points: list[Point] = field(default_factory=list)
    departed_at: Optional[float] = None  # compute of the first evaluation of the departure
    departed_eval: Optional[int] = None  # 0-based index (in the run's evaluations) of that one
    flagged_eval: Optional[int] = None  # index at which the departure was known
    departure: Optional[str] = None  # "collapse" (k below the band) or "sag" (W-mean below)
    returned: bool = False  # back inside the band after departing
    needs: Optional[int] = None  # waiting: about this many more evaluations
    budget: Optional[float] = None
    budget_rule: Optional[str] = None
    at_budget: Optional[dict] = None  # today's fit: {"score", "lo", "hi"} at the budget
    stops_paying: Optional[float] = None  # today's fit: compute within TOL of its A
    today_band: Optional[list[float]] = None  # today's fit: one evaluation's band, latest compute
    fall: Optional[Fall] = None  # fallen from its own peak (ablate.analysis.sag), any verdict

    @property
    def forecast(self) -> Optional[Forecast]:
        """The forecast in force (the latest renewal, else the first)."""
        return self.forecasts[-1] if self.forecasts else None

    def as_json(self) -> dict[str, Any]:
        """One documented object per run (docs/JSON.md "ablate watch")."""
        f = self.forecast
        return {
            "run": self.run, "variant": self.variant, "seed": self.seed,
            "verdict": self.verdict, "reason": self.reason,
            "evaluations": self.evaluations, "last_compute": self.last_compute,
            "last_score": self.last_score, "k": self.k, "level": self.level,
            "forecast": None if f is None else _summary(f),
            "first_forecast": None if f is None else _summary(self.forecasts[0]),
            "renewals": sum(g.rule == "renewed" for g in self.forecasts),
            "judged": sum(p.side != "past" for p in self.points),
            "outside": sum(p.side in ("above", "below") for p in self.points),
            "last_band": None if not self.points else [self.points[-1].lo, self.points[-1].hi],
            "today_band": self.today_band,
            "departed_at": self.departed_at, "departure": self.departure,
            "returned": self.returned, "needs": self.needs,
            "budget": self.budget, "budget_rule": self.budget_rule,
            "at_budget": self.at_budget, "stops_paying": self.stops_paying,
            "fell": None if self.fall is None else self.fall.as_json(),
        }


def _summary(f: Forecast) -> dict[str, Any]:
    return {"frozen_at": f.frozen_at, "n_points": f.n_points, "rule": f.rule, "A": f.A,
            "A_ci": f.A_ci, "B": f.B, "C_mid": f.C_mid, "R0": f.R0}


def _side(y: float, lo: float, hi: float) -> str:
    if not np.isfinite(lo):
        return "past"
    return "below" if y < lo else "above" if y > hi else "in"


@dataclass
class _Walk:
    """What `walk` found: the points, the forecasts (renewals appended), the departure."""

    points: list[Point]
    forecasts: list[Forecast]
    dep: Optional[int] = None  # index of the departure's first evaluation
    flagged: Optional[int] = None  # index at which it was known
    kind: Optional[str] = None
    why: str = ""  # a provisional walk: why the forecast is not frozen yet


def walk(c: np.ndarray, y: np.ndarray, forecasts: list[Forecast], start: int, k: int, *,
         renew: bool = False, c_end: Optional[float] = None,
         outgrow: Optional[Callable[[int], Optional[Forecast]]] = None) -> _Walk:
    """Each evaluation from index `start` on, in order, against the forecast in force then
    (see the module docstring: departures, and renewals when `renew`). `outgrow(n)`: a new
    provisional forecast on the first n evaluations (None: none identified there), asked for
    once the run has OUTGROWN x the compute the provisional forecast in force was fit on."""
    out = _Walk([], list(forecasts))
    since: list[str] = []  # sides of the judged points since the forecast in force was frozen
    below, tried, left = 0, 0.0, None  # left: the first evaluation above since then
    grown = OUTGROWN * out.forecasts[-1].frozen_at  # the next provisional renewal's compute
    for i in range(start, c.size):
        if (outgrow is not None and out.dep is None and out.forecasts[-1].rule == "provisional"
                and c[i] >= grown):  # outgrown: refit on every evaluation before this one
            new = outgrow(i)
            if new is not None:
                out.forecasts.append(new)
                since, below, left = [], 0, None
                grown = OUTGROWN * new.frozen_at
            else:
                grown = float(c[i]) * RENEW_GROWTH
        fd = out.forecasts[-1].as_dict()
        lo, mid, hi, lo_w = (float(v[0]) for v in band_at(fd, c[i], ("lo", "mid", "hi", "lo_w")))
        side = _side(float(y[i]), lo, hi)
        out.points.append(Point(float(c[i]), float(y[i]), lo, mid, hi, side,
                                len(out.forecasts) - 1))
        if side == "past":
            continue
        since.append(side)
        left = i if left is None and side == "above" else left
        below = below + 1 if side == "below" else 0
        if out.dep is None and below >= k:
            out.dep, out.flagged, out.kind = i - k + 1, i, "collapse"
        w = int(fd.get("w", 0))
        if out.dep is None and w and len(since) >= w:
            cw = c[i - w + 1:i + 1]
            edge = band_at(fd, float(np.exp(np.mean(np.log(np.maximum(cw, 1e-300))))),
                           ("lo_w",))[0][0]
            if float(np.mean(y[i - w + 1:i + 1])) < edge:  # began at its first one below
                low = np.flatnonzero(y[i - w + 1:i + 1] < band_at(fd, cw, ("lo_w",))[0])
                out.dep, out.flagged, out.kind = i - w + 1 + int(low[0] if low.size else 0), \
                    i, "sag"
        if (renew and out.dep is None and len(since) >= k and since[-k:] == ["above"] * k
                and sum(s != "in" for s in since) * 2 > len(since) and c[i] >= tried):
            new = _renewal(c[:i + 1], y[:i + 1], left, out.forecasts[-1],
                           c_end or 2 * float(c[-1]))
            tried = float(c[i]) * RENEW_GROWTH if new is None and i + 1 - left >= 10 else 0.0
            if new is not None:
                out.forecasts.append(new)
                since, below, left = [], 0, None
    return out


def _renewal(c: np.ndarray, y: np.ndarray, left: int, old: Forecast, c_end: float
             ) -> Optional[Forecast]:
    """A new forecast fit on the evaluations from `left` (where the run left its band) on, once
    there are enough of them for a trusted fit and the fit stands; else None. Identified or not:
    a band whose ceiling is open above still has the lower edge departures are held to (its
    rule stays "renewed"; its A_ci says how pinned it is)."""
    from ablate.analysis.fit_trust import MIN_TRUSTED_POINTS

    if c.size - left < MIN_TRUSTED_POINTS:
        return None
    try:
        f = fit_quiet(c, y, intervals=True, min_compute=float(c[left]))
    except FitError:
        return None
    return make_forecast(f, int(c.size), "renewed", old.level,
                         max(c_end, 2 * float(c[-1]), old.grid[-1]))


def judge_points(c: np.ndarray, y: np.ndarray, forecast: Forecast | dict, start: int, k: int
                 ) -> tuple[list[Point], Optional[int]]:
    """Each evaluation from index `start` on against one forecast (no renewal); and the index
    of the first evaluation of a departure (None when none). What the benchmark replays."""
    fc = Forecast(**forecast) if isinstance(forecast, dict) else forecast
    got = walk(c, y, [fc], start, k)
    return got.points, got.dep


def flagged_at(c: np.ndarray, y: np.ndarray, forecast: Forecast, start: int, k: int
               ) -> Optional[int]:
    """The index at which a departure from `forecast` is known (None: none)."""
    return walk(c, y, [forecast], start, k).flagged


def verdict_of(points: list[Point], dep: Optional[int], k: int) -> tuple[str, bool]:
    """(verdict, returned) from judged points (see the module docstring)."""
    judged = [p for p in points if p.side != "past"]
    if dep is not None:
        return "departed", bool(judged and judged[-1].side != "below")
    if not judged:
        return "on track", False
    side = judged[-1].side
    return {"below": "behind", "above": "ahead"}.get(side, "on track"), False


def today(c: np.ndarray, y: np.ndarray, budget: float, level: float = LEVEL
          ) -> tuple[Optional[dict], Optional[float], Optional[list[float]]]:
    """Today's fit on every evaluation so far: its interval at the budget, the compute where
    scaling stops paying (within TOL of its A), and one evaluation's band at the latest
    compute; (None, None, None) when it cannot be fit."""
    try:
        f = fit_quiet(c, y, intervals=True)
    except FitError:
        return None, None, None
    lo, hi = predictive_interval(f, budget)
    stop = f.compute_for(f.A - TOL) if f.A - TOL > f.R0 else 0.0
    blo, _, bhi = one_eval_band(f, float(c[-1]), level)
    return ({"score": float(f.predict(budget)), "lo": float(lo), "hi": float(hi)},
            float(stop) if math.isfinite(stop) else None, [float(blo[0]), float(bhi[0])])


def _check(k: int, level: float) -> None:
    if k < 1:
        raise InputError(f"--k {k}: must be an integer >= 1")
    if not 0.5 <= level < 1:
        raise InputError(f"--level {level}: must be in [0.5, 1), e.g. 0.99")


def judge(run: str, variant: str, seed: int, compute, score, *, k: int = K, level: float = LEVEL,
          from_compute: Optional[float] = None, budget: Optional[float] = None,
          budget_rule: Optional[str] = None, frozen: Optional[list[dict]] = None,
          renew: bool = False, with_today: bool = True) -> Judgement:
    """One run's verdict against its frozen forecast (see the module docstring).

    `frozen`: forecasts already frozen (the watch file's, first to latest): evaluations are
    held against the latest as it is, without refitting (`ablate status`), renewed only if
    `renew` (`ablate watch --follow`). Raises
    InputError on options out of range; a run that cannot be judged gets verdict "waiting"."""
    _check(k, level)
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
    c_end = max(budget or 0.0, 2 * float(c[-1]) if c.size else 0.0)
    if frozen:
        fcs = [Forecast(**d) for d in frozen]
        got = walk(c, y, fcs, int(np.sum(c <= fcs[-1].frozen_at)), k,
                   renew=renew and fcs[-1].rule != "provisional", c_end=c_end,
                   outgrow=_outgrow(c, _Scan(c, y), level, c_end))
        got.why = "the ceiling is not yet held"
    else:
        fz = scan_freeze(c, y, from_compute) if c.size else Freeze(None, None, "no evaluations")
        got = follow(c, y, fz, k, level, c_end, given=from_compute is not None)
        if got is None:
            _waiting(j, c, y, fz.why, from_compute)
            _fallen(j, c, y)
            return j
    j.forecasts, j.points = got.forecasts, got.points
    j.verdict, j.returned = verdict_of(j.points, got.dep, k)
    if got.dep is not None:
        j.departed_at, j.departed_eval, j.flagged_eval = float(c[got.dep]), got.dep, got.flagged
        j.departure = got.kind
    elif j.forecast.rule == "provisional":
        _waiting(j, c, y, got.why, from_compute)
        f = j.forecast
        if len(j.forecasts) > 1 and j.forecasts[0].rule == "provisional":
            j.reason += (f"; provisional forecast refit at compute {_c_text(f.frozen_at)} (A "
                         f"{f.A:.3f}, the first {j.forecasts[0].A:.3f}): the run outgrew it")
        _fallen(j, c, y)
        return j
    if with_today and j.verdict != "departed":  # a sigmoid through a collapse misleads
        j.at_budget, j.stops_paying, j.today_band = today(c, y, budget or 2 * float(c[-1]),
                                                          level)
        if j.today_band and j.verdict in ("ahead", "on track") and y[-1] < j.today_band[0]:
            j.verdict = "behind"
    j.reason = _reason(j)
    _fallen(j, c, y)
    return j


def _fallen(j: Judgement, c: np.ndarray, y: np.ndarray) -> None:
    """A run that fell from its own peak (ablate.analysis.sag, the rule compare names too) is
    behind, not ahead or on track or waiting; departed stays departed."""
    got = fall_from_peak(c, y)
    j.fall = got
    if got is None or j.verdict == "departed":
        return
    j.reason = f"{got.text()}; {j.reason}" if j.reason else got.text()
    j.verdict = "behind"


def follow(c: np.ndarray, y: np.ndarray, fz: Freeze, k: int, level: float, c_end: float,
           given: bool = False) -> Optional[_Walk]:
    """The evaluations after the freeze `fz` (`scan_freeze` of the same curve), walked. Before
    the freeze (the ceiling identified but not yet held), the evaluations after the first
    identified fit are held to that fit as a provisional forecast, refit on every evaluation
    so far each time the run outgrows it (OUTGROWN): a collapse there is a departure, not a
    wait. None when there is not even a provisional forecast."""
    pre = None
    if fz.first is not None and (fz.n is None or fz.n_first < fz.n):
        prov = make_forecast(fz.first, fz.n_first, "provisional", level,
                             max(c_end, 4 * float(c[fz.n_first - 1])))
        pre = walk(c[:fz.n or c.size], y[:fz.n or c.size], [prov], fz.n_first, k,
                   outgrow=_outgrow(c, fz.scan, level, c_end))
        pre.why = fz.why
        if fz.n is None or pre.dep is not None:
            return pre
    if fz.n is None:
        return None
    fc = make_forecast(fz.fit, fz.n, "given" if given else "identified", level,
                       max(c_end, 4 * float(c[fz.n - 1])))
    got = walk(c, y, [fc], fz.n, k, renew=True, c_end=c_end)
    if pre is not None:  # the provisional forecasts are kept for the record, first
        got.forecasts = pre.forecasts + got.forecasts
        shift = len(pre.forecasts)
        got.points = pre.points + [replace(p, forecast=p.forecast + shift) for p in got.points]
    return got


def _outgrow(c: np.ndarray, scan, level: float, c_end: float
             ) -> Callable[[int], Optional[Forecast]]:
    """`walk`'s provisional renewal: the identified fit on the first n evaluations (the freeze
    scan's, each prefix fit once), as a provisional forecast; None where it is not identified."""
    def new(n: int) -> Optional[Forecast]:
        f = scan(n)[0] if scan is not None else None
        return None if f is None else make_forecast(f, n, "provisional", level,
                                                    max(c_end, 4 * float(c[n - 1])))
    return new


def _waiting(j: Judgement, c: np.ndarray, y: np.ndarray, why: str,
             from_compute: Optional[float]) -> None:
    j.needs = needs_more(c, y) if from_compute is None and not falling(c, y) else None
    if j.needs is None and from_compute is None:
        why = ("the score is flat or falling with compute (Spearman rho <= 0): there "
               "is no rising curve to forecast")
    j.reason = (f"no forecast yet: needs about {count(j.needs, 'more evaluation')} ({why})"
                if j.needs else f"no forecast: {why}")


def _reason(j: Judgement) -> str:
    judged = [p for p in j.points if p.side != "past"]
    f = j.forecast
    first = next((g for g in j.forecasts if g.rule != "provisional"), f)
    renewed = (f"; re-forecast at compute {compute(f.frozen_at)} (A {f.A:.3f}): the run left "
               f"its first forecast (A {first.A:.3f}) above for good" if f.rule == "renewed" else
               "; provisional forecast (the ceiling is not yet held)" if f.rule == "provisional"
               else "")
    if j.verdict == "departed":
        what = (f"{j.k} evaluations in a row below the {j.level:.0%} band" if
                j.departure == "collapse" else
                f"the mean of {f.w} evaluations below the {SAG_LEVEL:.0%} band of such a mean "
                "(a sag)")
        return (f"{what} from compute {compute(j.departed_at)}"
                + ("; back inside since" if j.returned else "") + renewed)
    if not judged:
        return f"forecast frozen at compute {compute(f.frozen_at)}; no evaluation after it yet"
    p = judged[-1]
    if j.verdict == "behind" and p.side != "below" and j.today_band:
        lo, hi = j.today_band
        return (f"latest {number(p.score, (lo, hi))} below today's fit's {j.level:.0%} band "
                f"{interval(lo, hi)} (the forecast's band {interval(p.lo, p.hi)})" + renewed)
    where = {"in": "inside", "above": "above", "below": "below"}[p.side]
    return (f"latest {number(p.score, (p.lo, p.hi))} {where} the {j.level:.0%} band "
            f"{interval(p.lo, p.hi)} at compute {compute(p.compute)}" + renewed)
