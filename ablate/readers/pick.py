"""Choose the score and compute columns of a tool's log, and say what was chosen.

Score (y), first rule that matches wins; two matches for one rule are ambiguous (--y picks):
    eval/pass_rate                               ablate
    val-core/<data source>/acc/mean@N            verl (the accuracy mean@N of its validation)
    val/test_score/<data source>                 older verl
    eval/rewards/<*acc*|*correct*|*pass*>/mean   TRL (an accuracy reward function, eval split)
    val-core/<data source>/reward/mean@N         verl without an accuracy variable
    eval/reward                                  TRL (the weighted reward sum, eval split)
    eval/accuracy, eval/acc, eval/pass@1         common names
(TRL/HF write "eval_x" in JSON logs and "eval/x" in TensorBoard; both match.) A W&B export of
one chart has one metric: that is the score.

Compute (x): --step-cost C makes compute = step x C. Otherwise the first of: gpu_hours, flops
(ablate); num_tokens (TRL: cumulative tokens); the running sum of verl's per-step
perf/total_num_tokens; a W&B chart's x axis when it is not a step; else the step itself
(A and B do not depend on a constant per-step cost; C_mid and budgets are then in steps).
Where compute was logged at other steps than the score (TRL logs train and eval rows
separately), it is interpolated over the step.
"""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ablate.errors import InputError
from ablate.readers.common import Wide, is_band, split_seed
from trainer.rundir import FLOPS, GPU_HOURS, PASS_RATE, STEP

# ablate's own run-dir columns (trainer/rundir.py) first, then other tools' names.
SCORE_RULES = [re.escape(PASS_RATE), r"val-core/.+/acc/mean@\d+", r"val/test_score/.+",
               r"eval[/_]rewards/[^/]*(?:acc|correct|pass)[^/]*/mean",
               r"val-core/.+/reward/mean@\d+", r"eval[/_]reward",
               r"eval[/_](?:accuracy|acc|pass@1)"]
CUMULATIVE = [re.escape(GPU_HOURS), re.escape(FLOPS), r"(?:train/)?num_tokens"]
PER_STEP = [r"perf/total_num_tokens"]
STEP_AXES = {STEP, "_step", "global_step", "trainer/global_step", "train/global_step"}


@dataclass
class Picked:
    """Curves in long form: columns variant, seed, and the chosen x and y."""

    frame: pd.DataFrame
    x: str
    y: str
    notes: list[str] = field(default_factory=list)


def _matches(rules: list[str], cols: list[str]) -> tuple[Optional[str], list[str]]:
    for rule in rules:
        hits = [c for c in cols if re.fullmatch(rule, c)]
        if hits:
            return rule, hits
    return None, []


def _listing(cols: list[str]) -> str:
    more = f" (+{len(cols) - 25} more)" if len(cols) > 25 else ""
    return ", ".join(cols[:25]) + more


def _score(cols: list[str], src: str, y: Optional[str]) -> tuple[str, str]:
    if y is not None:
        if y not in cols:
            raise InputError(f"{src}: no metric {y!r} for --y; metrics: {_listing(cols)}")
        return y, "as given"
    cols = [c for c in cols if not is_band(c)]  # `ablate watch`'s band is never the score
    if len(cols) == 1:
        return cols[0], "the only metric"
    rule, hits = _matches(SCORE_RULES, cols)
    if not hits:  # one evaluation column that stands out is the score
        hits = [c for c in cols if re.match(r"(?:eval|val|test)[/_]", c)]
        if len(hits) == 1:
            return hits[0], "the only evaluation metric"
    if len(hits) > 1:
        raise InputError(f"{src}: several score metrics fit; pass one of "
                         + " or ".join(f"--y {h}" for h in hits[:6]))
    if not hits:
        raise InputError(f"{src}: no score metric recognised (e.g. eval/pass_rate, verl "
                         f"val-core/<src>/acc/mean@N, TRL eval/reward); pass --y NAME with "
                         f"one of: {_listing(cols)}")
    return hits[0], "auto-detected"


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
         step_cost: Optional[float] = None, kind: str = "log") -> Picked:
    df = wide.frame
    cols = [c for c in df.columns if c not in ("run", "step")]
    if not cols or df.empty:
        raise InputError(f"{src}: {kind} holds no metrics")
    if step_cost is not None and not (step_cost > 0 and np.isfinite(step_cost)):
        raise InputError(f"--step-cost {step_cost}: must be a finite compute per step > 0")
    if step_cost is not None and x not in (None, "step"):
        raise InputError("give either --x (a compute metric) or --step-cost (compute per "
                         "step), not both")
    y_col, how_y = _score(cols, src, y)
    df = df.sort_values(["run", "step"], kind="stable").reset_index(drop=True)
    step = df["step"].to_numpy(dtype=float)
    notes = []
    if x is not None and x != "step" and x not in cols:
        raise InputError(f"{src}: no metric {x!r} for --x; metrics: {_listing(cols)} (or "
                         "--x step, or --step-cost C for compute = step x C)")
    if step_cost is not None or x == "step":
        x_name = "step" if step_cost is None else f"step x {step_cost:g}"
        xv = step * (step_cost or 1.0)
        how_x = "as given"
    elif x is not None:
        x_name, xv, how_x = x, df[x].to_numpy(dtype=float), "as given"
    else:
        _, cum = _matches(CUMULATIVE, cols)
        _, per = _matches(PER_STEP, cols)
        if cum:
            x_name, how_x = cum[0], "auto-detected"
            xv = np.concatenate([_fill_over_step(g["step"].to_numpy(float), g[x_name])
                                 for _, g in df.groupby("run", sort=False)])
        elif per:
            x_name, how_x = f"{per[0]} (running sum)", "auto-detected, summed over steps"
            xv = df.groupby("run", sort=False)[per[0]].transform(
                lambda s: s.fillna(0).cumsum()).to_numpy(dtype=float)
        elif wide.step_name not in STEP_AXES and wide.step_name != "Step":
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
