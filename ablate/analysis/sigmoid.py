"""The ScaleRL sigmoid's math and the constants every fit module shares: the bottom of the fit
modules. `fit` (the Fit object), `intervals` (its draws) and `fitters` (the estimators) build
on it; it imports none of them, so intervals need not import Fit and Fit may call intervals.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

MIN_POINTS = 5  # fewest points in the window a fit accepts
SEED_MIN_RUNS = 3  # seeds of one variant from which intervals come from per-seed fits
N_BOOT = 1000  # parameter draws behind an interval
LEVEL = 0.95


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


def percentile_interval(v: np.ndarray) -> tuple[float, float]:
    """The central 95% (LEVEL) percentile interval of draws."""
    a = (1 - LEVEL) / 2
    v = np.asarray(v, float)
    big = np.finfo(float).max
    # quantiles of draws that include inf (a target some draws never reach) without inf - inf
    q = np.nanquantile(np.clip(v, -big, big), [a, 1 - a], method="inverted_cdf")
    return tuple(float(np.inf if x >= big else -np.inf if x <= -big else x) for x in q)
