"""The ScaleRL sigmoid and how we fit it, with honest 95% intervals.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

In log-compute x = log C and m = log C_mid this is a logistic, R = R0 + (A - R0) * expit(B (x - m)),
which is what the fitters work in: it makes the problem well scaled whatever the compute unit
(paper GPU-hours, FLOPs, or the ~1e-3 device-hours of a CPU proxy run).

R0 is *measured*, not fit: the starting reward, i.e. the mean score at the smallest compute of
each seed's curve (including points before the fit window and at compute 0). The paper's
procedure (scalerl.md: grid over A and C_mid, curve_fit for B) fits only A, C_mid and B, and a
fit window that skips the early phase carries almost no information about R0 anyway.

Two point estimators:
  "default"  variable projection + batched Levenberg-Marquardt, all in numpy: a vectorized grid
             over (B, C_mid) with A solved in closed form, then LM on (A, log B, log C_mid) from
             the best few distinct starts at once. Continuous, so its SSE is at most the paper grid's.
  "paper"    the paper's grid: A in {0.450, ..., 0.800} x 100 C_mid values linear in [100, 40000],
             B by scipy curve_fit per pair, lowest SSE kept. The C_mid grid's unit is an explicit
             choice (`paper_grid`): "relative" (default) places it where it sits relative to the
             paper's 16k-GPU-hour runs, i.e. [100, 40000] x max_compute / 16000, so it works on
             FLOPs, steps or CPU-proxy device-hours alike; "gpu-hours" uses it verbatim (for data
             in paper-scale GPU-hours). An optimum on the grid's edge is not an answer: the grid
             is extended on that side (A by 0.005 steps down to R0 or up to 1, C_mid by further
             spans) until the optimum is inside; if it is still on an edge that cannot move (A
             at 1, C_mid beyond 3 spans) the fit is refused. `Fit.grid` records the grid used.

Fit window: `min_compute` / `max_compute`. When no minimum is given, `ablate.analysis.window` reads the
start from the curve's shape: early points are kept unless they are off the sigmoid the later
points follow (an F-test of nested fits); the Fit records the window and what was skipped.

Intervals (95%, percentile, stored as `Fit.ci` and as draws in `Fit.samples`):
  * seeds:     a variant with >= SEED_MIN_RUNS seeds: fit each seed alone, and use the spread of
               those fits around the pooled fit, t-distributed with k-1 degrees of freedom (seeds
               are the honest replicate: they carry run-to-run drift that no bootstrap over one
               run's points can see).
  * bootstrap: otherwise a parametric residual bootstrap per seed series. Training-curve
               deviations are slow run drift (AR(1)) plus white evaluation noise. One run of
               ~100 evaluations pins that drift down poorly (its long-run variance is uncertain
               by a factor of several), so instead of trusting one estimate, each bootstrap
               sample draws its own noise model from the REML posterior of the residuals (the
               restricted likelihood knows the fit absorbed the drift that looks like the curve;
               flat prior over the drift share, flat-in-atanh prior over phi, 1/s on the scale),
               then 1000 noise draws are added to the fit and all are refit at once by the
               batched LM warm-started from the point fit; R0 is resampled too. An i.i.d., AR(1)
               sieve, or single-estimate drift + white bootstrap covered the truth only ~65-90%
               of the time on single runs with drift; this one ~0.95 (see benchmarks/RESULTS.md).
  Coverage on synthetic curves with known parameters is checked in benchmarks/bench_curves.py.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import stats
from scipy.special import expit

from ablate.errors import InputError
from ablate.analysis.noise import noise_draws as _noise_draws
from ablate.analysis.noise import reml_posterior as _reml_posterior
from ablate.analysis.window import auto_min_compute

MIN_POINTS = 5
SEED_MIN_RUNS = 3
N_BOOT = 1000
LEVEL = 0.95
PAPER_A_GRID = np.round(np.arange(0.450, 0.8000001, 0.005), 3)
PAPER_CMID_RANGE = (100.0, 40000.0)
PAPER_RUN_GPU_HOURS = 16000.0
PAPER_GRIDS = ("relative", "gpu-hours")

_B_MIN, _B_MAX = 0.02, 20.0
# C_mid may lie beyond the data (a curve that has not bent yet), but not absurdly far: past
# e^8 ~ 3000x the largest compute the asymptote is not identified by the data at all.
_M_BELOW, _M_ABOVE = 6.0, 8.0


class FitError(InputError):
    """A curve that cannot be fit (too few points, flat or decreasing, no convergence)."""


@dataclass
class Fit:
    """A fitted sigmoid with intervals. Parameters are floats; `ci` maps name -> (lo, hi)."""

    A: float
    B: float
    C_mid: float
    R0: float
    ci: dict[str, tuple[float, float]]
    r2: float
    n_points: int
    sse: float = float("nan")
    method: str = "default"
    interval_method: str = "none"  # "seeds" | "bootstrap" | "none"
    n_seeds: int = 1
    min_compute: float | None = None
    max_compute: float | None = None
    skipped: int = 0  # points below the window's minimum (early phase) left out of the fit
    window_rule: str = "given"  # "auto" (ablate.analysis.window chose the start) | "given"
    warnings: list[str] = field(default_factory=list)  # bounds / identifiability, in words
    grid: dict | None = None  # paper method: the (possibly extended) grid that was searched
    binned_from: int | None = None  # points in the window before `bins` averaged them
    samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    data: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    # what the sigmoid was fit to: log compute, score, seed label (the window, binned if asked)
    fit_points: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def predict(self, compute: np.ndarray | float) -> np.ndarray | float:
        """Score the fitted curve predicts at `compute` (same units as the fit)."""
        return sigmoid(compute, self.A, self.B, self.C_mid, self.R0)

    def compute_for(self, score: float) -> float:
        """Compute at which the fitted curve reaches `score`; inf if it never does."""
        return compute_for(score, self.A, self.B, self.C_mid, self.R0)

    def predict_interval(self, compute: float, level: float = LEVEL) -> tuple[float, float]:
        """Interval of the predicted score at `compute` from the parameter draws."""
        if not self.samples:
            v = float(self.predict(compute))
            return (v, v)
        s = self.samples
        pred = sigmoid(compute, s["A"], s["B"], s["C_mid"], s["R0"])
        return _pct(pred, level)

    def compute_for_interval(self, score: float, level: float = LEVEL) -> tuple[float, float]:
        """Interval of the compute needed for `score`; an end is inf where draws never reach it."""
        if not self.samples:
            v = self.compute_for(score)
            return (v, v)
        s = self.samples
        c = compute_for(score, s["A"], s["B"], s["C_mid"], s["R0"])
        return _pct(c, level)

    def as_dict(self) -> dict:
        """The DESIGN.md JSON object (without "variant")."""
        return {
            "A": self.A,
            "B": self.B,
            "C_mid": self.C_mid,
            "R0": self.R0,
            "A_ci": list(self.ci.get("A", (math.nan, math.nan))),
            "B_ci": list(self.ci.get("B", (math.nan, math.nan))),
            "C_mid_ci": list(self.ci.get("C_mid", (math.nan, math.nan))),
            "R0_ci": list(self.ci.get("R0", (math.nan, math.nan))),
            "r2": self.r2,
            "n_points": self.n_points,
            "window": [self.min_compute, self.window_max()],
            "window_rule": self.window_rule,
            "skipped": self.skipped,
            "method": self.method,
            "interval_method": self.interval_method,
            "n_seeds": self.n_seeds,
            "warnings": list(self.warnings),
            "grid": self.grid,
            "binned_from": self.binned_from,
        }

    def window_max(self) -> float | None:
        """The window's upper end: --max-compute if given, else the largest compute fit."""
        if self.max_compute is not None:
            return self.max_compute
        if self.data is None:
            return None
        c = self.data[0]
        return float(c[c >= (self.min_compute or 0)].max())


def sigmoid(compute, A, B, C_mid, R0):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B); broadcasts; R(0) = R0."""
    c = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        x = np.log(np.maximum(c, 1e-300))
        out = R0 + (A - R0) * expit(B * (x - np.log(C_mid)))
    out = np.where(c <= 0, R0 + 0 * out, out)
    return float(out) if np.ndim(out) == 0 else out


def compute_for(score, A, B, C_mid, R0):
    """Inverse of `sigmoid`: compute where R(C) first reaches `score`.

    0 where the curve starts at or above it (score <= R0); inf where it never gets there,
    including a draw whose A is at or below R0 (a flat or falling curve never rises to a score
    above its start; dividing by A - R0 < 0 would otherwise read as "reached at compute 0").
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        score, A, B, C_mid, R0 = np.broadcast_arrays(*(np.asarray(v, float)
                                                       for v in (score, A, B, C_mid, R0)))
        gain = A - R0
        s = np.where(gain > 0, (score - R0) / np.where(gain > 0, gain, 1.0), np.inf)
        inside = (s > 0) & (s < 1)
        ratio = np.where(inside, s, 0.5) / (1.0 - np.where(inside, s, 0.5))
        c = C_mid * ratio ** (1.0 / B)
        c = np.where(inside, c, np.where(score <= R0, 0.0, np.inf))
    return float(c) if np.ndim(c) == 0 else c


def _pct(v: np.ndarray, level: float) -> tuple[float, float]:
    a = (1 - level) / 2
    v = np.asarray(v, float)
    big = np.finfo(float).max
    # quantiles of draws that include inf (a target some draws never reach) without inf - inf
    q = np.nanquantile(np.clip(v, -big, big), [a, 1 - a], method="inverted_cdf")
    return tuple(float(np.inf if x >= big else -np.inf if x <= -big else x) for x in q)


# ---------------------------------------------------------------------------------------------
# Window


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


# ---------------------------------------------------------------------------------------------
# Batched Levenberg-Marquardt on theta = (A, log B, log C_mid), R0 fixed per problem.


def _model(x, theta, r0):
    """f and Jacobian for S problems. x (n,), theta (S,3), r0 (S,) -> f (S,n), J (S,n,3)."""
    s = _sig(x, theta)
    return r0[:, None] + (theta[:, 0:1] - r0[:, None]) * s, _jac(x, theta, r0, s)


def _sig(x, theta):
    """expit(B (x - log C_mid)) for S problems: (S, n)."""
    return expit(np.exp(theta[:, 1:2]) * (x[None, :] - theta[:, 2:3]))


def _jac(x, theta, r0, s):
    """d f / d (A, log B, log C_mid) from the problems' `_sig` values: (S, n, 3)."""
    B = np.exp(theta[:, 1:2])
    dsB = ((theta[:, 0:1] - r0[:, None]) * B) * s * (1 - s)
    J = np.empty(s.shape + (3,))
    J[:, :, 0] = s
    np.multiply(dsB, x[None, :] - theta[:, 2:3], out=J[:, :, 1])
    np.negative(dsB, out=J[:, :, 2])
    return J


def _clip(theta, mlo, mhi):
    theta[:, 0] = np.clip(theta[:, 0], 0.0, 1.0)
    theta[:, 1] = np.clip(theta[:, 1], math.log(_B_MIN), math.log(_B_MAX))
    theta[:, 2] = np.clip(theta[:, 2], mlo, mhi)
    return theta


def _lm(x, Y, W, theta0, r0, *, fix_a=False, iters=60, tol=1e-8):
    """Minimise sum W (Y - f)^2 for S problems at once; returns theta (S,3), sse (S,), ok (S,).

    W None: unit weights. Projected LM: a step is kept only where it lowers that problem's SSE,
    so every problem descends monotonically; parameters are clipped to their box after each
    step. Problems that have converged drop out of the batch, so a 1000-resample bootstrap costs
    little more than its slowest few resamples. Only the sigmoid values of the current
    parameters are kept; the Jacobian is rebuilt from them for the active problems (a rejected
    step costs no Jacobian, an accepted one no copy), which matters at 1000 resamples x 1000
    points.
    """
    mlo, mhi = x.min() - _M_BELOW, x.max() + _M_ABOVE
    theta = _clip(np.array(theta0, dtype=float), mlo, mhi)
    Y, r0 = np.asarray(Y, float), np.asarray(r0, float)
    W = None if W is None else np.asarray(W, float)
    S = len(theta)
    sg = _sig(x, theta)
    r = Y - (r0[:, None] + (theta[:, 0:1] - r0[:, None]) * sg)
    if W is not None:
        r = r * W
    sse = np.einsum("sn,sn->s", r, r)
    lam = np.full(S, 1e-2)
    done = np.zeros(S, bool)
    eye = np.eye(3)
    act = np.arange(S)
    for _ in range(iters):
        every = act.size == S  # all active: views instead of fancy-index copies
        th_a, r0_a = theta[act], r0[act]
        sa, ra = (sg, r) if every else (sg[act], r[act])
        Ya = Y if every else Y[act]
        Wa = None if W is None else (W if every else W[act])
        Ja = _jac(x, th_a, r0_a, sa)
        Jw = Ja if Wa is None else Ja * Wa[:, :, None]
        if fix_a:
            Jw = Jw.copy() if Jw is Ja else Jw
            Jw[:, :, 0] = 0.0
        JwT = Jw.transpose(0, 2, 1)
        H = JwT @ Ja  # batched 3x3 normal matrices (matmul beats einsum here)
        g = (JwT @ ra[:, :, None])[:, :, 0]
        diag = np.einsum("sii->si", H)
        Hd = H + lam[act, None, None] * (diag[:, :, None] * eye + 1e-12 * eye)
        if fix_a:
            Hd[:, 0, :] = 0.0
            Hd[:, :, 0] = 0.0
            Hd[:, 0, 0] = 1.0
        step = np.linalg.solve(Hd, g[:, :, None])[:, :, 0]
        cand = _clip(th_a + step, mlo, mhi)
        sc = _sig(x, cand)
        rc = Ya - (r0_a[:, None] + (cand[:, 0:1] - r0_a[:, None]) * sc)
        if Wa is not None:
            rc *= Wa
        ssec = np.einsum("sn,sn->s", rc, rc)
        better = ssec < sse[act]
        rel = np.where(better, (sse[act] - ssec) / np.maximum(sse[act], 1e-30), 0.0)
        ib = act[better]
        theta[ib], sg[ib], r[ib], sse[ib] = cand[better], sc[better], rc[better], ssec[better]
        lam[act] = np.where(better, lam[act] / 3, lam[act] * 4)
        done[act] = (better & (rel < tol)) | (lam[act] > 1e7)
        act = act[~done[act]]
        if act.size == 0:
            break
    return theta, sse, done


def _starts(x, y, w, r0, k=4):
    """Best k distinct (A, log B, log C_mid) starts from a vectorized grid, A in closed form."""
    Bs = np.geomspace(0.1, 8.0, 20)
    ms = np.linspace(x.min() - 2.0, x.max() + 4.0, 36)
    bb, mm = np.meshgrid(np.log(Bs), ms, indexing="ij")
    bb, mm = bb.ravel(), mm.ravel()
    s = expit(np.exp(bb)[:, None] * (x[None, :] - mm[:, None]))  # (G, n)
    yr = (y - r0) * w
    g = (s @ yr) / np.maximum((s * s) @ w, 1e-30)
    A = np.clip(r0 + g, 0.0, 1.0)
    resid = (y[None, :] - (r0 + (A - r0)[:, None] * s)) * w[None, :]
    sse = np.einsum("gn,gn->g", resid, resid)
    order = np.argsort(sse)
    picked: list[int] = []
    for i in order:
        if all(abs(bb[i] - bb[j]) > 0.3 or abs(mm[i] - mm[j]) > 0.5 for j in picked):
            picked.append(i)
        if len(picked) == k:
            break
    return np.stack([A[picked], bb[picked], mm[picked]], axis=1)


def _fit_default(x, y, w, r0):
    th0 = _starts(x, y, w, r0)
    S = len(th0)
    th, sse, ok = _lm(x, np.broadcast_to(y, (S, y.size)), np.broadcast_to(w, (S, y.size)), th0,
                      np.full(S, r0))
    i = int(np.argmin(sse))
    return th[i], float(sse[i]), bool(ok[i])


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


def _fit_paper(x, y, w, r0, c_max, unit="relative"):
    """The paper's grid over (A, C_mid) with scipy curve_fit for B; lowest SSE wins.

    An optimum on the grid's edge is the grid's answer, not the data's (A = 0.450 for a curve
    that never passes 0.07), so the grid is extended on that side and searched again: A by the
    same 0.005 steps down to just above R0 or up to 1.0, C_mid upward by further copies of its
    span (at most 3) and downward by 20 geometric steps to 1/100 of its lowest value. Returns
    (theta, sse, grid): grid records the ranges searched, the extensions and any edge the
    optimum still sits on (then the caller refuses the fit).
    """
    C, yy = np.exp(x[w > 0]), y[w > 0]
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


# ---------------------------------------------------------------------------------------------
# Intervals


def _bootstrap(x, y, w, sid, theta, r0, r0_groups, n_boot, rng, fix_a=False):
    """Parametric residual bootstrap whose noise model is itself drawn per sample from its REML
    posterior (`_reml_posterior`); all resamples refit at once by the batched LM warm-started
    from the point fit. Returns draws (S, 4) of (A, log B, log C_mid, R0).

    A plain bootstrap from one fitted noise model covered the truth only ~65-90% of the time on
    single runs with slow drift: one run of ~100 evaluations has a handful of effectively
    independent points, so its drift estimate is off by a factor of several either way, and
    the intervals inherited that error (too narrow exactly when the drift was underestimated).
    """
    f, J = _model(x, theta[None, :], np.array([r0]))
    f, J = f[0], J[0]
    series = [np.flatnonzero((sid == s) & (w > 0)) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    free = np.array([1, 2]) if fix_a else np.array([0, 1, 2])
    noise = _reml_posterior(J, y - f, series, free, n_boot, rng)
    phi, vd, vw = noise[:, 0], noise[:, 1], noise[:, 2]
    Y = f[None, :] + _noise_draws(phi, vd, vw, series, f.size, n_boot, rng)
    # R0 is the mean of the seeds' starting scores; the start is before any drift, so only the
    # white evaluation noise applies to it.
    r0b = (rng.normal(0.0, 1.0, (n_boot, max(r0_groups, 1))) * np.sqrt(vw)[:, None]).mean(axis=1)
    r0b = np.clip(r0 + r0b, 0.0, 1.0)
    W = None if np.all(w == 1) else np.broadcast_to(w, Y.shape)
    th, _, _ = _lm(x, Y, W, np.broadcast_to(theta, (n_boot, 3)), r0b, fix_a=fix_a)
    return np.column_stack([th, r0b])


def _draws_to_samples(d: np.ndarray) -> dict[str, np.ndarray]:
    return {"A": d[:, 0], "B": np.exp(d[:, 1]), "C_mid": np.exp(d[:, 2]), "R0": d[:, 3]}


def _seed_draws(per_seed: np.ndarray, center: np.ndarray, n, rng) -> np.ndarray:
    """t draws (k-1 dof) around the pooled fit with the seeds' spread (in A, log B, log C_mid, R0)."""
    k = per_seed.shape[0]
    se = per_seed.std(axis=0, ddof=1) / math.sqrt(k)
    t = rng.standard_t(k - 1, size=(n, 1))
    return center[None, :] + t * se[None, :]


# ---------------------------------------------------------------------------------------------
# Public entry point


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
    `ablate.analysis.window` choose the start from the curve's shape. `paper_grid` is the unit of the
    paper method's C_mid grid (see `paper_cmid_grid`). Raises FitError when the curve cannot be
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

    # R0: each seed's score at its smallest compute (compute 0 included), averaged over seeds.
    starts = []
    for s in np.unique(sid):
        ix = np.flatnonzero(sid == s)
        starts.append(float(np.mean(y[ix][c[ix] == c[ix].min()])))
    r0 = float(np.mean(starts))

    hi = np.inf if max_compute is None else float(max_compute)
    positive = (c > 0) & (c <= hi)
    rule = "auto" if min_compute is None else "given"
    lo = _auto_start(c[positive], y[positive], r0) if min_compute is None else float(min_compute)
    inwin = positive & (c >= lo)
    skipped = int(np.sum(positive & (c < lo)))
    n = int(inwin.sum())
    if n < MIN_POINTS:
        raise FitError(f"only {n} point(s) with compute in [{lo:.4g}, {hi:.4g}]; "
                       f"need at least {MIN_POINTS} (widen --min-compute/--max-compute)")
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
    w = np.ones(n)

    grid = None
    if method == "paper":
        theta, sse, grid = _fit_paper(x, yw, w, r0, float(c[inwin].max()), paper_grid)
    else:
        theta, sse, _ = _fit_default(x, yw, w, r0)
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
                       + _unidentified_help(c, y, positive, lo, skipped, max_compute, r0))
    ss_tot = float(np.sum((yw - yw.mean()) ** 2))
    r2 = 1.0 - sse / ss_tot if ss_tot > 0 else float("nan")

    fit = Fit(A=A, B=B, C_mid=cm, R0=r0, ci={}, r2=r2, n_points=n, sse=sse, method=method,
              n_seeds=len(starts), min_compute=lo, max_compute=None if max_compute is None else hi,
              skipped=skipped, window_rule=rule, grid=grid, data=(c, y, sid),
              warnings=_bound_warnings(A, B, cm, x, r2, grid) + notes, binned_from=binned_from,
              fit_points=(x, yw, sw))
    if intervals and n_boot > 0:  # n_boot=0: point fit only, like intervals=False
        _attach_intervals(fit, x, yw, w, sw, np.array([A, theta[1], theta[2]]), r0, n_boot, rng)
    return fit


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


def _auto_start(c: np.ndarray, y: np.ndarray, r0: float) -> float:
    """`ablate.analysis.window.auto_min_compute` with the default point fit, all candidate windows fit
    in one batched LM call (a window is a 0/1 weight on the points) from shared starts (the
    grid's best on every point): ~10 ms per 100-point curve instead of one grid search each."""
    if c.size == 0:
        return 0.0
    x_all = np.log(c)
    th0 = _starts(x_all, y, np.ones(c.size), r0)

    def fits_of(los: list[float]) -> list[tuple[float, bool]]:
        S, L = len(th0), len(los)
        W = np.repeat(np.array([(c >= lo).astype(float) for lo in los]), S, axis=0)
        th, sse, _ = _lm(x_all, np.broadcast_to(y, W.shape), W, np.tile(th0, (L, 1)),
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


def _unidentified(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> str | None:
    """Why the point fit does not pin A and C_mid, or None when it does."""
    if theta[2] >= x.max() + _M_ABOVE - 1e-6:
        return "C_mid ran to its limit, thousands of times the largest compute"
    if theta[1] <= math.log(_B_MIN) + 1e-9:
        return f"B ran to its lower limit {_B_MIN}"
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
        theta, _, _ = _fit_default(x_all, y[m], np.ones(x_all.size), r0)
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
    if B <= _B_MIN * 1.05 or B >= _B_MAX * 0.95:
        out.append(f"B at the limit of its range ({B:.3g}; the fitter allows {_B_MIN}-{_B_MAX:g})")
    if np.isfinite(r2) and r2 < 0:
        out.append(f"fits worse than a flat line (R^2 {r2:.2f})")
    if grid is not None and grid["extended"]:
        out.append("the paper grid's optimum was on its edge; grid extended ("
                   + ", ".join(dict.fromkeys(grid["extended"])) + ")")
    return out


def _attach_intervals(fit, x, y, w, sid, theta, r0, n_boot, rng, fix_a=False):
    k = len(np.unique(sid))
    draws = None
    if k >= SEED_MIN_RUNS:
        per = []
        for s in np.unique(sid):
            m = sid == s
            if m.sum() < MIN_POINTS:
                break
            ix = np.flatnonzero(m)
            cs, ys = fit.data[0][fit.data[2] == s], fit.data[1][fit.data[2] == s]
            r0s = float(np.mean(ys[cs == cs.min()]))
            if fix_a:
                th, _, _ = _lm(x[ix], y[ix][None], np.ones((1, ix.size)), theta[None], np.array([r0s]), fix_a=True)
                th = th[0]
            else:
                th, _, _ = _fit_default(x[ix], y[ix], np.ones(ix.size), r0s)
            per.append([th[0], th[1], th[2], r0s])
        if len(per) == k:
            draws = _seed_draws(np.array(per), np.array([*theta, r0]), n_boot, rng)
            if fix_a:
                draws[:, 0] = theta[0]
            fit.interval_method = "seeds"
    if draws is None:
        draws = _bootstrap(x, y, w, sid, theta, r0, fit.n_seeds, n_boot, rng, fix_a=fix_a)
        fit.interval_method = "bootstrap"
    fit.samples = _draws_to_samples(draws)
    fit.ci = {k_: _pct(v, LEVEL) for k_, v in fit.samples.items()}
    if fix_a:
        fit.ci["A"] = (fit.A, fit.A)


def refit_with_A(fit: Fit, A: float, *, n_boot: int = N_BOOT, random_state=0) -> Fit:
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
    w = np.ones(x.size)
    rng = np.random.default_rng(random_state)
    th0 = np.array([[A, math.log(fit.B), math.log(fit.C_mid)]])
    th, sse, _ = _lm(x, yw[None], w[None], th0, np.array([fit.R0]), fix_a=True)
    theta = th[0]
    ss_tot = float(np.sum((yw - yw.mean()) ** 2))
    out = Fit(A=float(A), B=float(math.exp(theta[1])), C_mid=float(math.exp(theta[2])), R0=fit.R0,
              ci={}, r2=1.0 - float(sse[0]) / ss_tot if ss_tot > 0 else float("nan"),
              n_points=fit.n_points, sse=float(sse[0]), method=fit.method, n_seeds=fit.n_seeds,
              min_compute=fit.min_compute, max_compute=fit.max_compute, skipped=fit.skipped,
              window_rule=fit.window_rule, data=fit.data, binned_from=fit.binned_from,
              fit_points=(x, yw, sw))
    if fit.samples and n_boot > 0:
        _attach_intervals(out, x, yw, w, sw, theta, fit.R0, n_boot, rng, fix_a=True)
    return out
