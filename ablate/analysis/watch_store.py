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
watch`'s side (ablate/analysis/watch_trackers.py). `ablate status` and the report read the
verdict of the study's axis from here (`status_verdicts`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class RunWatch:
    """One run's watch column: the verdict against its watch.json's forecast ("" when none,
    "?" when that file is damaged) and its fall from its own peak (ablate.analysis.sag)."""

    verdict: str = ""
    fall: Optional[Any] = None  # sag.Fall

    @property
    def cell(self) -> str:
        """"departed, fell 0.83→0.70": the table's cell."""
        fell = "" if self.fall is None else self.fall.short()
        return ", ".join(p for p in (self.verdict, fell) if p)

    def as_json(self) -> dict[str, Any]:
        return {"watch": self.verdict or None,
                "fell": None if self.fall is None else self.fall.as_json()}


def status_verdicts(study_dir: Path, run_ids: list[str]) -> list[RunWatch]:
    """The watch column of `ablate status` and of the report's runs: each run judged on its
    metrics now, on the study's axis (fit.x, fit.y). A run with a forecast in its watch.json
    is held to it (no refit, but a provisional one the run has outgrown is renewed: the rule
    of `ablate watch`); a run that fell from its own peak (ablate.analysis.sag, the rule compare
    names) says so, watched or not ("fell 0.83→0.70"); an empty cell for a run with neither
    (nobody watched it on that axis yet, and it has not fallen); "?" for a damaged file."""
    from ablate.analysis.gather import study_fit
    from ablate.errors import InputError
    from trainer import rundir

    x, y = study_fit(Path(study_dir)).axes()
    out = []
    for rid in run_ids:
        d = Path(study_dir) / rid
        try:
            rows = rundir.read_metrics(d) if (d / rundir.METRICS).is_file() else []
        except rundir.MetricsError:
            out.append(RunWatch("?"))
            continue
        pts = [(float(r[x]), float(r[y])) for r in rows
               if isinstance(r.get(x), (int, float)) and isinstance(r.get(y), (int, float))]
        c, s = (list(v) for v in zip(*pts)) if pts else ([], [])
        doc = read(d, x, y)
        if doc is None:
            from ablate.analysis.sag import fall_from_peak

            out.append(RunWatch("", fall_from_peak(c, s) if pts else None))
            continue
        from ablate.analysis import watch as w  # the fit: only once a forecast exists

        try:
            j = w.judge(rid, rid, 0, c, s, k=int(doc["k"]), level=float(doc["level"]),
                        frozen=doc["forecasts"], with_today=False)
        except (KeyError, TypeError, ValueError, InputError):
            out.append(RunWatch("?"))  # a damaged watch.json: `ablate watch` rewrites it
            continue
        out.append(RunWatch(j.verdict, j.fall))
    return out
