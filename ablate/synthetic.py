"""Synthetic training curves with known parameters, for checking fits and their intervals.

The noise imitates what a real ScaleRL evaluation sees: a fixed held-out set of 1,000 prompts
with per-prompt difficulty (prompts differ in how often they are solved, the same prompts every
time), 16 samples per prompt (binomial), and slow run-to-run drift (an AR(1) wander of the
run's quality, so neighbouring evaluations are correlated). The true curve is the sigmoid; the
drift and sampling noise are centred on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.curves import sigmoid


@dataclass(frozen=True)
class Truth:
    A: float
    B: float
    C_mid: float
    R0: float


def random_truth(rng: np.random.Generator, c_max: float = 1.0) -> Truth:
    """A plausible recipe: ceiling 0.5-0.75, start 0.05-0.2, C_mid within the run."""
    return Truth(A=float(rng.uniform(0.5, 0.75)), B=float(rng.uniform(0.8, 2.5)),
                 C_mid=float(c_max * rng.uniform(0.08, 0.3)), R0=float(rng.uniform(0.05, 0.2)))


def curve(truth: Truth, rng: np.random.Generator, *, c_max: float = 1.0, n_points: int = 100,
          prompts: int = 1000, samples: int = 16, drift_sd: float = 0.006, drift_phi: float = 0.9,
          difficulty_sd: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """One run: compute at n_points evenly spaced evaluations (plus compute 0) and its scores."""
    c = np.linspace(0.0, c_max, n_points + 1)
    true = sigmoid(c, truth.A, truth.B, truth.C_mid, truth.R0)
    # AR(1) drift of the run's quality, stationary sd drift_sd, zero at the start.
    eta = rng.normal(0.0, drift_sd * np.sqrt(1 - drift_phi**2), c.size)
    drift = np.zeros(c.size)
    for t in range(1, c.size):
        drift[t] = drift_phi * drift[t - 1] + eta[t]
    p = np.clip(true + drift, 1e-4, 1 - 1e-4)
    # Per-prompt difficulty: logit offsets (centred), the pass rates re-centred on p by a shift
    # found per evaluation so the prompt-mean stays exactly p (heterogeneity, not bias).
    d = rng.normal(0.0, difficulty_sd, prompts)
    d -= d.mean()
    scores = np.empty(c.size)
    for t, pt in enumerate(p):
        q = _shifted(pt, d)
        scores[t] = rng.binomial(samples, q).sum() / (prompts * samples)
    return c, scores


def _shifted(p: float, d: np.ndarray) -> np.ndarray:
    """Per-prompt pass rates expit(s + d) whose mean is p (bisection on the shift s)."""
    lo, hi = -20.0, 20.0
    for _ in range(40):
        s = 0.5 * (lo + hi)
        if np.mean(1 / (1 + np.exp(-(s + d)))) < p:
            lo = s
        else:
            hi = s
    return 1 / (1 + np.exp(-(0.5 * (lo + hi) + d)))
