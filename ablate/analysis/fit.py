"""The ScaleRL sigmoid: the model every fit, comparison and extrapolation reads.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

A is the asymptote (the recipe's ceiling), B the efficiency (how sharply the curve bends),
C_mid the compute at half the gain, R0 the starting score. R0 is *measured*, not fit: the mean
score at the smallest compute of each seed's curve (including points before the fit window
and at compute 0). The paper's procedure (scalerl.md: grid over A and C_mid, curve_fit for B)
fits only A, C_mid and B, and a fit window that skips the early phase carries almost no
information about R0 anyway. How the parameters are fit is in `fitters`, their intervals in
`intervals`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from ablate.errors import InputError

MIN_POINTS = 5  # fewest points in the window a fit accepts
SEED_MIN_RUNS = 3  # seeds of one variant from which intervals come from per-seed fits
N_BOOT = 1000  # parameter draws behind an interval
LEVEL = 0.95
PAPER_A_GRID = np.round(np.arange(0.450, 0.8000001, 0.005), 3)
PAPER_CMID_RANGE = (100.0, 40000.0)
PAPER_RUN_GPU_HOURS = 16000.0
PAPER_GRIDS = ("relative", "gpu-hours")


@dataclass
class Fit:
    """A fitted sigmoid with intervals. Parameters are floats; `ci` maps name -> (lo, hi)."""

    A: float
    B: float
    C_mid: float
    R0: float
    ci: dict[str, tuple[float, float]]
    r2: float
    n_points: int
    sse: float = float("nan")
    method: str = "default"
    interval_method: str = "none"  # "seeds" | "bootstrap" | "none"
    n_seeds: int = 1
    min_compute: float | None = None
    max_compute: float | None = None
    skipped: int = 0  # points below the window's minimum (early phase) left out of the fit
    # "auto" (the curve's shape chose the start) | "given" (--min-compute) | "study" (study.yaml
    # fit.min_compute) | "shared" (compared variants: the latest of their shape-chosen starts,
    # ablate.analysis.pipeline)
    window_rule: str = "given"
    warnings: list[str] = field(default_factory=list)  # bounds / identifiability, in words
    grid: dict | None = None  # paper method: the (possibly extended) grid that was searched
    binned_from: int | None = None  # points in the window before `bins` averaged them
    samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    data: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    # what the sigmoid was fit to: log compute, score, seed label (the window, binned if asked)
    fit_points: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def predict(self, compute: np.ndarray | float) -> np.ndarray | float:
        """Score the fitted curve predicts at `compute` (same units as the fit)."""
        return sigmoid(compute, self.A, self.B, self.C_mid, self.R0)

    def compute_for(self, score: float) -> float:
        """Compute at which the fitted curve reaches `score`; inf if it never does."""
        return compute_for(score, self.A, self.B, self.C_mid, self.R0)

    def predict_interval(self, compute: float) -> tuple[float, float]:
        """95% interval of the score a run reaches at `compute`: inside the fit window the
        parameter draws' band; past it also the run's drift and the plateau the window cannot
        rule out (ablate/analysis/intervals.py), so an extrapolation does not claim the
        precision of the curve it assumed."""
        # Local import: intervals builds on Fit (it imports this module).
        from ablate.analysis.intervals import predictive_interval

        return predictive_interval(self, compute)

    def prediction_band(self, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise 95% band of the predicted curve over `compute` from the parameter draws,
        for plots (one vectorized pass instead of predict_interval per point)."""
        from ablate.analysis.intervals import predictive_draws  # see predict_interval

        band = predictive_draws(self, np.asarray(compute, float))
        a = (1 - LEVEL) / 2
        lo, hi = np.nanquantile(band, [a, 1 - a], axis=0)
        return lo, hi

    def compute_for_interval(self, score: float) -> tuple[float, float]:
        """95% interval of the compute needed for `score`; an end is inf where draws never reach it."""
        if not self.samples:
            v = self.compute_for(score)
            return (v, v)
        s = self.samples
        c = compute_for(score, s["A"], s["B"], s["C_mid"], s["R0"])
        return percentile_interval(c)

    def as_dict(self) -> dict:
        """The DESIGN.md JSON object (without "variant")."""
        return {
            "A": self.A,
            "B": self.B,
            "C_mid": self.C_mid,
            "R0": self.R0,
            "A_ci": list(self.ci.get("A", (math.nan, math.nan))),
            "B_ci": list(self.ci.get("B", (math.nan, math.nan))),
            "C_mid_ci": list(self.ci.get("C_mid", (math.nan, math.nan))),
            "R0_ci": list(self.ci.get("R0", (math.nan, math.nan))),
            "r2": self.r2,
            "n_points": self.n_points,
            "window": [self.min_compute, self.window_max()],
            "window_rule": self.window_rule,
            "skipped": self.skipped,
            "method": self.method,
            "interval_method": self.interval_method,
            "n_seeds": self.n_seeds,
            "warnings": list(self.warnings),
            "grid": self.grid,
            "binned_from": self.binned_from,
        }

    def window_max(self) -> float | None:
        """The window's upper end: --max-compute if given, else the largest compute fit."""
        if self.max_compute is not None:
            return self.max_compute
        if self.data is None:
            return None
        c = self.data[0]
        return float(c[c >= (self.min_compute or 0)].max())


class FitError(InputError):
    """A curve that cannot be fit (too few points, flat or decreasing, no convergence).

    `cause` is what a verdict reads (`trust.refused`): "too short" (too few points in the
    window), "unidentified" (the data does not pin A and C_mid) or "no fit" (anything else).
    """

    def __init__(self, message: str, cause: str = "no fit") -> None:
        super().__init__(message)
        self.cause = cause


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
