"""The runs `ablate watch TARGET` holds to their forecasts: each run's evaluations, where its
watch.json goes (ablate/analysis/watch_store.py), and how far it is meant to train.

    a run dir        <dir>/metrics.jsonl (trainer.rundir reads it); x and y: the study's fit.x /
                     fit.y when the run dir sits in a study dir (one run, one verdict: the same
                     axis as `ablate watch STUDY`), else gpu_hours and eval/pass_rate
    a study dir      every run of variants.json (ablate.analysis.sources), each with its run dir
    any other SOURCE what `ablate fit` reads (tables, W&B/MLflow/TensorBoard/JSONL logs): one run
                     per (variant, seed); no run dir, so nothing is written
A run dir that has logged no evaluation yet is read as a run with none (its verdict: waiting);
a column that its rows do not have is bad input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ablate.analysis import sources
from ablate.analysis.gather import study_fit
from ablate.errors import InputError
from ablate.study_record import StudyFit
from ablate.studydir import is_study_dir, read_variants
from trainer import rundir


@dataclass
class WatchedRun:
    run: str  # the run id (a run dir's name), or variant[/seed<N>] for logs
    variant: str
    seed: int
    compute: np.ndarray
    score: np.ndarray
    run_dir: Optional[Path]  # where forecast.json goes; None for other tools' logs
    budget: Optional[float]  # compute the run is planned to reach, when its config says
    final: bool  # the run will not train again (done/diverged): --follow stops watching it


def read_runs(target: str | Path, *, x: Optional[str] = None, y: Optional[str] = None,
              step_cost: Optional[float] = None) -> tuple[list[WatchedRun], str, str]:
    """(runs, x column, y column) of TARGET; InputError (one line) when nothing can be read.
    A folder one level off is the study it holds (sources.study_meant, the rule compare reads
    folders by), so its runs keep their run dirs (ids, watch.json, budgets)."""
    p = sources.study_meant(Path(target)) if Path(target).exists() else Path(target)
    if p.is_dir() and not is_study_dir(p) and (p / rundir.METRICS).exists() or \
            p.is_dir() and (p / rundir.STATUS).exists() and not is_study_dir(p):
        fit = study_fit(p.parent) if is_study_dir(p.parent) else StudyFit()
        x, y = fit.axes(x, y)
        return [_run_dir(p, x, y)], x, y
    curves = sources.load(p, x=x, y=y, step_cost=step_cost)
    ids = _run_ids(p) if is_study_dir(p) else {}
    runs = []
    many_seeds = curves.frame.groupby("variant")["seed"].nunique().max() > 1
    for (variant, seed), g in curves.frame.groupby(["variant", "seed"], sort=False):
        g = g.sort_values("compute")
        rid = ids.get((str(variant), int(seed)))
        d = p / rid if rid else None
        runs.append(WatchedRun(
            rid or (f"{variant}/seed{seed}" if many_seeds else str(variant)), str(variant),
            int(seed), g["compute"].to_numpy(float), g["score"].to_numpy(float), d,
            _budget(d, g["compute"].to_numpy(float), curves.x) if d else None,
            bool(d and rundir.is_final(rundir.read_status(d).get("state")))))
    return runs, curves.x, curves.y


def _run_ids(study: Path) -> dict[tuple[str, int], str]:
    return {(str(v["name"]), int(v.get("seed", 0) or 0)): str(v["run_id"])
            for v in read_variants(study)}


def _run_dir(d: Path, x: str, y: str) -> WatchedRun:
    """One of our run dirs: its evaluation rows (rows without the score are training steps)."""
    try:
        rows = rundir.read_metrics(d)
    except rundir.MetricsError as e:
        raise InputError(str(e)) from None
    pts = [(r.get(x), r.get(y)) for r in rows]
    pts = [(float(a), float(b)) for a, b in pts if isinstance(a, (int, float)) and
           isinstance(b, (int, float))]
    cols = sorted({k for r in rows for k in r})
    for col, flag in ((x, "--x"), (y, "--y")):
        if rows and col not in cols and not (col == y and y in rundir.SCORE_COLUMNS):
            raise InputError(f"{d / rundir.METRICS}: no column {col!r} (pass {flag}); "
                             f"columns: {', '.join(cols[:20])}")
    c, s = np.array(pts, float).reshape(-1, 2).T
    bad = (s < 0) | (s > 1)
    if bad.any():
        raise InputError(f"{d / rundir.METRICS}: {y!r} is {s[bad][0]:g}; scores are pass rates "
                         "in [0, 1] (pass --y)")
    ident = rundir.read_identity(d) or {}
    order = np.argsort(c, kind="stable")
    return WatchedRun(d.name, str(ident.get("variant", d.name)), int(ident.get("seed", 0) or 0),
                      c[order], s[order], d, _budget(d, c[order], x),
                      rundir.is_final(rundir.read_status(d).get("state")))


def _budget(d: Path, c: np.ndarray, x: str) -> Optional[float]:
    """The compute the run is planned to reach: its config's budget in the x column's unit
    (budget.gpu_hours / budget.flops), else budget.steps at the compute per step so far; None
    when the config does not say."""
    try:
        plan = rundir.read_config(d)["budget"]
        if plan.get(x) is not None:
            return float(plan[x])
        steps = float(plan["steps"])
        rows = rundir.read_metrics(d)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, rundir.MetricsError):
        return None
    last = [r for r in rows if isinstance(r.get(x), (int, float)) and
            isinstance(r.get(rundir.STEP), (int, float)) and r[rundir.STEP] > 0]
    if not last or c.size == 0:
        return None
    r = last[-1]
    return float(r[x]) / float(r[rundir.STEP]) * steps
