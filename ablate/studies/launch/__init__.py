"""Launching: executors (local, slurm, debug) behind one small dispatch.

Each executor module has `submit(run_dirs, folder, ...) -> {run_id: job_id}` and
`job_states(job_ids) -> {job_id: STATE}`. Job ids are prefixed with their executor
(`slurm:123_4`, `local:4567`, `debug:...`) so `ablate status` can ask the right scheduler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ablate.errors import InputError
from ablate.studies.launch import debug, local, slurm
from ablate.studies.launch.profile import EXECUTORS, Profile

# Scheduler states that mean "this job will still run or is running".
ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING"}


def choose_executor(requested: Optional[str], profile: Profile) -> str:
    """--executor, else the profile's, else slurm where a working Slurm is found, else local."""
    name = requested or profile.executor
    if name is None:
        return "slurm" if slurm.available() else "local"
    if name not in EXECUTORS:
        raise InputError(f"--executor: unknown executor '{name}' (valid: {', '.join(EXECUTORS)})")
    if name == "slurm" and not slurm.available():
        raise InputError("--executor slurm: no working Slurm here (`sinfo` missing or failing); "
                         "use --executor local")
    return name


def submit(executor: str, run_dirs: list[Path], folder: Path, profile: Profile, *,
           entry: str = "trainer:run", job_name: str = "ablate") -> dict[str, str]:
    if executor == "slurm":
        return slurm.submit(run_dirs, folder, profile.slurm, entry, job_name)
    if executor == "local":
        return local.submit(run_dirs, folder, profile.local, entry)
    return debug.submit(run_dirs, folder, entry)


def job_states(job_ids: list[str]) -> dict[str, str]:
    """STATE per job id, asking each executor about its own jobs."""
    out: dict[str, str] = {}
    by_kind: dict[str, list[str]] = {}
    for j in job_ids:
        by_kind.setdefault(j.split(":", 1)[0], []).append(j)
    for kind, ids in by_kind.items():
        mod = {"slurm": slurm, "local": local, "debug": debug}.get(kind)
        out.update(mod.job_states(ids) if mod else {j: "UNKNOWN" for j in ids})
    return out


def cancel(job_ids: list[str]) -> None:
    for j in job_ids:
        kind = j.split(":", 1)[0]
        if kind == "slurm":
            slurm.cancel([j])
        elif kind == "local":
            local.cancel([j])
