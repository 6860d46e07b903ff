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
