"""Debug executor: runs every job in this process, in order, when submitted.

Use it to step through a run with a debugger: submitit's DebugExecutor opens a post-mortem
pdb on an exception. Nothing runs in the background, so `ablate sweep` returns when done.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import submitit

from ablate.studies.launch.job import RunJob, stdout_to_stderr

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


UNAVAILABLE = "cannot happen: debug jobs run inside this process"


def available() -> bool:
    """Always: jobs run in this process."""
    return True


def submit(run_dirs: list[Path], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """Run each run's job now, in this process; the profile has no debug settings."""
    ex = submitit.DebugExecutor(folder=folder)
    out: dict[str, str] = {}
    for d in run_dirs:
        job = ex.submit(RunJob([str(d)], entry=entry))
        out[d.name] = f"debug:{job.job_id}"
        try:
            with stdout_to_stderr():
                job.result()
        except Exception:  # noqa: BLE001 - already recorded as failed in the run dir
            pass
    return out


def job_states(job_ids: list[str]) -> dict[str, str]:
    return {jid: "GONE" for jid in job_ids}  # finished before submit() returned
