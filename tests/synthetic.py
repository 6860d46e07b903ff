"""Synthetic training curves with known parameters, written without `ablate`.

The tests' oracle for the curve fitter: the truth is a sigmoid written here from the ScaleRL paper (arXiv 2510.13786),

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B),    R(0) = R0,

and the noise is generated here, so a bug shared by the fitter and a generator that imported
the fitter's own `sigmoid` cannot cancel out. Nothing in this module imports `ablate`.

Two kinds of generator:

* The curves the fitter's tests and the curve benchmarks are seeded on (`Truth`,
  `random_truth`, `curve`, `fast_saturating`, `early_phase`). `curve` is the noise the
  bootstrap was designed around: a fixed
  held-out set of prompts with per-prompt difficulty, binomial samples per prompt, and a
  Gaussian AR(1) drift that starts at zero.

* `noisy_curve(truth, rng, model, ...)`: noise models that break the bootstrap's assumptions
  on purpose (`NOISE_MODELS`):
    "binomial"      only the fixed-prompt binomial sampling noise (no drift at all);
    "student_t"     fixed-prompt binomial plus a heavy-tailed per-evaluation error, Student-t
                    with 3 degrees of freedom (infinite kurtosis: occasional far outliers);
    "drift_offset"  fixed-prompt binomial plus an AR(1) drift that does NOT start at zero: the
                    run's quality is already off the curve at its first evaluation, so the
                    measured starting score R0 is off too;
    "plateau_dip"   fixed-prompt binomial plus a temporary dip of a few points after the curve
                    has bent (a transient instability that recovers), a shape no sigmoid has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NOISE_MODELS = ("binomial", "student_t", "drift_offset", "plateau_dip")


@dataclass(frozen=True)
class Truth:
    A: float
    B: float
    C_mid: float
    R0: float


def sigmoid(c, A: float, B: float, C_mid: float, R0: float):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B), with R(0) = R0 (ScaleRL, arXiv 2510.13786)."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        ratio = np.where(c > 0, C_mid / np.where(c > 0, c, 1.0), np.inf) ** B
    out = R0 + (A - R0) / (1.0 + ratio)  # ratio inf (C = 0) -> R0
    return float(out) if out.ndim == 0 else out


def random_truth(rng: np.random.Generator, c_max: float = 1.0) -> Truth:
    """A plausible recipe: ceiling 0.5-0.75, start 0.05-0.2, C_mid within the run."""
    A = float(rng.uniform(0.5, 0.75))
    B = float(rng.uniform(0.8, 2.5))
    C_mid = float(c_max * rng.uniform(0.08, 0.3))
    R0 = float(rng.uniform(0.05, 0.2))
    return Truth(A=A, B=B, C_mid=C_mid, R0=R0)


# ---------------------------------------------------------------------------------------------
# Noise building blocks


def _shifted(p: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per-prompt pass rates expit(s + d) whose mean is p, for every rate in p at once (one
    row each; bisection on each row's shift s). Vectorised over p: the loop over evaluations
    was most of the coverage tests' time."""
    p = np.asarray(p, dtype=float).reshape(-1, 1)
    lo, hi = np.full_like(p, -20.0), np.full_like(p, 20.0)
    e_d = np.exp(-d)  # exp(-(s + d)) = exp(-s) exp(-d): one exp per row in the search
    for _ in range(40):
        s = 0.5 * (lo + hi)
        below = np.mean(1 / (1 + np.exp(-s) * e_d), axis=1, keepdims=True) < p
        lo, hi = np.where(below, s, lo), np.where(below, hi, s)
    return 1 / (1 + np.exp(-(0.5 * (lo + hi) + d)))


def _fixed_prompts(p: np.ndarray, rng: np.random.Generator, prompts: int, samples: int,
                   difficulty_sd: float) -> np.ndarray:
    """mean@`samples` on one fixed held-out set of `prompts` prompts at each true rate in p.

    Prompts differ in difficulty (centred logit offsets, the same prompts at every
    evaluation); each evaluation's per-prompt rates are shifted so their mean is exactly p."""
    d = rng.normal(0.0, difficulty_sd, prompts)
    d -= d.mean()
    rates = _shifted(p, d)
    out = np.empty(p.size)
    for t in range(p.size):
        out[t] = rng.binomial(samples, rates[t]).sum() / (prompts * samples)
    return out


def _ar1(rng: np.random.Generator, n: int, sd: float, phi: float, start: float = 0.0) -> np.ndarray:
    """AR(1) with stationary sd `sd` and coefficient `phi`, starting at `start`."""
    eta = rng.normal(0.0, sd * np.sqrt(1 - phi**2), n)
    x = np.empty(n)
    x[0] = start
    for t in range(1, n):
        x[t] = phi * x[t - 1] + eta[t]
    return x


# ---------------------------------------------------------------------------------------------
# The curves the fitter's tests and benchmarks are seeded on


def curve(truth: Truth, rng: np.random.Generator, *, c_max: float = 1.0, n_points: int = 100,
          prompts: int = 1000, samples: int = 16, drift_sd: float = 0.006, drift_phi: float = 0.9,
          difficulty_sd: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """One run: compute at n_points evenly spaced evaluations (plus compute 0) and its scores.

    Fixed-prompt binomial noise around the true curve plus a zero-start AR(1) drift of the
    run's quality (stationary sd `drift_sd`)."""
    c = np.linspace(0.0, c_max, n_points + 1)
    drift = _ar1(rng, c.size, drift_sd, drift_phi, start=0.0)
    p = np.clip(sigmoid(c, truth.A, truth.B, truth.C_mid, truth.R0) + drift, 1e-4, 1 - 1e-4)
    return c, _fixed_prompts(p, rng, prompts, samples, difficulty_sd)


def fast_saturating(rng: np.random.Generator, *, n_points: int = 50, c_max: float = 1.0,
                    truth: Truth | None = None, drift_sd: float = 0.006) -> tuple[Truth, np.ndarray, np.ndarray]:
    """A run that rises from its first evaluation and saturates early (C_mid at 1-4% of the
    run; start 0.15-0.35, as after a supervised warm-up)."""
    if truth is None:
        A = float(rng.uniform(0.45, 0.8))
        B = float(rng.uniform(0.6, 1.5))
        C_mid = float(c_max * rng.uniform(0.01, 0.04))
        R0 = float(rng.uniform(0.15, 0.35))
        truth = Truth(A, B, C_mid, R0)
    c, y = curve(truth, rng, c_max=c_max, n_points=n_points, drift_sd=drift_sd)
    return truth, c, y


def early_phase(rng: np.random.Generator, *, n_points: int = 100, c_max: float = 16000.0,
                truth: Truth | None = None, fade: float = 0.1) -> tuple[Truth, np.ndarray, np.ndarray]:
    """The sigmoid `truth` plus a transient early jump (15-35% of the remaining gain within the
    first ~1-2.5% of compute) that fades out by ~`fade` of the run; same noise as `curve`."""
    tr = truth or random_truth(rng, c_max)
    flat = Truth(0.5, 1.0, 1.0, 0.5)  # a flat curve at 0.5: only its noise is used
    c, noise = curve(flat, rng, c_max=c_max, n_points=n_points)
    main = sigmoid(c, tr.A, tr.B, tr.C_mid, tr.R0)
    w, tau = rng.uniform(0.15, 0.35), c_max * rng.uniform(0.01, 0.025)
    jump = w * (tr.A - main) * (1 - np.exp(-c / tau)) * np.exp(-c / (fade * c_max))
    return tr, c, np.clip(main + jump + (noise - 0.5), 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Noise models the bootstrap was not designed around


def noisy_curve(truth: Truth, rng: np.random.Generator, model: str, *, c_max: float = 1.0,
                n_points: int = 80, prompts: int = 1000, samples: int = 16,
                difficulty_sd: float = 1.0, t_scale: float = 0.004, drift_sd: float = 0.006,
                drift_phi: float = 0.9, drift_start_sd: float = 2.0, dip_depth: float = 0.03,
                dip_width: float = 0.06) -> tuple[np.ndarray, np.ndarray]:
    """One run under noise model `model` (see the module docstring); compute 0..c_max at
    n_points + 1 evenly spaced evaluations.

    student_t: per-evaluation error t_scale * t(3) (sd t_scale * sqrt(3)).
    drift_offset: AR(1) (stationary sd drift_sd, coefficient drift_phi) whose first value is
        +-drift_start_sd stationary sds (sign random): the run starts off its curve.
    plateau_dip: a dip of depth dip_depth (a triangle dip_width * c_max wide at its base),
        centred where the true curve has made 85% of its gain (clamped inside the run)."""
    if model not in NOISE_MODELS:
        raise ValueError(f"unknown noise model {model!r}; valid: {', '.join(NOISE_MODELS)}")
    c = np.linspace(0.0, c_max, n_points + 1)
    true = sigmoid(c, truth.A, truth.B, truth.C_mid, truth.R0)
    shift = np.zeros(c.size)
    if model == "drift_offset":
        start = float(rng.choice([-1.0, 1.0])) * drift_start_sd * drift_sd
        shift = _ar1(rng, c.size, drift_sd, drift_phi, start=start)
    elif model == "plateau_dip":
        # compute where the gain is 85% made: (C_mid / C)^B = 0.15 / 0.85
        bent = truth.C_mid * (0.85 / 0.15) ** (1.0 / truth.B)
        centre = min(max(bent, 0.3 * c_max), 0.85 * c_max)
        half = 0.5 * dip_width * c_max
        shift = -dip_depth * np.clip(1.0 - np.abs(c - centre) / half, 0.0, None)
    p = np.clip(true + shift, 1e-4, 1 - 1e-4)
    y = _fixed_prompts(p, rng, prompts, samples, difficulty_sd)
    if model == "student_t":
        y = y + t_scale * rng.standard_t(3, c.size)
    return c, np.clip(y, 0.0, 1.0)
