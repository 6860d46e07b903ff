"""A prediction's interval is coherent with its fit at every budget (issue 32).

`intervals.score_draws` is the score a run stands at (its curve plus its slow drift, no single
evaluation's noise). Its rules, checked here at budgets C1 < C2 < C3 past a half-compute fit's
window (and at the window's end) on synthetic runs of three shapes, one of them a late sag:
  * ceiling: the interval's upper end is never above the upper end of A's interval (the
    drift is capped there). The old draws added the run's drift on top of the curve and went
    above it: at 1-10x the window's end every fit here had an upper end above A's.
  * never falls but by drift: with the drift left out, both ends are non-decreasing in compute
    and the plateau draws stay exactly at their window-end value; with it, the lower end at C2
    is at least the lower end of (each draw's curve at C1 less its full drift).
  * the central prediction is the point fit's sigmoid, unchanged, and inside the interval.
Runs come from tests/test_intervals_coverage.py's generator (written without `ablate`).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest

import test_intervals_coverage as tic
from ablate.analysis.fit import percentile_interval, predictive_interval, sigmoid
from ablate.analysis.fitters import fit_sigmoid
from ablate.analysis.intervals import DRIFT, STOP, score_draws

CASES = [("sigmoid", 3), ("sag", 4), ("sag", 7), ("knee", 5)]  # (shape, generator seed)
MULTIPLES = (1.0, 1.5, 3.0, 10.0)  # budgets as multiples of the window's end: end, C1, C2, C3


@functools.lru_cache(maxsize=None)
def half_fit(shape: str, seed: int):
    _, c, y = tic.run(shape, np.random.default_rng(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_sigmoid(c, y, max_compute=0.5, random_state=0)


def budgets(f) -> np.ndarray:
    return math.exp(f.window_end()) * np.array(MULTIPLES)


def without_drift(f) -> dict:
    s = dict(f.samples)
    s[DRIFT] = np.zeros_like(s[DRIFT])
    return s


@pytest.mark.parametrize("shape,seed", CASES)
def test_upper_end_never_above_A_interval(shape, seed):
    f = half_fit(shape, seed)
    a_hi = f.ci["A"][1]
    his = [predictive_interval(f, b)[1] for b in budgets(f)]
    assert all(hi <= a_hi for hi in his), (his, a_hi)
    # far past the window, where the curves are at their ceilings, the upper end is there (the
    # cap holds the drift under the ceiling; it does not pull the interval further down)
    assert predictive_interval(f, 1e3 * budgets(f)[0])[1] >= a_hi - 0.02


@pytest.mark.parametrize("shape,seed", CASES)
def test_lower_end_falls_by_the_drift_alone(shape, seed):
    f = half_fit(shape, seed)
    end, cs = f.window_end(), budgets(f)
    s0 = without_drift(f)
    curve = score_draws(s0, end, cs)  # (S, 4): the draws' curves, sigmoid or plateau
    ends = np.array([percentile_interval(curve[:, j]) for j in range(cs.size)])
    assert np.all(np.diff(ends, axis=0) >= 0), ends  # the curve part never falls
    stop = f.samples[STOP]
    assert stop.any() and np.array_equal(curve[stop, 1:], np.repeat(curve[stop, :1], 3, axis=1))
    draws = score_draws(f.samples, end, cs)
    reach = np.abs(f.samples[DRIFT])
    for i in range(cs.size):
        for j in range(i + 1, cs.size):
            # each draw at C_j is at least its curve at C_i less its full drift
            assert np.all(draws[:, j] >= curve[:, i] - reach - 1e-12)
            lo_j = percentile_interval(draws[:, j])[0]
            assert lo_j >= percentile_interval(curve[:, i] - reach)[0], (i, j)


@pytest.mark.parametrize("shape,seed", CASES)
def test_central_prediction_is_the_point_fit(shape, seed):
    from ablate.analysis.extrapolate import extrapolate
    from ablate.analysis.variant_fits import GroupFit

    f = half_fit(shape, seed)
    for b in budgets(f):
        want = sigmoid(b, f.A, f.B, f.C_mid, f.R0)
        lo, hi = predictive_interval(f, b)
        assert f.predict(b) == want and lo <= want <= hi, (b, lo, want, hi)
        row = extrapolate([GroupFit("v", f, None, f.n_points)], budget=float(b))[0]
        assert row["score"] == want and row["ci"] == [lo, hi]


def test_seed_intervals_are_capped_too():
    """Three seeds: the per-seed t draws, same rule."""
    c = np.linspace(0.0, 1.0, tic.N_POINTS + 1)
    truth = tic.truth_curve("sigmoid", np.random.default_rng(10))
    cs, ys, sid = [], [], []
    for k in range(3):
        r = np.random.default_rng(100 + k)
        p = np.clip(truth(c) + tic.sy._ar1(r, c.size, 0.006, 0.9), 1e-4, 1 - 1e-4)
        cs.append(c)
        ys.append(tic.sy._fixed_prompts(p, r, 1000, 4, 1.0))
        sid.append(np.full(c.size, k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = fit_sigmoid(np.concatenate(cs), np.concatenate(ys), seeds=np.concatenate(sid),
                        max_compute=0.5, random_state=0)
    assert f.interval_method == "seeds"
    for b in budgets(f):
        assert predictive_interval(f, b)[1] <= f.ci["A"][1]


def test_note_says_the_c_mid_reason_once():
    from ablate.analysis.variant_fits import GroupFit
    from ablate.cli.render import note

    rng = np.random.default_rng(25)
    c = np.linspace(0, 1, 81)
    late = sigmoid(c, 0.7, 2.0, 1.3, 0.1) + rng.normal(0, 0.003, c.size)  # not yet at C_mid
    f = fit_sigmoid(c, np.clip(late, 0, 1), n_boot=100)
    g = GroupFit("v", f, None, c.size)
    assert g.verdict()[1].startswith("C_mid ")
    text = note(g)
    assert text.count("C_mid") == 1 and "has not reached half its gain" in text, text
    assert text.endswith("train longer"), text


def test_note_says_the_a_bound_reason_once():
    from ablate.analysis.variant_fits import GroupFit
    from ablate.cli.render import note

    rng = np.random.default_rng(25)
    c = np.linspace(0, 1, 81)
    rng.normal(0, 0.003, c.size)  # the same draws as test_shapes.test_bound_warnings
    high = sigmoid(c, 0.995, 1.5, 0.1, 0.3) + rng.normal(0, 0.002, c.size)
    f = fit_sigmoid(c, np.clip(high, 0, 1), n_boot=100)
    g = GroupFit("v", f, None, c.size)
    assert g.verdict()[0] == "A at bound" and any(w.startswith("A at its bound") for w in f.warnings)
    text = note(g)
    assert "A at its bound" not in text and text.count("sits at its bound") == 1, text


def test_extrapolate_row_note_says_the_c_mid_reason_once():
    from ablate.analysis.extrapolate import extrapolate
    from ablate.analysis.variant_fits import GroupFit
    from ablate.cli.render import _row_note

    rng = np.random.default_rng(25)
    c = np.linspace(0, 1, 81)
    late = sigmoid(c, 0.7, 2.0, 1.3, 0.1) + rng.normal(0, 0.003, c.size)
    f = fit_sigmoid(c, np.clip(late, 0, 1), n_boot=100)
    row = extrapolate([GroupFit("v", f, None, c.size)], budget=2.0)[0]
    assert any(w.startswith("C_mid beyond the data") for w in row["warnings"])
    text = _row_note(row)
    assert text.count("C_mid") == 1 and text.startswith("not bending yet"), text
