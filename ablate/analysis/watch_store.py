"""`<run_dir>/watch.json`: the forecasts `ablate watch` froze for a run, one record per axis.

    {"version": 1, "axes": {"<x> vs <y>": {"x", "y", "k", "level", "verdict", "reason",
       "departed_at", "departure", "evaluations", "notified_departure", "updated",
       "forecasts": [first, ..., the one in force]}}}

One record per (compute column, score column): `ablate watch RUN` and `ablate watch STUDY` judge
a run of a study on the study's `fit.x` (one run, one verdict), and a watch on another axis
(`--x gpu_hours`) gets its own record instead of overwriting that one (issue 41). Renewed
forecasts are appended: the first stays for the record.

This module is the file's one reader and writer. The trainer never reads it (issue 39): the run
dir's trainer files are trainer/rundir.py's, and the band reaches a dashboard from `ablate
watch`'s side (ablate/analysis/watch_trackers.py). `ablate status` reads the verdict of the
study's axis from here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from trainer.rundir import atomic_write

NAME = "watch.json"
VERSION = 1


def axis_key(x: str, y: str) -> str:
    return f"{x} vs {y}"


def read_all(run_dir: Path) -> dict[str, dict]:
    """Every axis' record of the run ({} when none, or the file cannot be read)."""
    try:
        doc = json.loads((Path(run_dir) / NAME).read_text())
    except (OSError, ValueError):
        return {}
    axes = doc.get("axes") if isinstance(doc, dict) else None
    return {k: v for k, v in axes.items() if isinstance(v, dict)} if isinstance(axes, dict) \
        else {}


def read(run_dir: Path, x: str, y: str) -> Optional[dict]:
    """The record of one axis, or None."""
    rec = read_all(run_dir).get(axis_key(x, y))
    ok = rec is not None and isinstance(rec.get("forecasts"), list) and rec["forecasts"]
    return rec if ok else None


def write(run_dir: Path, record: dict[str, Any]) -> None:
    """Replace the record of `record`'s axis, keeping the others, atomically."""
    axes = read_all(run_dir)
    axes[axis_key(record["x"], record["y"])] = {**record, "updated": time.time()}
    atomic_write(Path(run_dir) / NAME, json.dumps({"version": VERSION, "axes": axes}))


def status_verdicts(study_dir: Path, run_ids: list[str]) -> list[str]:
    """`ablate status`'s watch column: each run's verdict against the forecast `ablate watch`
    froze on the study's axis (fit.x, fit.y) in its watch.json, re-judged on the run's metrics
    now (no refit: the band is in the file); "" for a run that has none (nobody watched it on
    that axis yet)."""
    from ablate.analysis.gather import study_fit_defaults
    from ablate.errors import InputError
    from trainer import rundir

    fit = study_fit_defaults(Path(study_dir))
    x, y = fit.get("x", rundir.GPU_HOURS), fit.get("y", rundir.PASS_RATE)
    out = []
    for rid in run_ids:
        d = Path(study_dir) / rid
        doc = read(d, x, y)
        if doc is None:
            out.append("")
            continue
        from ablate.analysis import watch as w  # numpy and the fit: only once a forecast exists

        try:
            rows = rundir.read_metrics(d)
            pts = [(float(r[x]), float(r[y])) for r in rows
                   if isinstance(r.get(x), (int, float)) and isinstance(r.get(y), (int, float))]
            c, s = (list(v) for v in zip(*pts)) if pts else ([], [])
            j = w.judge(rid, rid, 0, c, s, k=int(doc["k"]), level=float(doc["level"]),
                        frozen=doc["forecasts"], with_today=False)
            out.append(j.verdict)
        except (rundir.MetricsError, KeyError, TypeError, ValueError, InputError):
            out.append("?")  # a damaged watch.json: `ablate watch` rewrites it
    return out
