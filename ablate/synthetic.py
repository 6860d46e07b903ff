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


# ---------------------------------------------------------------------------------------------
# Shapes seen in published runs, for the window rule's tests and benchmark (no downloads).


def fast_saturating(rng: np.random.Generator, *, n_points: int = 50, c_max: float = 1.0,
                    truth: Truth | None = None, drift_sd: float = 0.006) -> tuple[Truth, np.ndarray, np.ndarray]:
    """A run that starts from a supervised warm-up (or a strong base model) and rises from its
    first evaluation, saturating early: C_mid at 0.5-4% of the run, so the old default window
    (skip the first 10% of compute) saw only the plateau. Like the CPU proxy's quickstart curves
    and published GRPO runs of instruct models on GSM8K-style tasks."""
    tr = truth or Truth(A=float(rng.uniform(0.45, 0.8)), B=float(rng.uniform(0.6, 1.5)),
                        C_mid=float(c_max * rng.uniform(0.01, 0.04)), R0=float(rng.uniform(0.15, 0.35)))
    c, y = curve(tr, rng, c_max=c_max, n_points=n_points, drift_sd=drift_sd)
    return tr, c, y


def early_phase(rng: np.random.Generator, *, n_points: int = 100, c_max: float = 16000.0,
                truth: Truth | None = None, fade: float = 0.1) -> tuple[Truth, np.ndarray, np.ndarray]:
    """A paper-shaped run: the sigmoid `truth` plus a transient early phase, a fast jump (format
    learning: 15-35% of the gain within the first ~2% of compute) that fades into the main curve
    by ~`fade` of the run (the paper skips its first ~1.5k of 16k GPU-hours). A single sigmoid
    cannot follow both; fitting through the jump biases A."""
    tr = truth or random_truth(rng, c_max)
    base = Truth(0.5, 1.0, 1.0, 0.5)  # flat at 0.5: only its noise is used, added to the shape
    c, noise = curve(base, rng, c_max=c_max, n_points=n_points)
    main = sigmoid(c, tr.A, tr.B, tr.C_mid, tr.R0)
    w, tau = rng.uniform(0.15, 0.35), c_max * rng.uniform(0.01, 0.025)
    jump = w * (tr.A - main) * (1 - np.exp(-c / tau)) * np.exp(-c / (fade * c_max))
    return tr, c, np.clip(main + jump + (noise - 0.5), 0.0, 1.0)
