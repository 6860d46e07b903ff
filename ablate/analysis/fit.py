"""The ScaleRL sigmoid: the model every fit, comparison and extrapolation reads.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

A is the asymptote (the recipe's ceiling), B the efficiency (how sharply the curve bends),
C_mid the compute at half the gain, R0 the starting score. Where the start is measured (every
seed evaluated at compute 0, the trainer's step-0 eval) R0 is that measurement, not fit: the
mean of the seeds' compute-0 scores. The paper's procedure (ScaleRL, arXiv 2510.13786: grid over A and C_mid,
curve_fit for B) fits only A, C_mid and B, and a fit window that skips the early phase carries
almost no information about R0 anyway. Where it is not (a log whose first evaluation comes
after N steps) the first score is already on the curve, not its start; fixing R0 there biased A
and B with intervals that excluded the truth (issue 51), so R0 is then a fourth fitted
parameter (`r0_rule` "fitted"), its uncertainty carried into A's and B's draws; where the data
cannot pin it the fit keeps the first score and says so in a warning. How the parameters are fit is in `fitters`, their intervals in
`intervals`, the curve's formula in `sigmoid`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ablate.analysis.intervals import score_draws
# The curve's math and shared constants live in the bottom module `sigmoid`; they are imported
# from here too (this module is their public home, as docs/analysis.md names it).
from ablate.analysis.sigmoid import (LEVEL, MIN_POINTS, N_BOOT, SEED_MIN_RUNS, compute_for,
                                     percentile_interval, sigmoid)
from ablate.errors import InputError

__all__ = ["Fit", "FitError", "LEVEL", "MIN_POINTS", "N_BOOT", "PAPER_A_GRID", "PAPER_CMID_RANGE",
           "PAPER_GRIDS", "PAPER_RUN_GPU_HOURS", "SEED_MIN_RUNS", "compute_for",
           "percentile_interval", "predictive_draws", "predictive_interval", "sigmoid"]

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
    r0_rule: str = "measured"  # "measured" (first score) | "fitted" (start not measured)
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
        return predictive_interval(self, compute)

    def prediction_band(self, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise 95% band of the predicted curve over `compute` from the parameter draws,
        for plots (one vectorized pass instead of predict_interval per point)."""
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
        """The docs/JSON.md object (without "variant")."""
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
            "R0_rule": self.r0_rule,
        }

    def window_end(self) -> float:
        """Log of the largest compute the fit used: where extrapolation starts."""
        if self.fit_points is not None:
            return float(np.max(self.fit_points[0]))
        return math.log(self.window_max())

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

    `cause` is what a verdict reads (`fit_trust.refused`): "too short" (too few points in the
    window), "unidentified" (the data does not pin A and C_mid) or "no fit" (anything else).
    """

    def __init__(self, message: str, cause: str = "no fit") -> None:
        super().__init__(message)
        self.cause = cause


def predictive_draws(fit: Fit, compute) -> np.ndarray:
    """Draws of the score the run reaches at `compute` (`intervals.score_draws` on the fit's
    draws and window end): (S,) for a scalar, (S, m) for m computes."""
    return score_draws(fit.samples, fit.window_end(), compute)


def predictive_interval(fit: Fit, compute: float) -> tuple[float, float]:
    """95% interval of the score the run reaches at `compute` (`predictive_draws`)."""
    if not fit.samples:
        v = float(fit.predict(compute))
        return (v, v)
    return percentile_interval(predictive_draws(fit, compute))
