"""Curves from other tools' logs, read as they are written (no hand conversion).

    W&B CSV export         a chart's "Export CSV": wide, "Step" then "<run> - <metric>" columns
                           (with "__MIN"/"__MAX" companions, which are ignored)
    W&B history export     long: a step column, a run column (run_name), _runtime, one column
                           per metric with blanks where it was not logged
    MLflow tracking dir    mlruns/<experiment>/<run>/metrics/<key>: lines "timestamp value step"
    TensorBoard dir        event files (verl, TRL / HF Trainer, ours); one run per folder
    verl file logger       JSONL lines {"step": N, "data": {metric: value}}
    flat JSONL / HF state  JSONL lines {"step": N, metric: value} (e.g. a TRL `on_log` dump), or
                           an HF/TRL trainer_state.json (its "log_history")

Every reader returns a `Wide` frame (one row per run and step, one column per metric);
`ablate.readers.pick` then chooses the score and compute columns (auto-detected where the
choice is unambiguous, or as given by --x/--y: the rules, shared with plain tables, are
ablate/readers/columns.py), converts steps to compute with a per-step cost when only steps are
logged, and says what it picked. A reader claims a file only by marks of its own format (a CSV
of `run,step,...` with none of W&B's is a plain table, read as one).

    wandb_csv.py, wandb_history.py, mlflow_store.py, tensorboard.py, jsonl_logs.py (verl's
    file logger, flat JSONL, HF trainer_state.json): one reader each, in `READERS` below;
    common.py: the `Wide` frame they return; pick.py and columns.py: the score and compute
    columns
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ablate.readers.common import Wide
from ablate.readers.jsonl_logs import is_hf_state, is_run_log, read_hf_state, read_run_logs
from ablate.readers.mlflow_store import is_mlflow_dir, read_mlflow
from ablate.readers.pick import Picked, pick
from ablate.readers.tensorboard import has_events, read_tensorboard
from ablate.readers.wandb_csv import is_wandb_csv, read_wandb_csv
from ablate.readers.wandb_history import is_wandb_history, read_wandb_history

# (name, "is this that tool's file?", reader), tried in order; long tables (variant/compute/
# score columns) and study dirs are not here: ablate.analysis.sources handles them first.
READERS: list[tuple[str, Callable[[Path], bool], Callable[[Path], Wide]]] = [
    ("W&B CSV export", is_wandb_csv, read_wandb_csv),
    ("W&B history export", is_wandb_history, read_wandb_history),
    ("MLflow tracking dir", is_mlflow_dir, read_mlflow),
    ("TensorBoard logs", has_events, read_tensorboard),
    ("HF/TRL trainer_state.json", is_hf_state, read_hf_state),
    ("JSONL log", is_run_log, read_run_logs),  # verl's, TRL's or anyone's: not said which
]


def detect(path: Path) -> Optional[str]:
    """The name of the reader for `path`, or None when no reader knows it."""
    for name, test, _ in READERS:
        if test(path):
            return name
    return None


def read(path: Path, *, x: Optional[str] = None, y: Optional[str] = None,
         step_cost: Optional[float] = None, by: Optional[str] = None) -> Picked:
    """Read `path` with its reader and pick compute/score (the frame's variants named as
    `by`, the file's own name of its run column, allows); raises InputError on bad input."""
    for name, test, reader in READERS:
        if test(path):
            return pick(reader(path), str(path), x=x, y=y, step_cost=step_cost, kind=name,
                        by=by)
    raise ValueError(f"{path}: no reader")  # callers use detect() first


__all__ = ["READERS", "Picked", "Wide", "detect", "read"]
