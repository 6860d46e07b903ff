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
"""

from __future__ import annotations

import math

import numpy as np

from ablate.analysis import lm
from ablate.analysis.fit import MIN_POINTS, SEED_MIN_RUNS, Fit, percentile_interval
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
