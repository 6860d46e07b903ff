"""Per-run state of a study, from the run dirs first and the scheduler second.

The trainer's status.json is the truth for runs that finished (done / diverged / failed) and
for runs the user stopped (`kill -INT`/`kill` of a local job: "stopped" at a checkpoint; such an
attempt is not counted against max_attempts).
For the rest, the job recorded in submissions.json says whether the run is still coming
(queued / running) or was lost (cancelled / failed / interrupted). squeue/sacct only add that
detail; without sacct a vanished job reads as "interrupted", never as an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from ablate.studies import launch
from ablate.studies.launch.job import user_stops
from ablate.studydir import RunState, StudyStore, file_state, last_step
from trainer import rundir
from trainer.rundir import FINAL_STATES, read_status

__all__ = ["FINAL", "RunState", "derive_state", "last_step", "run_states", "study_states",
           "wait_for_runs"]

FINAL = FINAL_STATES  # the trainer's final states, declared once in trainer.rundir
_SCHED_FAILED = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                 "PREEMPTED", "COMPLETED"}  # COMPLETED without status "done" = ended unfinished


def derive_state(status: dict[str, Any], fresh: bool, sub: Optional[dict[str, Any]],
                 sched: Optional[str]) -> str:
    """One state from the file state, whether it is newer than the last submission, and the
    scheduler's view of the last job."""
    fs = status.get("state")
    if fs in FINAL or sub is None:
        return file_state(status)
    if fresh and fs == rundir.RunState.STOPPED:
        return "stopped"  # by the user, at a checkpoint (its job may still be ending)
    ex = launch.executor_of(sub["jobs"][-1])
    if getattr(ex, "RUNS_IN_SUBMIT", False):
        # An executor that trains inside `submit` (debug) does so before submissions.json
        # records the submission time, so its status.json always looks older than the
        # submission: a run that failed there read as "interrupted", its error hidden. The
        # file is the truth.
        fresh = True
    if sched in launch.ALIVE:
        shared = getattr(ex, "SHARES_JOBS", False)
        if shared and fresh and fs == rundir.RunState.FAILED:
            return "failed"  # its share job is still running the other runs
        if sched == "RUNNING" and (fresh and fs == rundir.RunState.RUNNING or not shared):
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
            job_id=job, attempts=sub["attempts"] - user_stops(status) if sub else 0,
            scheduler=sched.get(job) if job else None,
            error=status.get("error") if state == "failed" else None,
            progress=1.0 if state == rundir.RunState.DONE else status.get("progress"),
        ))
    return out


ACTIVE = ("queued", "running")  # a run that will still change without anyone resubmitting it


def wait_for_runs(study_dir: Path, *, poll_s: float = 2.0, timeout_s: Optional[float] = None,
                  on_update: Optional[Callable[[list[RunState]], None]] = None
                  ) -> list[RunState]:
    """The one wait loop (`sweep --wait`, adaptive stages, tests): poll the study's run states
    until none is queued or running, or `timeout_s` passed; returns the last states.
    `on_update` sees every poll's states (the CLI's live view draws them)."""
    t0 = time.time()
    while True:
        states = study_states(study_dir)
        if on_update is not None:
            on_update(states)
        if not any(s.state in ACTIVE for s in states) or (
                timeout_s is not None and time.time() - t0 > timeout_s):
            return states
        time.sleep(poll_s)
