"""Choose the score and compute columns of a tool's log, and say what was chosen.

The rules (which names are a score, which a compute, `.` and `/` alike in a given name) are
ablate/readers/columns.py, shared with plain tables. Here: --step-cost C makes compute = step x
C; otherwise a cumulative compute column, else the running sum of verl's per-step
perf/total_num_tokens, else a W&B chart's x axis when it is not a step, else the step itself
(A and B do not depend on a constant per-step cost; C_mid and budgets are then in steps).
Where compute was logged at other steps than the score (TRL logs train and eval rows
separately), it is interpolated over the step. --by takes the file's own name of its run
column (each run a variant, a trailing seed<N> its seed): the only column a log's runs have.
"""

from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ablate.errors import InputError
from ablate.readers.columns import (PER_STEP, STEP_AXES, find_compute, find_score, given,
                                    matches)
from ablate.readers.common import Wide, split_seed


@dataclass
class Picked:
    """Curves in long form: columns variant, seed, and the chosen x and y."""

    frame: pd.DataFrame
    x: str
    y: str
    notes: list[str] = field(default_factory=list)


def _check_by(by: Optional[str], wide: Wide, src: str, kind: str) -> None:
    """--by on a log: its runs are what names a variant, so only its run column is valid."""
    names = [b.strip() for b in (by or "").split(",") if b.strip()]
    runs = {wide.run_column, "run"}
    bad = [b for b in names if b not in runs]
    if bad:
        raise InputError(f"{src}: no column {bad[0]!r} for --by; a {kind} names its runs "
                         f"(--by {wide.run_column}: each run a variant, a trailing seed<N> "
                         "in its name its seed, as without --by)")


def _fill_over_step(step: np.ndarray, v: pd.Series) -> np.ndarray:
    """Interpolate a cumulative quantity over the step where it was not logged (inside its
    logged range only: no extrapolation)."""
    known = v.notna().to_numpy()
    out = v.to_numpy(dtype=float).copy()
    if known.sum() >= 2:
        inside = ~known & (step >= step[known].min()) & (step <= step[known].max())
        out[inside] = np.interp(step[inside], step[known], out[known])
    return out


def pick(wide: Wide, src: str, *, x: Optional[str] = None, y: Optional[str] = None,
         step_cost: Optional[float] = None, kind: str = "log", by: Optional[str] = None
         ) -> Picked:
    df = wide.frame
    cols = [c for c in df.columns if c not in ("run", "step")]
    if not cols or df.empty:
        raise InputError(f"{src}: {kind} holds no metrics")
    if step_cost is not None and not (step_cost > 0 and np.isfinite(step_cost)):
        raise InputError(f"--step-cost {step_cost}: must be a finite compute per step > 0")
    if step_cost is not None and x not in (None, "step"):
        raise InputError("give either --x (a compute metric) or --step-cost (compute per "
                         "step), not both")
    _check_by(by, wide, src, kind)
    y_col = given(y, cols, src, "--y", what="metric")
    how_y = "as given"
    if y_col is None:
        y_col, how_y = find_score(cols, src)
    df = df.sort_values(["run", "step"], kind="stable").reset_index(drop=True)
    step = df["step"].to_numpy(dtype=float)
    notes = []
    x_col = None if x in (None, "step") else given(
        x, cols, src, "--x", "or --x step, or --step-cost C for compute = step x C", "metric")
    if step_cost is not None or x == "step":
        x_name = "step" if step_cost is None else f"step x {step_cost:g}"
        xv = step * (step_cost or 1.0)
        how_x = "as given"
    elif x_col is not None:
        x_name, xv, how_x = x_col, df[x_col].to_numpy(dtype=float), "as given"
    else:
        cum = find_compute([c for c in cols if c != y_col])
        per = matches(PER_STEP, cols)
        if cum:
            x_name, how_x = cum, "auto-detected"
            xv = np.concatenate([_fill_over_step(g["step"].to_numpy(float), g[x_name])
                                 for _, g in df.groupby("run", sort=False)])
        elif per:
            x_name, how_x = f"{per[0]} (running sum)", "auto-detected, summed over steps"
            xv = df.groupby("run", sort=False)[per[0]].transform(
                lambda s: s.fillna(0).cumsum()).to_numpy(dtype=float)
        elif wide.step_name not in STEP_AXES:
            x_name, xv, how_x = wide.step_name, step, "the chart's x axis"
        else:
            x_name, xv = "step", step
            how_x = ("no compute metric found; pass --step-cost C (compute per step) to "
                     "convert; A and B do not depend on it")
    if x_name == y_col:
        raise InputError(f"{src}: --x and --y are the same metric {x_name!r}")
    notes.append(f"{kind}: score = {y_col!r} ({how_y}), compute = {x_name!r} ({how_x})")
    names = [split_seed(str(r), fallback=Path(src).resolve().name) for r in df["run"]]
    pooled = sorted({v for (v, _), r in zip(names, df["run"]) if v != str(r)})
    if pooled:
        notes.append(f"{kind}: a trailing seed<N> in a run's name is its seed: pooled runs of "
                     + ", ".join(pooled[:10]) + (" ..." if len(pooled) > 10 else ""))
    out = pd.DataFrame({"variant": [n for n, _ in names], "seed": [s for _, s in names],
                        x_name: xv, y_col: df[y_col].to_numpy(dtype=float)})
    out = out[out[y_col].notna()].reset_index(drop=True)
    return Picked(out, x_name, y_col, notes)
