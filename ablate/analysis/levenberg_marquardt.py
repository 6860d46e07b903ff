"""Batched Levenberg-Marquardt for the sigmoid, shared by the point fits (`fitters`) and the
refits of every interval draw (`intervals`).

The fitters work in log compute x = log C and m = log C_mid, where the sigmoid is a logistic,
R = R0 + (A - R0) * expit(B (x - m)): that keeps the problem well scaled whatever the compute
unit (paper GPU-hours, FLOPs, or the ~1e-3 device-hours of a CPU proxy run). Parameters are
theta = (A, log B, log C_mid), R0 fixed per problem; S problems (starts, candidate windows,
bootstrap draws) are solved at once. Where a curve's start was not measured (its first
evaluation after compute 0), R0 is a fourth parameter: `solve(..., fit_r0=True)` takes and
returns theta = (A, log B, log C_mid, R0), R0 boxed in [0, r0_hi] (df/dR0 = 1 - expit).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

B_MIN, B_MAX = 0.02, 20.0
# C_mid may lie beyond the data (a curve that has not bent yet), but not absurdly far: past
# e^8 ~ 3000x the largest compute the asymptote is not identified by the data at all.
M_BELOW, M_ABOVE = 6.0, 8.0
_ITERS, _TOL = 60, 1e-8


def best_fit(x: np.ndarray, y: np.ndarray, r0: float) -> tuple[np.ndarray, float]:
    """The lowest-SSE fit of one curve from the best few grid starts: (theta, sse)."""
    th0 = starts(x, y, r0)
    S = len(th0)
    th, sse = solve(x, np.broadcast_to(y, (S, y.size)), None, th0, np.full(S, r0))
    i = int(np.argmin(sse))
    return th[i], float(sse[i])


def r0_starts(x: np.ndarray, y: np.ndarray, r0_hi: float) -> np.ndarray:
    """Starts (A, log B, log C_mid, R0) for a fit whose R0 is free: the grid's best few at
    R0 = r0_hi (the first score), half of it and 0."""
    out = [np.column_stack([starts(x, y, r), np.full(4, r)])[:4]
           for r in (r0_hi, 0.5 * r0_hi, 0.0)]
    return np.concatenate(out)


def best_fit_r0(x: np.ndarray, y: np.ndarray, r0_hi: float, W=None) -> tuple[np.ndarray, float]:
    """`best_fit` with R0 a fourth parameter in [0, r0_hi]: (theta of 4, sse)."""
    th0 = r0_starts(x, y, r0_hi)
    S = len(th0)
    th, sse = solve(x, np.broadcast_to(y, (S, y.size)), W, th0, np.full(S, r0_hi), fit_r0=True)
    i = int(np.argmin(sse))
    return th[i], float(sse[i])


def _damped_step(x, theta, r0, sg, r, W, lam, fix_a):
    """One LM step per problem: solve (J'WJ + lam diag(J'WJ)) step = J'W r from the sigmoid
    values `sg` and residuals `r` of the current parameters; fix_a pins A's step at 0. A theta
    of 4 columns steps R0 too (its column of J is 1 - expit)."""
    J = _jac(x, theta, r0, sg)
    if theta.shape[1] == 4:
        J = np.concatenate([J, (1.0 - sg)[:, :, None]], axis=2)
    Jw = J if W is None else J * W[:, :, None]
    if fix_a:
        Jw = Jw.copy() if Jw is J else Jw
        Jw[:, :, 0] = 0.0
    JwT = Jw.transpose(0, 2, 1)
    H = JwT @ J  # batched 3x3 (4x4) normal matrices (matmul beats einsum here)
    g = (JwT @ r[:, :, None])[:, :, 0]
    diag = np.einsum("sii->si", H)
    eye = np.eye(theta.shape[1])
    Hd = H + lam[:, None, None] * (diag[:, :, None] * eye + 1e-12 * eye)
    if fix_a:
        Hd[:, 0, :] = 0.0
        Hd[:, :, 0] = 0.0
        Hd[:, 0, 0] = 1.0
    return np.linalg.solve(Hd, g[:, :, None])[:, :, 0]


def solve(x, Y, W, theta0, r0, *, fix_a=False, fit_r0=False):
    """Minimise sum W (Y - f)^2 for S problems at once; returns theta (S,3) and sse (S,).

    W None: unit weights; fix_a holds A at theta0's value. fit_r0: theta0 is (S,4) with R0 its
    last column, fitted too and returned so, kept in [0, r0] (`r0` is then each problem's upper
    bound on R0: a rising curve starts below its first score). Projected LM: a step is kept only where it lowers that problem's SSE,
    so every problem descends monotonically; parameters are clipped to their box after each
    step. Problems that have converged drop out of the batch, so a 1000-resample bootstrap costs
    little more than its slowest few resamples. Only the sigmoid values of the current
    parameters are kept; the Jacobian is rebuilt from them for the active problems (a rejected
    step costs no Jacobian, an accepted one no copy), which matters at 1000 resamples x 1000
    points.
    """
    mlo, mhi = x.min() - M_BELOW, x.max() + M_ABOVE
    Y, r0 = np.asarray(Y, float), np.asarray(r0, float)
    if fit_r0:
        return _solve_r0(x, Y, None if W is None else np.asarray(W, float),
                         np.array(theta0, dtype=float), np.broadcast_to(r0, (len(theta0),)),
                         mlo, mhi)
    theta = _clip(np.array(theta0, dtype=float), mlo, mhi)
    W = None if W is None else np.asarray(W, float)
    S = len(theta)
    sg = _sig(x, theta)
    r = Y - (r0[:, None] + (theta[:, 0:1] - r0[:, None]) * sg)
    if W is not None:
        r = r * W
    sse = np.einsum("sn,sn->s", r, r)
    lam = np.full(S, 1e-2)
    done = np.zeros(S, bool)
    act = np.arange(S)
    for _ in range(_ITERS):
        every = act.size == S  # all active: views instead of fancy-index copies
        th_a, r0_a = theta[act], r0[act]
        sa, ra = (sg, r) if every else (sg[act], r[act])
        Ya = Y if every else Y[act]
        Wa = None if W is None else (W if every else W[act])
        cand = _clip(th_a + _damped_step(x, th_a, r0_a, sa, ra, Wa, lam[act], fix_a), mlo, mhi)
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
        done[act] = (better & (rel < _TOL)) | (lam[act] > 1e7)
        act = act[~done[act]]
        if act.size == 0:
            break
    return theta, sse


def _solve_r0(x, Y, W, theta, r0_hi, mlo, mhi):
    """`solve` with R0 free (theta (S,4)): the same projected LM, converged problems dropping
    out of the batch as there."""
    S = len(theta)
    theta = _clip(theta, mlo, mhi, r0_hi)
    Y = np.broadcast_to(Y, (S, x.size)) if Y.ndim == 2 else Y

    def resid(th, Ya, Wa):
        sg = _sig(x, th)
        r = Ya - (th[:, 3:4] + (th[:, 0:1] - th[:, 3:4]) * sg)
        return sg, (r if Wa is None else r * Wa)

    sg, r = resid(theta, Y, W)
    sse = np.einsum("sn,sn->s", r, r)
    lam = np.full(S, 1e-2)
    act = np.arange(S)
    for _ in range(2 * _ITERS):
        Wa = None if W is None else W[act]
        th_a = theta[act]
        cand = _clip(th_a + _damped_step(x, th_a, th_a[:, 3], sg[act], r[act], Wa, lam[act],
                                         False), mlo, mhi, r0_hi[act])
        sc, rc = resid(cand, Y[act], Wa)
        ssec = np.einsum("sn,sn->s", rc, rc)
        better = ssec < sse[act]
        rel = np.where(better, (sse[act] - ssec) / np.maximum(sse[act], 1e-30), 0.0)
        ib = act[better]
        theta[ib], sg[ib], r[ib], sse[ib] = cand[better], sc[better], rc[better], ssec[better]
        lam[act] = np.where(better, lam[act] / 3, lam[act] * 4)
        done = (better & (rel < _TOL)) | (lam[act] > 1e7)
        act = act[~done]
        if act.size == 0:
            break
    return theta, sse


def starts(x, y, r0):
    """Best 4 distinct (A, log B, log C_mid) starts from a vectorized grid, A in closed form."""
    Bs = np.geomspace(0.1, 8.0, 20)
    ms = np.linspace(x.min() - 2.0, x.max() + 4.0, 36)
    bb, mm = np.meshgrid(np.log(Bs), ms, indexing="ij")
    bb, mm = bb.ravel(), mm.ravel()
    s = expit(np.exp(bb)[:, None] * (x[None, :] - mm[:, None]))  # (G, n)
    g = (s @ (y - r0)) / np.maximum(np.einsum("gn,gn->g", s, s), 1e-30)
    A = np.clip(r0 + g, 0.0, 1.0)
    resid = y[None, :] - (r0 + (A - r0)[:, None] * s)
    sse = np.einsum("gn,gn->g", resid, resid)
    order = np.argsort(sse)
    picked: list[int] = []
    for i in order:
        if all(abs(bb[i] - bb[j]) > 0.3 or abs(mm[i] - mm[j]) > 0.5 for j in picked):
            picked.append(i)
        if len(picked) == 4:
            break
    return np.stack([A[picked], bb[picked], mm[picked]], axis=1)


def model(x, theta, r0):
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


def _clip(theta, mlo, mhi, r0_hi=None):
    if theta.shape[1] == 4:
        theta[:, 3] = np.clip(theta[:, 3], 0.0, r0_hi)
    theta[:, 0] = np.clip(theta[:, 0], 0.0, 1.0)
    theta[:, 1] = np.clip(theta[:, 1], math.log(B_MIN), math.log(B_MAX))
    theta[:, 2] = np.clip(theta[:, 2], mlo, mhi)
    return theta
