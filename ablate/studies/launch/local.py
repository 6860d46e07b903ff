"""Local executor: background processes on this machine through submitit's LocalExecutor.

submitit starts every submitted job at once, so to honour `max_parallel` the runs are dealt
into that many jobs, each training its share in order. Processes outlive `ablate sweep`
(submitit's controller is detached), so the command returns and `ablate status` follows them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import submitit

from ablate.studies.launch.job import RunJob

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


UNAVAILABLE = "cannot happen: local jobs run wherever ablate runs"


def available() -> bool:
    """Always: background processes on this machine."""
    return True


def submit(run_dirs: list[Path], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """Start background jobs (profile.local); returns run_id -> job id (the controller's pid)."""
    if not run_dirs:
        return {}
    prof = profile.local
    ex = submitit.LocalExecutor(folder=folder)
    ex.update_parameters(timeout_min=prof.timeout_min, setup=list(prof.setup))
    n = min(prof.max_parallel, len(run_dirs))
    shares = [run_dirs[i::n] for i in range(n)]
    out: dict[str, str] = {}
    for share in shares:
        job = ex.submit(RunJob([str(d) for d in share], entry=entry))
        for d in share:
            out[d.name] = f"local:{job.job_id}"
    return out


def job_states(job_ids: list[str]) -> dict[str, str]:
    """RUNNING while the controller process lives (zombies count as gone), else GONE."""
    out = {}
    for jid in job_ids:
        pid = int(jid.split(":", 1)[1])
        out[jid] = "RUNNING" if _alive(pid) else "GONE"
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a finished child of this very process lingers as a zombie until reaped
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
