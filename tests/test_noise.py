"""The linear-time noise model (ablate.analysis.noise) against the dense algebra it replaces."""

from __future__ import annotations

import numpy as np

from ablate.analysis.noise import noise_draws, reml_posterior, whitened_moments


def _dense_moments(Z, series, phi, frac):
    """Z' V^-1 Z and log|V| with V built as an explicit block-diagonal matrix."""
    n = Z.shape[0]
    V = np.zeros((n, n))
    for ix in series:
        lag = np.abs(np.subtract.outer(np.arange(ix.size), np.arange(ix.size)))
        V[np.ix_(ix, ix)] = frac * phi**lag + (1 - frac) * np.eye(ix.size)
    return Z.T @ np.linalg.solve(V, Z), np.linalg.slogdet(V)[1]


def test_kalman_moments_equal_the_dense_algebra():
    rng = np.random.default_rng(0)
    # two series of unequal length, interleaved in the row order (as seeds are in a frame)
    series = [np.arange(0, 70, 2), np.concatenate([np.arange(1, 70, 2), np.arange(70, 95)])]
    Z = rng.normal(size=(95, 4))
    phi = np.array([0.0, 0.5, 0.9, 0.97, 0.97, 0.3])
    frac = np.array([0.5, 1.0, 0.2, 1.0, 0.0, 0.96])
    M, logdet = whitened_moments(Z, series, phi, frac)
    for g in range(phi.size):
        Md, ld = _dense_moments(Z, series, phi[g], frac[g])
        np.testing.assert_allclose(M[g], Md, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(logdet[g], ld, rtol=1e-8, atol=1e-8)


def test_posterior_on_a_long_series_finds_the_noise_it_was_given():
    """2,000 evaluations of known AR(1) drift + white noise: the posterior concentrates on them."""
    rng = np.random.default_rng(1)
    n = 2000
    series = [np.arange(n)]
    e = noise_draws(0.95, 4e-5, 2e-5, series, n, 1, rng)[0]
    t = np.linspace(0, 1, n)
    J = np.column_stack([np.ones(n), t, t**2])
    r = e - J @ np.linalg.lstsq(J, e, rcond=None)[0]
    post = reml_posterior(J, r, series, np.arange(3), 2000, rng)
    phi, vd, vw = np.median(post, axis=0)
    assert 0.9 <= phi <= 0.97, phi
    assert 2e-5 <= vd <= 8e-5 and 1.5e-5 <= vw <= 2.7e-5, (vd, vw)
