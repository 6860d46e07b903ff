"""Debug executor: runs every job in this process, in order, when submitted.

Use it to step through a run with a debugger: submitit's DebugExecutor opens a post-mortem
pdb on an exception. Nothing runs in the background, so `ablate sweep` returns when done.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import submitit

from ablate.studies.launch.executor import Capacity, RunResources
from ablate.studies.launch.job import RunJob, stdout_to_stderr
from ablate.validation import Strict
from ablate.adapters.builtin import JobShape, Limits

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


UNAVAILABLE = "cannot happen: debug jobs run inside this process"
DEFAULT_PREFERENCE = None  # only when asked for: it blocks the command until all is done
CHOSEN_BECAUSE = ""
SHARES_JOBS = False
RUNS_IN_SUBMIT = True
STOP_DEQUEUES = False


class Section(Strict):
    """The profile's `debug:` section: no settings (every run trains in this process)."""


def available() -> bool:
    """Always: jobs run in this process."""
    return True


def job_shape(profile: Profile) -> JobShape:
    """One process; GPUs not known here (the trainer checks at start)."""
    return JobShape(gpu_memory_gib=profile.gpu_memory_gib, gpu_model=profile.gpu_model)


def limits(profile: Profile) -> Limits:
    """In-process: no limit."""
    return Limits(gpu_model=profile.gpu_model)


def capacity(profile: Profile) -> Capacity:
    return Capacity("debug", 1, "one at a time (in this process)")


def describe(profile: Profile, cap: Capacity) -> dict[str, Any]:
    return dict(runs_at_once=1, gpu_memory_gib=profile.gpu_memory_gib)


def sentence(info: dict[str, Any]) -> str:
    return ": in this process, one run after another"


def stop_command(job_ids: list[str]) -> str:
    return ""  # they ended before submit() returned


def submit(runs: list[RunResources], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """Run each run's job now, in this process; the profile has no debug settings."""
    ex = submitit.DebugExecutor(folder=folder)
    out: dict[str, str] = {}
    for d in (r.run_dir for r in runs):
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
