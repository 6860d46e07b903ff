"""The sigmoid fit: exact recovery, paper mode, window rule, failures, honest intervals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import synthetic as sy
from ablate.analysis.fit import FitError, compute_for, sigmoid
from ablate.analysis.fitters import fit_sigmoid, refit_with_A
from ablate.analysis.paper_grid import paper_cmid_grid
from ablate.errors import InputError


def test_sigmoid_and_inverse_roundtrip():
    c = np.geomspace(1e-4, 1e2, 50)
    r = sigmoid(c, 0.7, 1.3, 0.5, 0.1)
    assert np.all(np.diff(r) > 0) and r[0] > 0.1 and r[-1] < 0.7
    assert sigmoid(0.5, 0.7, 1.3, 0.5, 0.1) == pytest.approx(0.4)  # half the gain at C_mid
    assert sigmoid(0.0, 0.7, 1.3, 0.5, 0.1) == pytest.approx(0.1)
    np.testing.assert_allclose(compute_for(r, 0.7, 1.3, 0.5, 0.1), c, rtol=1e-8)
    assert compute_for(0.75, 0.7, 1.3, 0.5, 0.1) == math.inf


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4, 1e18])  # device-hours .. FLOPs
def test_noiseless_curve_is_recovered_in_any_unit(scale):
    c = np.linspace(0, 1, 81) * scale
    y = sigmoid(c, 0.62, 1.7, 0.2 * scale, 0.12)
    f = fit_sigmoid(c, y, intervals=False)
    assert f.A == pytest.approx(0.62, abs=1e-4)
    assert f.B == pytest.approx(1.7, rel=1e-3)
    assert f.C_mid == pytest.approx(0.2 * scale, rel=1e-3)
    assert f.R0 == pytest.approx(0.12)
    assert f.r2 > 0.9999
    assert f.compute_for(f.predict(0.5 * scale)) == pytest.approx(0.5 * scale, rel=1e-6)


@pytest.mark.slow
def test_paper_method_reproduces_grid_and_default_is_no_worse():
    rng = np.random.default_rng(3)
    tr = sy.Truth(A=0.611, B=1.4, C_mid=3000.0, R0=0.1)
    c, y = sy.curve(tr, rng, c_max=16000.0, n_points=40)  # paper-scale GPU-hours
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp = fit_sigmoid(c, y, method="paper", intervals=False)
    fd = fit_sigmoid(c, y, intervals=False)
    assert round(fp.A * 1000) % 5 == 0 and 0.45 <= fp.A <= 0.8  # A is on the paper's grid
    assert np.isclose(paper_cmid_grid(16000.0), fp.C_mid).any()
    assert fd.sse <= fp.sse + 1e-12
    assert abs(fd.A - tr.A) < 0.02 and abs(fp.A - tr.A) < 0.02


def test_paper_grid_rescales_off_gpu_hour_scale():
    np.testing.assert_allclose(paper_cmid_grid(16000.0)[[0, -1]], [100, 40000])
    np.testing.assert_allclose(paper_cmid_grid(400.0, "gpu-hours")[[0, -1]], [100, 40000])
    g = paper_cmid_grid(0.05)
    assert g[0] == pytest.approx(100 * 0.05 / 16000) and g[-1] == pytest.approx(40000 * 0.05 / 16000)


def test_window_given_explicitly_is_used_and_reported():
    c = np.linspace(0, 100, 101)
    y = sigmoid(c, 0.6, 1.5, 20, 0.1)
    f = fit_sigmoid(c, y, intervals=False)  # on the sigmoid from the start: nothing skipped
    assert f.window_rule == "auto" and f.skipped == 0 and f.n_points == 100
    g = fit_sigmoid(c, y, min_compute=50, max_compute=90, intervals=False)
    assert g.n_points == 41 and g.skipped == 49 and g.window_rule == "given"
    assert g.as_dict()["window"] == [50.0, 90.0]


@pytest.mark.parametrize("y, match", [
    (lambda c: 0.3 + 0 * c, "flat or decreasing"),
    (lambda c: 0.6 - 0.003 * c, "flat or decreasing"),
])
def test_flat_or_decreasing_curves_fail_with_reason(y, match):
    c = np.linspace(0, 100, 50)
    with pytest.raises(FitError, match=match):
        fit_sigmoid(c, y(c))


def test_bad_input_is_named():
    c = np.linspace(0, 1, 20)
    with pytest.raises(FitError, match="only 3 point"):
        fit_sigmoid(c[:4], c[:4] * 0.5)
    with pytest.raises(InputError, match="score has 10 NaN"):
        fit_sigmoid(c, np.where(c > 0.5, np.nan, c * 0.5))
    with pytest.raises(InputError, match="outside \\[0, 1\\]"):
        fit_sigmoid(c, c * 3)
    with pytest.raises(InputError, match="unknown fit method"):
        fit_sigmoid(c, c * 0.5, method="magic")


def test_curve_that_has_not_bent_is_not_identified():
    c = np.linspace(0, 1, 40)
    y = sigmoid(c, 0.9, 1.0, 500.0, 0.05)  # still in its exponential phase: A not in the data
    with pytest.raises(FitError, match="not identified|not above"):
        fit_sigmoid(c, y + np.random.default_rng(0).normal(0, 0.001, c.size))


def _coverage(rng, n, drift_sd):
    hits = {"A": 0, "B": 0, "C_mid": 0}
    widths = []
    for _ in range(n):
        tr = sy.random_truth(rng, 0.05)
        c, y = sy.curve(tr, rng, c_max=0.05, n_points=80, drift_sd=drift_sd)
        f = fit_sigmoid(c, y, n_boot=300, random_state=rng)
        assert f.interval_method == "bootstrap"
        widths.append(f.ci["A"][1] - f.ci["A"][0])
        for k in hits:
            lo, hi = f.ci[k]
            hits[k] += lo <= getattr(tr, k) <= hi
    return {k: h / n for k, h in hits.items()}, float(np.median(widths))


@pytest.mark.slow
def test_bootstrap_intervals_cover_truth_on_synthetic_curves():
    # Small-sample check of the benchmark's claim (~0.95 on 300 curves): a bootstrap that
    # trusted one noise estimate covered ~0.80-0.90 here; binomial slack for 40 curves.
    cov, width = _coverage(np.random.default_rng(11), 40, drift_sd=0.006)
    assert all(v >= 0.85 for v in cov.values()), cov
    assert width < 0.08, width  # honest, not uselessly wide (drift sd is 0.006)


@pytest.mark.slow
def test_bootstrap_intervals_shrink_without_drift():
    cov, width = _coverage(np.random.default_rng(12), 20, drift_sd=0.0)
    assert all(v >= 0.85 for v in cov.values()), cov
    assert width < 0.025, width


def test_reml_noise_posterior_recovers_drift_and_white_noise():
    """The noise-model posterior, on pure model noise with a known answer (10 series pooled)."""
    from ablate.analysis.noise import noise_draws, reml_posterior

    rng = np.random.default_rng(13)
    series = [np.arange(i * 90, (i + 1) * 90) for i in range(10)]
    e = noise_draws(0.9, 4e-5, 1e-5, series, 900, 1, rng)[0]
    t = np.tile(np.linspace(0, 1, 90), 10)
    J = np.column_stack([np.ones(900), t, t**2])
    r = e - J @ np.linalg.lstsq(J, e, rcond=None)[0]
    post = reml_posterior(J, r, series, np.arange(3), 2000, rng)
    phi, vd, vw = np.median(post, axis=0)
    assert 0.8 <= phi <= 0.95, phi
    assert 2e-5 <= vd <= 8e-5 and 0.5e-5 <= vw <= 2e-5, (vd, vw)


def test_seed_intervals_with_three_seeds_are_wider_than_one_runs_noise():
    rng = np.random.default_rng(5)
    tr = sy.Truth(0.6, 1.5, 0.01, 0.1)
    cs, ys, ss = [], [], []
    for s in range(3):
        c, y = sy.curve(tr, rng, c_max=0.05, n_points=50)
        cs.append(c); ys.append(y); ss.append(np.full(c.size, s))
    f = fit_sigmoid(np.concatenate(cs), np.concatenate(ys), seeds=np.concatenate(ss))
    assert f.interval_method == "seeds" and f.n_seeds == 3
    lo, hi = f.ci["A"]
    assert lo < f.A < hi and lo <= tr.A <= hi
    assert len(f.samples["A"]) == 1000


def test_refit_with_shared_A_holds_A_and_moves_B():
    rng = np.random.default_rng(2)
    c, y = sy.curve(sy.Truth(0.6, 1.5, 0.01, 0.1), rng, c_max=0.05, n_points=60)
    f = fit_sigmoid(c, y, n_boot=200)
    g = refit_with_A(f, f.A + 0.03, n_boot=200)
    assert g.A == pytest.approx(f.A + 0.03) and g.ci["A"] == (g.A, g.A)
    assert g.sse >= f.sse and g.B != pytest.approx(f.B)
    assert g.ci["B"][0] < g.B < g.ci["B"][1]


def test_refit_with_A_n_boot_0_skips_intervals():
    # compare's shared-A ranking asks for n_boot=0 (point B only): no bootstrap is drawn for
    # it, and the point B is the same as with intervals.
    rng = np.random.default_rng(2)
    c, y = sy.curve(sy.Truth(0.6, 1.5, 0.01, 0.1), rng, c_max=0.05, n_points=60)
    f = fit_sigmoid(c, y, n_boot=200)
    g = refit_with_A(f, f.A + 0.03, n_boot=0)
    assert g.samples == {} and g.ci == {}
    assert g.B == pytest.approx(refit_with_A(f, f.A + 0.03, n_boot=200).B)


def test_prediction_and_target_intervals():
    rng = np.random.default_rng(4)
    tr = sy.Truth(0.6, 1.5, 0.01, 0.1)
    c, y = sy.curve(tr, rng, c_max=0.05, n_points=80)
    f = fit_sigmoid(c, y, n_boot=400)
    lo, hi = f.predict_interval(0.2)
    assert lo < f.predict(0.2) < hi
    true_final = sigmoid(0.1, tr.A, tr.B, tr.C_mid, tr.R0)
    half = fit_sigmoid(c, y, max_compute=0.025, n_boot=200)
    assert abs(half.predict(0.1) - true_final) < 0.03
    clo, chi = f.compute_for_interval(0.55)
    assert clo < f.compute_for(0.55) < chi
    assert f.compute_for_interval(0.99) == (math.inf, math.inf)


@pytest.mark.slow  # 3 bootstrapped fits, 6 rankings: 1.2 s CPU (> half the fast limit)
def test_compare_ranking_does_not_depend_on_input_order():
    """A chain of near-ties (0.50 ~ 0.515 ~ 0.53, but 0.50 !~ 0.53) must rank the same way
    whatever order the variants come in; the pairwise margin test alone is not transitive."""
    from ablate.analysis.compare import compare, tie_groups
    from ablate.analysis.variant_fits import GroupFit
    from synthetic import Truth, curve

    rng = np.random.default_rng(7)
    fits = []
    for name, truth in {"lo": Truth(0.50, 2.0, 0.15, 0.1), "mid": Truth(0.515, 1.0, 0.15, 0.1),
                        "hi": Truth(0.53, 1.5, 0.15, 0.1)}.items():
        c, s = curve(truth, rng, drift_sd=0.0)
        fits.append(GroupFit(name, fit_sigmoid(c, s, n_boot=100), None, c.size))
    As = sorted(g.fit.A for g in fits)
    assert As[2] - As[0] >= 0.02, "the test needs a chain that spans more than the margin"
    ranks = set()
    for perm in ([0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0], [0, 2, 1], [2, 0, 1]):
        rows = compare([fits[i] for i in perm], margin=0.02, n_boot=50)
        ranks.add(tuple(r.group.variant for r in rows))
    assert len(ranks) == 1
    groups = tie_groups(fits, 0.02)
    assert [g.variant for g in groups[0]][0] == max(fits, key=lambda g: g.fit.A).variant
    assert all(grp[0].fit.A - g.fit.A < 0.02 for grp in groups for g in grp)


def test_n_boot_0_is_a_point_fit():
    c, s = sy.curve(sy.Truth(0.6, 1.5, 0.15, 0.1), np.random.default_rng(3), drift_sd=0.0)
    fit = fit_sigmoid(c, s, n_boot=0)
    assert abs(fit.A - 0.6) < 0.03 and not fit.samples
