"""Per-run state of a study, from the run dirs first and the scheduler second.

The trainer's status.json is the truth for runs that finished (done / diverged / failed).
For the rest, the job recorded in submissions.json says whether the run is still coming
(queued / running) or was lost (cancelled / failed / interrupted). squeue/sacct only add that
detail; without sacct a vanished job reads as "interrupted", never as an error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ablate.errors import InputError
from ablate.studies import launch
from ablate.studies.store import StudyStore
from trainer import rundir
from trainer.rundir import FINAL_STATES, read_status

FINAL = FINAL_STATES  # the trainer's final states, declared once in trainer.rundir
_SCHED_FAILED = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                 "PREEMPTED", "COMPLETED"}  # COMPLETED without status "done" = ended unfinished


@dataclass
class RunState:
    run_id: str
    name: str
    seed: int
    state: str
    step: Optional[int]
    job_id: Optional[str]
    attempts: int = 0
    scheduler: Optional[str] = None
    error: Optional[str] = None
    progress: Optional[float] = None  # share of the run's budget spent (steps, FLOPs or hours)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def last_step(run_dir: Path, status: dict[str, Any]) -> Optional[int]:
    """Step from status.json, else from the last complete row of metrics.jsonl."""
    if isinstance(status.get("step"), int):
        return status["step"]
    try:
        row = rundir.last_metrics_row(run_dir)
    except rundir.MetricsError as e:
        raise InputError(str(e)) from None
    try:
        return int(row[rundir.STEP]) if row is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def derive_state(status: dict[str, Any], fresh: bool, sub: Optional[dict[str, Any]],
                 sched: Optional[str]) -> str:
    """One state from the file state, whether it is newer than the last submission, and the
    scheduler's view of the last job."""
    fs = status.get("state")
    if fs in FINAL:
        return rundir.RunState(fs).value
    if sub is None:
        return "failed" if fs == rundir.RunState.FAILED else "pending"
    if sched in launch.ALIVE:
        local = sub["jobs"][-1].startswith("local:")
        if local and fresh and fs == rundir.RunState.FAILED:
            return "failed"  # its local share job is still running the other runs
        if sched == "RUNNING" and (fresh and fs == rundir.RunState.RUNNING or not local):
            return "running"
        return "queued"
    if fresh and fs == rundir.RunState.FAILED:
        return "failed"
    if sched and sched.startswith("CANCELLED"):
        return "cancelled"
    if sched in _SCHED_FAILED:
        return "failed"
    return "interrupted"


def study_states(study_dir: Path) -> list[RunState]:
    """State of every run of the study's current expansion (variants.json)."""
    store = StudyStore(study_dir)
    return run_states(store, store.variants())


def run_states(store: StudyStore, variants: list[dict[str, Any]]) -> list[RunState]:
    """State of the given variants (dicts with run_id/name/seed) in `store`."""
    subs = store.submissions() if store.root.exists() else {}
    last_jobs = [s["jobs"][-1] for s in subs.values() if s.get("jobs")]
    sched = launch.job_states(last_jobs) if last_jobs else {}
    out = []
    for v in variants:
        rid = v["run_id"]
        d = store.run_dir(rid)
        status = read_status(d)
        sub = subs.get(rid)
        job = sub["jobs"][-1] if sub and sub.get("jobs") else None
        try:
            mtime = (d / rundir.STATUS).stat().st_mtime
        except OSError:
            mtime = 0.0
        fresh = sub is None or mtime >= sub.get("submitted_at", 0)
        state = derive_state(status, fresh, sub, sched.get(job) if job else None)
        out.append(RunState(
            run_id=rid, name=v["name"], seed=int(v.get("seed", 0) or 0), state=state, step=last_step(d, status),
            job_id=job, attempts=sub["attempts"] if sub else 0,
            scheduler=sched.get(job) if job else None,
            error=status.get("error") if state == "failed" else None,
            progress=1.0 if state == rundir.RunState.DONE else status.get("progress"),
        ))
    return out
