"""Intervals of the score a run reaches past its fit window (issue 24).

A fit on the first half of a run's compute predicts the score at the end. The parameter draws'
band (the old interval) only says where the fitted *sigmoid* is; the run's score there is its
true curve plus its drift, and the true curve need not be a sigmoid. The new interval
(`fit.predictive_interval`) adds the run drift at the target (REML noise model), and half
of its draws take the other explanation of the window: nothing gained after the window's end.

Runs here: 200 evaluations (a dense eval log), a 1,000-prompt x 4-sample evaluation, AR(1) run
drift (sd 0.006, phi 0.9; tests/synthetic.py's noise). Shapes, written here without `ablate`:
"sigmoid" (well specified), "knee" (part exponential saturation in linear compute: a sharper knee
than any sigmoid) and "sag" (a sigmoid that declines from 10-30% of the run on). The departures are
mild, as on published GSM8K runs: a half-compute fit misses the end by ~0.013-0.016.

What is asserted (N = 60 runs per shape, seed 0; benchmarks/bench_coverage.py reports seed 1 with
100 runs, where all three shapes are >= 0.90):
  * knee, sag: the old interval under-covers (< 0.7); the new one covers >= 0.87 (the 0.90 target
    less one standard error of a 60-run coverage: the bound fails if the plateau draws go, which
    leaves 0.70-0.83) with a mean width within 1.25x the oracle width (twice the 95th percentile of
    |prediction - target|: the narrowest interval centred on the prediction covering 95%);
  * sigmoid: the new interval covers >= 0.9 (the old one, ~0.85, does not hold the run's drift)
    and is within 2x the oracle width: the price of a plateau the window cannot rule out;
  * inside the window nothing changes: the draws there are the parameter draws' sigmoid.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import synthetic as sy

N = 60
N_POINTS = 200  # evaluations over the run: a dense eval log
SHAPES = ("knee", "sag", "sigmoid")


def truth_curve(shape: str, rng: np.random.Generator):
    """A true mean-score function on compute [0, 1] of the given shape (not a sigmoid unless
    shape == "sigmoid"). The departures are mild, as on published GSM8K runs (a half-compute
    fit misses the end by ~0.01-0.02, about twice what noise alone makes it miss)."""
    r0 = float(rng.uniform(0.05, 0.3))
    a = float(rng.uniform(0.6, 0.9))
    tr = sy.Truth(a, float(rng.uniform(1.0, 2.5)), float(rng.uniform(0.05, 0.15)), r0)
    sig = lambda c: sy.sigmoid(c, tr.A, tr.B, tr.C_mid, tr.R0)  # noqa: E731
    if shape == "sigmoid":
        return sig
    if shape == "knee":  # part exponential saturation in linear compute: a sharper knee
        tau, w = float(rng.uniform(0.06, 0.2)), float(rng.uniform(0.3, 0.7))
        return lambda c: (1 - w) * sig(c) + w * (r0 + (a - r0) * (1 - np.exp(-np.asarray(c) / tau)))
    start, drop = float(rng.uniform(0.1, 0.3)), float(rng.uniform(0.01, 0.03))
    return lambda c: sig(c) - drop * np.maximum(np.asarray(c) - start, 0.0) / (1 - start)  # late sag


def run(shape: str, rng: np.random.Generator):
    """(the run's score at the end without its evaluation noise, compute, scores): the true curve
    plus the noise of `sy.curve` (AR(1) run drift, sd 0.006, phi 0.9; a 500-prompt x 4-sample
    evaluation). The target is curve + drift at the end: the score the run itself reaches, which
    is what a prediction for the end of this run claims; only the evaluation noise is left out."""
    true = truth_curve(shape, rng)
    c = np.linspace(0.0, 1.0, N_POINTS + 1)
    drift = sy._ar1(rng, c.size, 0.006, 0.9)
    p = np.clip(true(c) + drift, 1e-4, 1 - 1e-4)
    return float(p[-1]), c, sy._fixed_prompts(p, rng, 1000, 4, 1.0)


@functools.lru_cache(maxsize=None)
def measured(shape: str, n: int = N, seed: int = 0) -> dict:
    """Half-compute fits of n runs: old (parameter draws) and new (plus discrepancy) intervals
    of the score at the run's end, against the true curve there."""
    from ablate.analysis.fit import FitError, percentile_interval, predictive_interval, sigmoid
    from ablate.analysis.fitters import fit_sigmoid

    rng = np.random.default_rng(1000 * SHAPES.index(shape) + seed)
    old, new, err = [], [], []
    for i in range(n):
        target, c, y = run(shape, rng)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f = fit_sigmoid(c, y, max_compute=c.max() / 2, random_state=i)
        except FitError:
            continue
        s = f.samples
        old.append(percentile_interval(sigmoid(c.max(), s["A"], s["B"], s["C_mid"], s["R0"])))
        new.append(predictive_interval(f, c.max()))
        err.append(abs(float(f.predict(c.max())) - target))
        old[-1], new[-1] = (*old[-1], target), (*new[-1], target)
    cover = lambda iv: float(np.mean([lo <= t <= hi for lo, hi, t in iv]))  # noqa: E731
    width = lambda iv: float(np.median([hi - lo for lo, hi, _ in iv]))  # noqa: E731
    return {"fits": len(err), "old_cover": cover(old), "new_cover": cover(new),
            "old_width": width(old), "new_width": width(new),
            "new_mean_width": float(np.mean([hi - lo for lo, hi, _ in new])),
            "needed_width": 2 * float(np.quantile(err, 0.95)), "mean_err": float(np.mean(err))}


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["knee", "sag"])
def test_misspecified_curve_covered(shape):
    m = measured(shape)
    print(shape, m)
    assert m["fits"] >= 0.9 * N
    assert m["old_cover"] < 0.7, "the shape no longer breaks the old interval: not a misspecification test"
    assert m["new_cover"] >= 0.87
    assert m["new_mean_width"] <= 1.25 * m["needed_width"]


@pytest.mark.slow
def test_well_specified_sigmoid_covered_at_nominal():
    m = measured("sigmoid")
    print(m)
    assert m["fits"] >= 0.9 * N
    assert m["new_cover"] >= 0.9
    assert m["new_width"] <= 2.0 * m["needed_width"]


def test_inside_the_window_the_draws_are_the_sigmoids():
    from ablate.analysis.fit import predictive_draws, sigmoid
    from ablate.analysis.fitters import fit_sigmoid

    _, c, y = run("sigmoid", np.random.default_rng(5))
    f = fit_sigmoid(c, y, max_compute=0.5, random_state=0)
    s, inside = f.samples, np.array([0.2, 0.5])
    want = sigmoid(inside[None, :], s["A"][:, None], s["B"][:, None], s["C_mid"][:, None],
                   s["R0"][:, None])
    assert np.array_equal(predictive_draws(f, inside), want)
    past = predictive_draws(f, 1.0)  # past the window: the plateau half sits lower
    assert np.median(past[1::2]) < np.median(past[0::2])
