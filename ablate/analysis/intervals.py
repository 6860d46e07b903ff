"""95% intervals of a fit's parameters, stored as `Fit.ci` and as draws in `Fit.samples`.

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
               then the noise draws are added to the fit and all are refit at once by the
               batched LM warm-started from the point fit; R0 is resampled too. An i.i.d., AR(1)
               sieve, or single-estimate drift + white bootstrap covered the truth only ~65-90%
               of the time on single runs with drift (the intervals inherited the drift
               estimate's error: too narrow exactly when it was underestimated); this one ~0.95
               (see benchmarks/RESULTS.md).
Coverage on synthetic curves with known parameters is checked in tests/test_coverage.py and
benchmarks/bench_curves.py.

Past the window (issue 24). The draws above say where the fitted *sigmoid* is; the score a run
reaches at a larger compute also holds (1) the run's drift there, which no sigmoid parameter
carries (the old band covered the run's own score only 0.85-0.89 of the time on well-specified
runs), and (2) the error of a sigmoid on a curve that is not one. Real RL curves depart from it
one way: a plateau that comes sooner than the sigmoid's, or a late sag (on published GSM8K runs a
half-compute fit missed the final score by only 0.008 on average, yet its band covered 82%).
`score_draws` adds (1) from the REML posterior's drift variance, and holds (2) by giving
half of the draws the other explanation of the window: the run gains nothing more after the
window's end (each such draw's curve stays at its value there). Why a second explanation and
not a model-error term estimated from the window: inside the window these departures are at
the noise level. Measured on 60 runs per shape (seeds 0 and 1), no statistic of the window told
the runs that would miss from those that would not (correlation with the miss, -0.3 to +0.2):
a held-out-tail check (fit the window's first part, score its last part against what the noise
model says; as a factor on the spread or as an added random-walk variance), leave-last-out at the
target's own extrapolation ratio, the residuals' trend at the window's end, and the spread of
fits from later window starts. A term estimated per curve thus widens the wrong curves (it got
sag runs from 0.74 to 0.80-0.90 only). Equal weight, because the window cannot weigh the two
(its likelihood is the same under both: they differ only past its end). Nothing is tuned: there
is no scale to set, the plateau is the fit's own value at the window's end. The cost is width
where the sigmoid does hold: those runs' intervals reach down to the plateau, since the window
cannot show that it will not come (benchmarks/RESULTS.md, bench_coverage.py: coverage and width
per curve set; tests/test_intervals_coverage.py).

Coherent with the fit (issue 32): each past-window draw is one possible future of the run, so
it obeys the fit's own rules: its score never passes the fit's ceiling (the upper end of A's
interval), and its curve never falls (the plateau stays at its window-end value). Only
the run's drift, a zero-mean wander, can put a larger budget's lower end below a smaller one's;
forbidding that too would miss the runs that really sag (`score_draws`;
tests/test_interval_coherence.py; the measured cost of each rule in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import math

import numpy as np

from ablate.analysis import levenberg_marquardt as lm
from ablate.analysis.sigmoid import MIN_POINTS, SEED_MIN_RUNS, percentile_interval, sigmoid
from ablate.analysis.noise import noise_draws, reml_posterior


def parameter_draws(x: np.ndarray, y: np.ndarray, sid: np.ndarray, theta: np.ndarray, r0: float,
                    n_boot: int, rng: np.random.Generator, *,
                    data: tuple[np.ndarray, np.ndarray, np.ndarray], n_seeds: int,
                    fix_a: bool = False, r0_hi: float | None = None,
                    ) -> tuple[dict[str, np.ndarray], dict[str, tuple], str]:
    """`n_boot` draws of the fit's parameters: (Fit.samples, Fit.ci, Fit.interval_method).

    x, y, sid: the points the fit used (log compute, score, seed label); theta: its
    (A, log B, log C_mid); data: every point (compute, score, seed label), for each seed's R0;
    n_seeds: the seeds R0 is the mean of; fix_a: A was held fixed (`refit_with_A`), so its
    interval is the point. r0_hi not None: R0 was fitted (the start not measured, `fitters`),
    so every draw refits it too, in [0, r0_hi]: its uncertainty, and its correlation with B
    and A, is in their draws. Takes arrays, not a Fit, so that Fit can call this module.
    """
    draws, method = None, "bootstrap"
    if len(np.unique(sid)) >= SEED_MIN_RUNS:
        draws = _per_seed_draws(x, y, sid, theta, r0, n_boot, rng, data, fix_a, r0_hi)
        method = "seeds" if draws is not None else method
    if draws is None:
        draws = _bootstrap(x, y, sid, theta, r0, n_seeds, n_boot, rng, fix_a=fix_a, r0_hi=r0_hi)
    samples = _draws_to_samples(draws)
    ci = {k_: percentile_interval(v) for k_, v in samples.items()}
    if fix_a:
        ci["A"] = (float(theta[0]), float(theta[0]))
    # What the score is past the window (module docstring, "Past the window"): the run's drift
    # there and the plateau draws, read by `score_draws` wherever the fit is extrapolated.
    samples.update(drift_terms(x, y, sid, theta, r0, n_boot, rng, fix_a=fix_a,
                               fit_r0=r0_hi is not None))
    return samples, ci, method


def _model(x, theta, r0, fit_r0: bool):
    """f (n,) and J (n, 3 or 4) of one problem; with fit_r0 J has R0's column (1 - expit)."""
    f, J = lm.model(x, theta[None, :], np.array([r0]))
    f, J = f[0], J[0]
    if fit_r0:
        J = np.column_stack([J, 1.0 - lm._sig(x, theta[None, :])[0]])
    return f, J


def _per_seed_draws(x, y, sid, theta, r0, n_boot, rng, data, fix_a,
                    r0_hi=None) -> np.ndarray | None:
    """t draws from one fit per seed (`_seed_draws`); None when a seed has too few points."""
    per = []
    for s in np.unique(sid):
        m = sid == s
        if m.sum() < MIN_POINTS:
            return None
        ix = np.flatnonzero(m)
        cs, ys = data[0][data[2] == s], data[1][data[2] == s]
        r0s = float(np.mean(ys[cs == cs.min()]))
        if r0_hi is not None and not fix_a:  # the start not measured: each seed fits its own
            th, _ = lm.best_fit_r0(x[ix], y[ix], float(r0_hi))
            per.append(list(th))
            continue
        if fix_a:
            th, _ = lm.solve(x[ix], y[ix][None], None, theta[None], np.array([r0s]), fix_a=True)
            th = th[0]
        else:
            th, _ = lm.best_fit(x[ix], y[ix], r0s)
        per.append([th[0], th[1], th[2], r0s])
    draws = _seed_draws(np.array(per), np.array([*theta, r0]), n_boot, rng)
    draws[:, 3] = np.clip(draws[:, 3], 0.0, 1.0)
    if fix_a:
        draws[:, 0] = theta[0]
    return draws


def _bootstrap(x, y, sid, theta, r0, r0_groups, n_boot, rng, fix_a=False, r0_hi=None):
    """Parametric residual bootstrap whose noise model is itself drawn per sample from its REML
    posterior (`reml_posterior`); all resamples refit at once by the batched LM warm-started
    from the point fit. Returns draws (S, 4) of (A, log B, log C_mid, R0). Why the noise model
    is drawn rather than estimated once: see the module docstring.
    """
    fit_r0 = r0_hi is not None and not fix_a
    f, J = _model(x, theta, r0, fit_r0)
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    free = np.array([1, 2]) if fix_a else np.array([0, 1, 2, 3] if fit_r0 else [0, 1, 2])
    noise = reml_posterior(J, y - f, series, free, n_boot, rng)
    phi, vd, vw = noise[:, 0], noise[:, 1], noise[:, 2]
    Y = f[None, :] + noise_draws(phi, vd, vw, series, f.size, n_boot, rng)
    if fit_r0:  # the start not measured: every draw refits R0 with the other three
        th0 = np.broadcast_to(np.append(theta, r0), (n_boot, 4))
        th, _ = lm.solve(x, Y, None, th0, np.full(n_boot, float(r0_hi)), fit_r0=True)
        return th
    # R0 is the mean of the seeds' starting scores; the start is before any drift, so only the
    # white evaluation noise applies to it.
    r0b = (rng.normal(0.0, 1.0, (n_boot, max(r0_groups, 1))) * np.sqrt(vw)[:, None]).mean(axis=1)
    r0b = np.clip(r0 + r0b, 0.0, 1.0)
    th, _ = lm.solve(x, Y, None, np.broadcast_to(theta, (n_boot, 3)), r0b, fix_a=fix_a)
    return np.column_stack([th, r0b])


def _seed_draws(per_seed: np.ndarray, center: np.ndarray, n, rng) -> np.ndarray:
    """t draws (k-1 dof) around the pooled fit with the seeds' spread (A, log B, log C_mid, R0)."""
    k = per_seed.shape[0]
    se = per_seed.std(axis=0, ddof=1) / math.sqrt(k)
    t = rng.standard_t(k - 1, size=(n, 1))
    return center[None, :] + t * se[None, :]


def _draws_to_samples(d: np.ndarray) -> dict[str, np.ndarray]:
    return {"A": d[:, 0], "B": np.exp(d[:, 1]), "C_mid": np.exp(d[:, 2]), "R0": d[:, 3]}


# ---------------------------------------------------------------------------------------------
# Past the window: the run's drift there, and the plateau the window cannot rule out

DRIFT = "drift"  # key of Fit.samples: per-draw run drift at a compute far past the window
DRIFT_DECAY = "drift_decay"  # key of Fit.samples: per-draw log(phi) per unit of log compute
STOP = "stop"  # key of Fit.samples: the draws that take the plateau explanation (every other one)
# The drift's noise model reads at most this many points, every k-th of a longer window: a
# variance needs no more, and 1,000-point logs have a 60 s target for 100 fits
# (benchmarks/bench_long.py).
NOISE_POINTS = 200


def drift_terms(x: np.ndarray, y: np.ndarray, sid: np.ndarray, theta: np.ndarray, r0: float,
                n: int, rng: np.random.Generator, *, fix_a: bool = False,
                fit_r0: bool = False) -> dict:
    """The Fit.samples terms `score_draws` applies past the window.

    DRIFT: the run's drift at the target, which no sigmoid parameter carries (the score a run
    reaches is its curve plus its drift there; the mean of k seeds has 1/k of the variance),
    drawn with the REML posterior's drift variance (`reml_posterior`, as `_bootstrap`).
    DRIFT_DECAY: log(phi) per unit of log compute, so just past the window the drift is still
    mostly the one the fit already absorbed (AR(1) forecast variance v_drift (1 - phi^(2k))
    k steps on). STOP: which draws take the plateau explanation (see `score_draws`).
    """
    if x.size > NOISE_POINTS:
        keep = np.concatenate([ix[np.argsort(x[ix])][::-(-x.size // NOISE_POINTS)]
                               for ix in (np.flatnonzero(sid == s) for s in np.unique(sid))])
        x, y, sid = x[keep], y[keep], sid[keep]
    fit_r0 = fit_r0 and not fix_a
    f, J = _model(x, theta, r0, fit_r0)
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    free = np.array([1, 2]) if fix_a else np.array([0, 1, 2, 3] if fit_r0 else [0, 1, 2])
    noise = reml_posterior(J, y - f, series, free, n, rng)
    u = np.unique(x)
    dx = float(np.mean(np.diff(u[-max(2, u.size // 4):]))) if u.size > 1 else 1.0
    phi = np.clip(noise[:, 0], 1e-12, 1.0 - 1e-12)
    return {DRIFT: np.sqrt(noise[:, 1] / max(len(series), 1)) * rng.standard_normal(n),
            DRIFT_DECAY: np.log(phi) / max(dx, 1e-12),
            STOP: np.arange(n) % 2 == 1}


def score_draws(s: dict[str, np.ndarray], end: float, compute) -> np.ndarray:
    """Draws of the score the run reaches at `compute`: (S,) for a scalar, (S, m) for m computes.
    s: a fit's draws (Fit.samples); end: log of the largest compute it used (Fit.window_end).

    What the draws are of: the score *the run* stands at when it has spent `compute` (its curve
    plus its slow AR(1) drift there), not the recipe's mean curve and not one evaluation (one
    evaluation's white noise is left out: `ablate watch` adds it for a band of single readings).
    Inside the window: the parameter draws' sigmoid (the window pins the run there). Past it,
    each draw is one possible future of the run, made of
      * its curve: two explanations of the window that the window cannot tell apart, half of
        the draws each (see "Past the window" in the module docstring): the draw's sigmoid goes
        on rising, or the run gains nothing more after the window's end (the draw's curve stays
        exactly at its value there: it neither rises nor falls). Either way the curve never
        falls as compute grows and never passes the draw's ceiling A;
      * plus the run's drift at `compute`: a zero-mean wander around that curve whose spread
        grows from 0 at the window's end (the fit pins the run there) to the REML posterior's
        drift sd (AR(1) forecast variance). It is the one term that can put the run's score at
        a larger compute below what it stood at at a smaller one: RL runs do dip and sag (of
        the sag runs of benchmarks/bench_coverage.py, 10-16% end below the lower end of the
        band at the window's end, so an interval that never fell would miss them);
      * and the ceiling: a draw's score is at most the upper end of A's 95% interval (or its
        curve's value where that is higher: a draw with A < R0 is a falling curve). The drift
        wanders under the highest ceiling the fit allows, not through it. Why that bound and not
        each draw's own A: a run at its ceiling does stand above its A by its drift half the
        time (curve + drift), so capping each draw at its own A cut the well-specified runs'
        coverage from 0.96 to 0.93; capping at A's upper end left every coverage unchanged
        (benchmarks/RESULTS.md, issue 32).
    So, at any compute past the window the interval's upper end never exceeds A's
    (`Fit.ci["A"]`, the same draws; each curve is at most its draw's A).
    For C1 < C2 (C2 past the window), each draw's score at C2 is at least its curve at C1 less
    its full drift |DRIFT|, so the lower end at C2 is at least the lower end of those values:
    below what the run stood at at C1 by its drift alone; and with the drift left out (DRIFT
    set to 0) every quantile is non-decreasing in C (draws whose A is above their R0; one below
    is a falling curve). Clipped to [0, 1] (a score). A fit without these terms (e.g. built
    elsewhere) gets the sigmoid draws alone."""
    c = np.atleast_1d(np.asarray(compute, float))
    ps = [s[k][:, None] for k in ("A", "B", "C_mid", "R0")]
    p = sigmoid(c[None, :], *ps)
    if DRIFT in s:
        with np.errstate(divide="ignore"):
            dist = np.maximum(np.log(c) - end, 0.0)[None, :]
        if STOP in s:
            p = np.where(s[STOP][:, None] & (dist > 0), sigmoid(math.exp(end), *ps), p)
        drift = s[DRIFT][:, None] * np.sqrt(1.0 - np.exp(2.0 * s[DRIFT_DECAY][:, None] * dist))
        # the fit's ceiling: the upper end of A's interval (as Fit.ci["A"] is computed), or the
        # draw's own curve where that is higher (a falling draw, A < R0)
        ceiling = np.maximum(percentile_interval(s["A"])[1], p)
        p = np.clip(np.minimum(p + drift, ceiling), 0.0, 1.0)
    return p[:, 0] if np.ndim(compute) == 0 else p
