"""The noise model behind single-run intervals: AR(1) run drift plus white evaluation noise.

Within one seed's series (evaluations in compute order) the deviations from the true curve have
covariance s * V, V = frac * R(phi) + (1 - frac) * I, R(phi)_ij = phi^|i-j|. `reml_posterior`
draws (phi, drift variance, white variance) from the restricted-likelihood posterior of a fit's
residuals; `noise_draws` simulates the noise. See ablate/analysis/intervals.py for why the
bootstrap draws its noise model instead of trusting one estimate.

Cost is linear in the number of points. The restricted likelihood needs log|V|, r'V^-1 r,
J'V^-1 J and J'V^-1 r, and V is the covariance of a one-dimensional state-space model (the
drift is the state, the white noise the observation error), so a Kalman filter yields all of
them from its innovations in one pass: no n x n matrix is formed. The filter's gains do not
depend on the data, and the whole (phi, frac) grid runs as one vectorized pass. The dense
algebra (an eigen-decomposition of the n x n AR(1) matrix for each phi) takes ~2 minutes for
one 1,000-point curve on 2 cores; the filter, tens of milliseconds. Both compute the same
likelihood (tests/test_noise.py checks them against each other).
"""

from __future__ import annotations

import numpy as np

# Noise-model grid: AR(1) drift coefficient per evaluation x drift share of the variance.
PHI_GRID = np.linspace(0.0, 0.97, 50)
FRAC_GRID = np.linspace(0.0, 1.0, 26)
# Prior on phi: flat in atanh(phi), i.e. density 1/(1 - phi^2) on the linear grid. This is the
# usual uninformative choice for a correlation (flat on the unbounded Fisher-z scale; no scale
# of persistence is preferred). A flat-in-phi prior makes "slow drift" (phi -> 1) a priori
# rare, and since one run can barely tell phi 0.8 from 0.95 while the long-run variance differs
# 4x between them, the posterior then sat at too little drift: on development seeds (101-106,
# never the benchmark's 1-5) coverage of A was ~0.91 with the flat prior, ~0.95 with this one, and
# in between with the Jeffreys AR(1) prior (1 - phi^2)^-1/2 (seeds 103/104, 150 curves each:
# flat 0.92 on 103; Jeffreys 0.95/0.91; this 0.98/0.93). Chosen among those three standard
# priors, not tuned as a number.
LOG_PRIOR_PHI = np.repeat(-np.log(1 - PHI_GRID**2), FRAC_GRID.size)

_PHI = np.repeat(PHI_GRID, FRAC_GRID.size)  # the grid flattened, phi-major like LOG_PRIOR_PHI
# The phi grid (and its prior) is per evaluation of a REF_LENGTH-point series, the length the
# interval method was built and checked on. A denser log of the same run has more evaluations
# per unit of compute, so the same drift is more correlated from one evaluation to the next:
# for a series of m > REF_LENGTH points the grid is phi ** (REF_LENGTH / m) (same correlation
# time as a fraction of the run). Without this the grid's top, 0.97, could not represent slow
# per-step drift in a 1,000-point log (phi ~0.99 there): A / B / C_mid intervals then covered
# only 0.75 / 0.75 / 0.63 (benchmarks/bench_long.py); with it, see benchmarks/RESULTS.md.
REF_LENGTH = 100
_FRAC = np.tile(FRAC_GRID, PHI_GRID.size)


def _gains(phi: np.ndarray, frac: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Innovation variances F (G, m) and Kalman gains K (G, m) for unit total variance.

    The recursion P -> phi^2 P (1 - K) + frac (1 - phi^2) is data-free and converges within a
    few dozen steps; once it has, the rest of the series reuses the steady state.
    """
    white = 1.0 - frac
    F = np.empty((phi.size, m))
    K = np.empty((phi.size, m))
    P = frac.copy()  # stationary variance of the drift at the first evaluation
    for t in range(m):
        F[:, t] = np.maximum(P + white, 1e-12)
        K[:, t] = P / F[:, t]
        P_next = phi**2 * P * (1.0 - K[:, t]) + frac * (1.0 - phi**2)
        if np.max(np.abs(P_next - P)) < 1e-14:
            F_ss = np.maximum(P_next + white, 1e-12)
            F[:, t + 1:] = F_ss[:, None]
            K[:, t + 1:] = (P_next / F_ss)[:, None]
            break
        P = P_next
    return F, K


def whitened_moments(Z: np.ndarray, series: list[np.ndarray], phi: np.ndarray,
                     frac: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every grid point g: Z' V_g^-1 Z (G, c, c) and log|V_g| (G,), V_g block-diagonal over
    `series` (index arrays into Z's rows, each in evaluation order), by the Kalman filter."""
    G, c = phi.size, Z.shape[1]
    M = np.zeros((G, c, c))
    logdet = np.zeros(G)
    for ix in series:
        m = ix.size
        F, K = _gains(phi, frac, m)
        z = Z[ix]
        E = np.empty((G, m, c))
        a = np.zeros((G, c))  # predicted drift given the earlier evaluations
        pk = (phi[:, None] * K)[:, :, None]  # a_{t+1} = phi a_t + phi K_t e_t
        ph = phi[:, None]
        for t in range(m):
            e = z[t] - a
            E[:, t] = e
            a = ph * a + pk[:, t] * e
        Ew = E / np.sqrt(F)[:, :, None]
        M += Ew.transpose(0, 2, 1) @ Ew
        logdet += np.log(F).sum(axis=1)
    return M, logdet


def reml_posterior(J: np.ndarray, res: np.ndarray, series: list[np.ndarray], free: np.ndarray,
                   K: int, rng: np.random.Generator) -> np.ndarray:
    """K draws of (phi, v_drift, v_white) from the REML posterior of the residuals `res`.

    The restricted likelihood is that of the residuals after the (linearised) fit with Jacobian
    J (columns `free` are the fitted parameters): it knows the fit absorbed the part of the noise
    that looks like the curve, slow drift near the end above all, which a periodogram of the
    residuals cannot see. Priors: flat over the drift share frac, flat in atanh(phi)
    (`LOG_PRIOR_PHI`), 1/s on the scale, which integrates out in closed form (s | grid point is
    inverse-gamma); no constant is tuned.
    """
    # An orthonormal basis of the fit's tangent space instead of J itself: the restricted
    # likelihood depends only on that space, and a degenerate J (a step-like fit with B at its
    # limit, a grid optimum where dR/dA and dR/dB are collinear) made J'V^-1 J singular.
    U, sv, _ = np.linalg.svd(J[:, free], full_matrices=False)
    Jf = U[:, sv > max(sv.max(initial=0.0), 1e-300) * 1e-9]
    n, p = res.size, Jf.shape[1]
    m = max(ix.size for ix in series)
    phi_g = _PHI ** (REF_LENGTH / m) if m > REF_LENGTH else _PHI
    M, logdet_v = whitened_moments(np.column_stack([res, Jf]), series, phi_g, _FRAC)
    q = M[:, 0, 0]
    logdet = 0.0
    if p:
        A, b = M[:, 1:, 1:], M[:, 1:, 0]
        q = q - np.einsum("gp,gp->g", b, np.linalg.solve(A, b[:, :, None])[:, :, 0])
        logdet = np.linalg.slogdet(A)[1]
    q = np.maximum(q, 1e-300)
    ll = -0.5 * ((n - p) * np.log(q) + logdet_v + logdet) + LOG_PRIOR_PHI
    pr = np.exp(ll - ll.max())
    g = rng.choice(pr.size, size=K, p=pr / pr.sum())
    s = 0.5 * q[g] / rng.gamma(0.5 * (n - p), 1.0, K)
    return np.column_stack([phi_g[g], s * _FRAC[g], s * (1 - _FRAC[g])])


def noise_draws(phi, vd, vw, series, n_total, K, rng) -> np.ndarray:
    """K noise realisations (stationary AR(1) drift + white) laid out like the data. phi, vd, vw
    are scalars or (K,) arrays (one noise model per realisation)."""
    phi, vd, vw = (np.broadcast_to(np.asarray(v, float), (K,))[:, None] for v in (phi, vd, vw))
    out = np.zeros((K, n_total))
    for ix in series:
        m = ix.size
        e = rng.normal(0.0, 1.0, (K, m)) * np.sqrt(vd * (1 - phi**2))
        d = np.empty((K, m))
        d[:, 0] = rng.normal(0.0, 1.0, K) * np.sqrt(vd[:, 0])
        for t in range(1, m):
            d[:, t] = phi[:, 0] * d[:, t - 1] + e[:, t]
        out[:, ix] = d + rng.normal(0.0, 1.0, (K, m)) * np.sqrt(vw)
    return out
