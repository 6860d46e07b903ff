"""The paper's point estimator (`fit_sigmoid(method="paper")`): a grid over (A, C_mid), B by
scipy curve_fit at each pair, lowest SSE kept; the grid is extended while its optimum sits on
an edge, since an optimum on the edge is the grid's answer, not the data's."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from ablate.analysis.fit import PAPER_A_GRID, PAPER_CMID_RANGE, PAPER_GRIDS, PAPER_RUN_GPU_HOURS
from ablate.errors import InputError


def paper_cmid_grid(max_compute: float, unit: str = "relative") -> np.ndarray:
    """The paper's 100 C_mid values, linear in [100, 40000] GPU-hours.

    unit "gpu-hours": verbatim (the data is in paper-scale GPU-hours). "relative": multiplied by
    max_compute / 16000, i.e. placed where the grid sits relative to the paper's 16k-GPU-hour
    runs, whatever the compute unit (FLOPs, steps, device-hours).
    """
    if unit not in PAPER_GRIDS:
        raise InputError(f"unknown paper grid unit {unit!r}; valid: {', '.join(PAPER_GRIDS)}")
    lo, hi = PAPER_CMID_RANGE
    scale = 1.0 if unit == "gpu-hours" else max_compute / PAPER_RUN_GPU_HOURS
    return np.linspace(lo * scale, hi * scale, 100)


def fit_paper(x, y, r0, c_max, unit):
    """The paper's grid over (A, C_mid) with scipy curve_fit for B; lowest SSE wins.

    An optimum on the grid's edge is the grid's answer, not the data's (A = 0.450 for a curve
    that never passes 0.07), so the grid is extended on that side and searched again: A by the
    same 0.005 steps down to just above R0 or up to 1.0, C_mid upward by further copies of its
    span (at most 3) and downward by 20 geometric steps to 1/100 of its lowest value. Returns
    (theta, sse, grid): grid records the ranges searched, the extensions and any edge the
    optimum still sits on (then the caller refuses the fit).
    """
    C, yy = np.exp(x), y
    step = 0.005
    A_vals = list(PAPER_A_GRID)
    cm_vals = list(paper_cmid_grid(c_max, unit))
    span = cm_vals[-1] - cm_vals[0]
    results: dict[tuple[float, float], tuple[float, float]] = {}
    extended: list[str] = []
    up_spans = down = 0
    for _ in range(8):
        for A in A_vals:
            for cm in cm_vals:
                if (A, cm) not in results:
                    results[(A, cm)] = _paper_pair(C, yy, r0, A, cm)
        (A, cm), (sse, B) = min(results.items(), key=lambda kv: kv[1][0])
        if not np.isfinite(sse):
            return None, np.inf, None
        edges, grew = [], False
        if A == A_vals[0] and A - step > r0:
            lo = max(r0 + step, step)
            A_vals = [round(v, 3) for v in np.arange(A - step, lo - 1e-9, -step)][::-1] + A_vals
            extended.append("A down"); grew = True
        elif A == A_vals[-1] and A < 1.0:
            A_vals = A_vals + [round(v, 3) for v in np.arange(A + step, 1.0 + 1e-9, step)]
            extended.append("A up"); grew = True
        elif A in (A_vals[0], A_vals[-1]):
            edges.append(f"A={A:.3f} (the bound)" if A >= 1.0 else f"A={A:.3f} (just above R0)")
        if cm == cm_vals[-1] and up_spans < 3:
            cm_vals = cm_vals + list(np.linspace(cm, cm + span, 101)[1:])
            up_spans += 1; extended.append("C_mid up"); grew = True
        elif cm == cm_vals[0] and down < 1:
            cm_vals = list(np.geomspace(cm / 100, cm, 21)[:-1]) + cm_vals
            down += 1; extended.append("C_mid down"); grew = True
        elif cm in (cm_vals[0], cm_vals[-1]):
            edges.append(f"C_mid={cm:.4g} (end of the extended grid)")
        if not grew:
            break
    grid = {"unit": unit, "A": [min(A_vals), max(A_vals), step],
            "C_mid": [float(min(cm_vals)), float(max(cm_vals)), len(cm_vals)],
            "extended": extended, "edge": edges}
    return np.array([A, math.log(B), math.log(cm)]), sse, grid


def _paper_pair(C, yy, r0, A, cm) -> tuple[float, float]:
    """(SSE, B) of the paper's inner step: B by scipy curve_fit at fixed (A, C_mid)."""
    def f(c, B):
        return r0 + (A - r0) / (1 + (cm / c) ** B)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            (B,), _ = curve_fit(f, C, yy, p0=[1.0])
    except (RuntimeError, ValueError, np.linalg.LinAlgError):
        return np.inf, np.nan
    if not (B > 0 and np.isfinite(B)):  # the model needs B > 0; curve_fit is unconstrained
        return np.inf, np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        sse = float(np.sum((yy - f(C, B)) ** 2))
    return (sse if np.isfinite(sse) else np.inf), float(B)
