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

Past the window (issue 24). The draws above say where the fitted *sigmoid* is; a prediction of
the score a run reaches at a larger compute must also hold (1) the run's drift there, which no
sigmoid parameter carries (the old band covered the run's own score 0.85-0.89 of the time on
well-specified dense runs), and (2) the error of a sigmoid on a curve that is not one (a plateau
that comes sooner, a late sag: on published GSM8K runs a half-compute fit missed the final score
by 0.008 on average, and its band covered only 82%). `predictive_draws` adds (1) from the REML
posterior's drift variance, and widens the draws' spread by (2), the held-out-tail check
(`tail_check`): fit the window's first part, measure the error on its held-out last part against
what the noise model says that error should be, and inflate by the ratio. Measured in
benchmarks/bench_coverage.py and tests/test_intervals_coverage.py; the tail check only adds a few
points of coverage on mildly misspecified runs (their departures are at the noise level inside
the window), so those stay below nominal (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import math

import numpy as np

from ablate.analysis import lm
from ablate.analysis.fit import MIN_POINTS, SEED_MIN_RUNS, Fit, percentile_interval, sigmoid
from ablate.analysis.noise import noise_draws, reml_posterior


def attach_intervals(fit: Fit, x: np.ndarray, y: np.ndarray, sid: np.ndarray, theta: np.ndarray,
                     r0: float, n_boot: int, rng: np.random.Generator, *, fix_a: bool = False) -> None:
    """Set `fit.samples`, `fit.ci` and `fit.interval_method` from `n_boot` draws.

    x, y, sid: the points the fit used (log compute, score, seed label); theta: its
    (A, log B, log C_mid); fix_a: A was held fixed (`refit_with_A`), so its interval is the point.
    """
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
                th, _ = lm.solve(x[ix], y[ix][None], None, theta[None], np.array([r0s]), fix_a=True)
                th = th[0]
            else:
                th, _ = lm.best_fit(x[ix], y[ix], r0s)
            per.append([th[0], th[1], th[2], r0s])
        if len(per) == k:
            draws = _seed_draws(np.array(per), np.array([*theta, r0]), n_boot, rng)
            if fix_a:
                draws[:, 0] = theta[0]
            fit.interval_method = "seeds"
    if draws is None:
        draws = _bootstrap(x, y, sid, theta, r0, fit.n_seeds, n_boot, rng, fix_a=fix_a)
        fit.interval_method = "bootstrap"
    fit.samples = _draws_to_samples(draws)
    fit.ci = {k_: percentile_interval(v) for k_, v in fit.samples.items()}
    if fix_a:
        fit.ci["A"] = (fit.A, fit.A)
    # Model error beyond the window (see "Misspecification" in the module docstring): per-draw
    # discrepancy rates, read by `discrepancy` wherever the fit is extrapolated.
    fit.samples.update(discrepancy_draws(tail_check(x, y, sid, theta, r0, rng, fix_a=fix_a),
                                         len(np.unique(sid)), n_boot, rng))


def _bootstrap(x, y, sid, theta, r0, r0_groups, n_boot, rng, fix_a=False):
    """Parametric residual bootstrap whose noise model is itself drawn per sample from its REML
    posterior (`reml_posterior`); all resamples refit at once by the batched LM warm-started
    from the point fit. Returns draws (S, 4) of (A, log B, log C_mid, R0). Why the noise model
    is drawn rather than estimated once: see the module docstring.
    """
    f, J = lm.model(x, theta[None, :], np.array([r0]))
    f, J = f[0], J[0]
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    free = np.array([1, 2]) if fix_a else np.array([0, 1, 2])
    noise = reml_posterior(J, y - f, series, free, n_boot, rng)
    phi, vd, vw = noise[:, 0], noise[:, 1], noise[:, 2]
    Y = f[None, :] + noise_draws(phi, vd, vw, series, f.size, n_boot, rng)
    # R0 is the mean of the seeds' starting scores; the start is before any drift, so only the
    # white evaluation noise applies to it.
    r0b = (rng.normal(0.0, 1.0, (n_boot, max(r0_groups, 1))) * np.sqrt(vw)[:, None]).mean(axis=1)
    r0b = np.clip(r0 + r0b, 0.0, 1.0)
    th, _ = lm.solve(x, Y, None, np.broadcast_to(theta, (n_boot, 3)), r0b, fix_a=fix_a)
    return np.column_stack([th, r0b])


def _seed_draws(per_seed: np.ndarray, center: np.ndarray, n, rng) -> np.ndarray:
    """t draws (k-1 dof) around the pooled fit with the seeds' spread (in A, log B, log C_mid, R0)."""
    k = per_seed.shape[0]
    se = per_seed.std(axis=0, ddof=1) / math.sqrt(k)
    t = rng.standard_t(k - 1, size=(n, 1))
    return center[None, :] + t * se[None, :]


def _draws_to_samples(d: np.ndarray) -> dict[str, np.ndarray]:
    return {"A": d[:, 0], "B": np.exp(d[:, 1]), "C_mid": np.exp(d[:, 2]), "R0": d[:, 3]}


# ---------------------------------------------------------------------------------------------
# Misspecification: the held-out tail check, and what the score at a compute past the window is

INFLATE = "inflate"  # key of Fit.samples: the tail check's factor on the draws' spread past the window
DRIFT = "drift"  # key of Fit.samples: per-draw run drift at a compute far past the window
DRIFT_DECAY = "drift_decay"  # key of Fit.samples: per-draw log(phi) per unit of log compute
TAIL_SHARES = (0.2, 0.3, 0.4)  # shares of the window's distinct compute values held out
NULL_DRAWS = 100  # noise realisations behind the check's reference (a curve that is a sigmoid)
# The check (and the drift term's noise model) reads at most this many points, every k-th of a
# longer window: a ratio and a variance need no more, and on 1,000-point logs the full check
# cost ~0.4 s per fit (fit 100 x 1,000 has a 60 s target; benchmarks/bench_long.py).
CHECK_POINTS = 200


def tail_split(x: np.ndarray, share: float) -> float | None:
    """The last log compute of the check's sub-window: it keeps all but the last ~`share` of
    the window's distinct compute values (at least one held out, at least MIN_POINTS kept);
    None when the window is too short to hold anything out."""
    u = np.unique(x)
    n_tail = min(max(1, int(round(share * u.size))), u.size - MIN_POINTS)
    return None if n_tail < 1 else float(u[u.size - n_tail - 1])


def tail_check(x: np.ndarray, y: np.ndarray, sid: np.ndarray, theta: np.ndarray, r0: float,
               rng: np.random.Generator, *, fix_a: bool = False) -> dict:
    """Does a sigmoid fit on the window's first part predict the window's held-out last part as
    well as the noise model says it should?

    For each held-out share in TAIL_SHARES: e, the mean error of the sub-window fit over the
    held-out points; E0, the mean of e^2 over NULL_DRAWS noise realisations around the full fit
    (the REML drift + white noise model of `_bootstrap`, around a curve that IS a sigmoid; each
    refit on its sub-window as the data was), i.e. what the error should be if only noise made
    it. z2 = e^2 / E0 is ~1 for a sigmoid; a curve the sigmoid cannot follow (a plateau that
    comes sooner, a late sag) misses its own tail by more. `inflation` = sqrt(max(1, mean z2)):
    by how much extrapolations from this fit are more wrong than its noise-only band says.
    Also returns the noise model's draws ("noise": (phi, v_drift, v_white) rows) and the mean
    log-compute step between the window's last evaluations ("dx") for `discrepancy_draws`.
    """
    if x.size > CHECK_POINTS:
        keep = np.concatenate([ix[np.argsort(x[ix])][::-(-x.size // CHECK_POINTS)]
                               for ix in (np.flatnonzero(sid == s) for s in np.unique(sid))])
        x, y, sid = x[keep], y[keep], sid[keep]
    f, J = lm.model(x, theta[None, :], np.array([r0]))
    series = [np.flatnonzero(sid == s) for s in np.unique(sid)]
    series = [ix[np.argsort(x[ix])] for ix in series if ix.size]
    free = np.array([1, 2]) if fix_a else np.array([0, 1, 2])
    noise = reml_posterior(J[0], y - f[0], series, free, NULL_DRAWS, rng)
    u = np.unique(x)
    z2 = []
    for share in TAIL_SHARES:
        x_split = tail_split(x, share)
        if x_split is None:
            continue
        sub, tail = x <= x_split, x > x_split
        Y = np.vstack([y[None, :], f + noise_draws(noise[:, 0], noise[:, 1], noise[:, 2], series,
                                                   y.size, NULL_DRAWS, rng)])
        S = Y.shape[0]
        th, _ = lm.solve(x[sub], Y[:, sub], None, np.broadcast_to(theta, (S, 3)),
                         np.full(S, r0), fix_a=fix_a)
        e = (Y[:, tail] - lm.model(x[tail], th, np.full(S, r0))[0]).mean(axis=1)
        z2.append(float(e[0] ** 2 / max(np.mean(e[1:] ** 2), 1e-300)))
    return {"inflation": math.sqrt(max(1.0, float(np.mean(z2)))) if z2 else 1.0, "z2": z2,
            "noise": noise, "dx": float(np.mean(np.diff(u[-max(2, u.size // 4):])))}


def discrepancy_draws(check: dict, n_runs: int, n: int, rng: np.random.Generator) -> dict:
    """The Fit.samples terms `predictive_draws` applies past the window. INFLATE: the tail
    check's factor. DRIFT: the run's drift at the target, which no sigmoid parameter carries
    (the score a run reaches is its curve plus its drift there; the mean of n_runs seeds has
    1/n_runs of the variance), drawn with the REML posterior's drift variance. DRIFT_DECAY:
    log(phi) per unit of log compute, so just past the window the drift is still mostly the one
    the fit already absorbed (AR(1) forecast variance v_drift (1 - phi^(2k)) k steps on)."""
    noise = check["noise"][rng.integers(0, len(check["noise"]), n)]
    phi = np.clip(noise[:, 0], 1e-12, 1.0 - 1e-12)
    return {INFLATE: np.full(n, check["inflation"]),
            DRIFT: np.sqrt(noise[:, 1] / max(n_runs, 1)) * rng.standard_normal(n),
            DRIFT_DECAY: np.log(phi) / max(check["dx"], 1e-12)}


def window_end(fit: Fit) -> float:
    """Log of the largest compute the fit used: where extrapolation starts."""
    if fit.fit_points is not None:
        return float(np.max(fit.fit_points[0]))
    return math.log(fit.window_max())


def predictive_draws(fit: Fit, compute) -> np.ndarray:
    """Draws of the score the run reaches at `compute`: (S,) for a scalar, (S, m) for m computes.

    Inside the window: the parameter draws' sigmoid, as before. Past it: their spread around
    the point prediction times the tail check's inflation, plus the run's drift there; clipped
    to [0, 1] (a score). A fit without the tail-check terms (e.g. built elsewhere) gets the
    sigmoid draws alone."""
    s = fit.samples
    c = np.atleast_1d(np.asarray(compute, float))
    p = sigmoid(c[None, :], s["A"][:, None], s["B"][:, None], s["C_mid"][:, None],
                s["R0"][:, None])
    if INFLATE in s:
        with np.errstate(divide="ignore"):
            dist = np.maximum(np.log(c) - window_end(fit), 0.0)[None, :]
        past = dist > 0
        centre = np.asarray(fit.predict(c), float)[None, :]
        k = np.where(past, s[INFLATE][:, None], 1.0)
        drift = s[DRIFT][:, None] * np.sqrt(1.0 - np.exp(2.0 * s[DRIFT_DECAY][:, None] * dist))
        p = np.clip(centre + k * (p - centre) + drift, 0.0, 1.0)
    return p[:, 0] if np.ndim(compute) == 0 else p


def predictive_interval(fit: Fit, compute: float) -> tuple[float, float]:
    """95% interval of the score the run reaches at `compute` (`predictive_draws`)."""
    if not fit.samples:
        v = float(fit.predict(compute))
        return (v, v)
    return percentile_interval(predictive_draws(fit, compute))
