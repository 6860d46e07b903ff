"""The default fit window: where a curve's early phase ends, read from the curve's shape.

The paper skips a run's early, near-linear phase (its first ~1.5k GPU-hours) because that phase
does not follow the sigmoid, and calls the threshold a heuristic. A fixed fraction of the run
(this tool's old rule: skip compute below 10% of the largest) fails both ways: a run that starts
from a supervised warm-up rises from its first evaluation, so skipping 10% of compute leaves the
fit only the plateau (R^2 0.3-0.6 on fast-saturating published runs, or "train longer" refusals
that no amount of training fixes); and the fraction moves with the run's length, so variants of
different lengths were fit on different windows.

The rule here keeps early points *unless the data says they are off the sigmoid*. Candidate
starts are the 1st, 2nd, 3rd, 4th, 6th, 9th, ... distinct compute values (steps growing ~1.5x),
up to the one that leaves the last half of the points (the reference window). For a candidate
start s, two nested models are compared:

    M0: one sigmoid through every point from s on                          (SSE0, n0 points)
    M1: a sigmoid through the reference window, each earlier point free     (SSE1, n1 points)
    F = ((SSE0 - SSE1) / (n0 - n1)) / (SSE1 / (n1 - 3))

i.e. "do the points between s and the reference window lie on a sigmoid with the later data,
once the sigmoid may adjust to them?" The window starts at the earliest candidate whose F is
below `F_CRIT`. Both failure modes above pass this test: a warm-started curve is one sigmoid from
its first point (F ~ 1, nothing skipped), while a transient early phase (a format-learning jump,
a linear ramp the sigmoid cannot follow) leaves its points many noise-widths off any sigmoid that
fits the rest (F >> 1, skipped). The start depends on where the curve conforms, not on how long
the run went on, and the reference window uses the run's own noise as the yardstick (drift
included, as residual variance), so no unit or scale enters.

`F_CRIT` = 4 is not the F distribution's 1% point (~2.5-3 for these degrees of freedom): slow
AR(1) run drift makes neighbouring residuals move together, which fattens F's tail under the null.
With 4, the synthetic benchmark's drifting curves (which follow the sigmoid from compute 0, so
nothing should be skipped) lose points on a few percent of curves, and a paper-shaped early ramp
is cut on nearly all; measured in benchmarks/bench_window.py and benchmarks/RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F_CRIT = 4.0
MIN_POINTS = 5


def candidate_starts(compute: np.ndarray, min_points: int = MIN_POINTS) -> np.ndarray:
    """Indices into the sorted distinct compute values at which a window may start.

    0, 1, 2, 3, 5, 8, 12, ... (each step ~1.5x the last), stopping where the window would keep
    fewer than half of the distinct values or fewer than `min_points`; the last index is the
    reference window's start.
    """
    u = np.unique(np.asarray(compute, float))
    n = u.size
    last = min(n // 2, n - min_points)
    if last <= 0:
        return np.array([0])
    idx, i = [], 0
    while i < last:
        idx.append(i)
        i = max(i + 1, int(round(i * 1.5)))
    idx.append(last)
    return np.array(sorted(set(idx)))


def auto_min_compute(compute: np.ndarray, sse_of: Callable[[float], float],
                     min_points: int = MIN_POINTS, f_crit: float = F_CRIT) -> tuple[float, list[dict]]:
    """The earliest candidate start whose early points are on the sigmoid the later points follow.

    `compute`: the positive compute values in the fit range (all seeds pooled). `sse_of(lo)`:
    SSE of a point fit on the points with compute >= lo (inf when it cannot be fit). Returns the
    chosen minimum compute and the tests made ({"start", "F"}) for reporting.
    """
    c = np.asarray(compute, float)
    u = np.unique(c)
    starts = candidate_starts(u, min_points)
    tried: list[dict] = []
    if starts.size == 1:
        return float(u[0]), tried
    ref = float(u[starts[-1]])
    n1 = int(np.sum(c >= ref))
    sse1 = sse_of(ref)
    if not np.isfinite(sse1) or n1 <= 3:
        return float(u[0]), tried
    s2 = max(sse1 / (n1 - 3), 1e-300)
    for i in starts[:-1]:
        lo = float(u[i])
        n0 = int(np.sum(c >= lo))
        sse0 = sse_of(lo)
        f = (sse0 - sse1) / max(n0 - n1, 1) / s2 if np.isfinite(sse0) else np.inf
        tried.append({"start": lo, "F": float(f)})
        if f < f_crit:
            return lo, tried
    return ref, tried
