"""Launching: the executors (local, slurm, debug), registered by name in `EXECUTORS`.

Each executor is a module implementing the `Executor` protocol (ablate/studies/launch/
executor.py): `submit`, `job_states`, `available` and `UNAVAILABLE`. A new executor is one
such module, added to `EXECUTORS` (tests/test_executors.py checks each against the protocol).
Job ids are prefixed with their executor's name (`slurm:123_4`, `local:4567`, `debug:...`) so
`ablate status` asks the right scheduler. Profile validation, the `--executor` check,
submission and status all read this one table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ablate.errors import InputError
from ablate.studies.launch import debug, local, slurm
from ablate.studies.launch.executor import Executor

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

EXECUTORS: dict[str, Executor] = {"local": local, "slurm": slurm, "debug": debug}

# Scheduler states that mean "this job will still run or is running".
ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING"}


def check_executor(name: str) -> None:
    """InputError naming the valid executors when `name` is not one of them."""
    if name not in EXECUTORS:
        raise InputError(f"--executor: unknown executor '{name}' (valid: {', '.join(EXECUTORS)})")


def choose_executor(requested: Optional[str], profile: Profile) -> str:
    """--executor, else the profile's, else slurm where a working Slurm is found, else local."""
    name = requested or profile.executor
    if name is None:
        return "slurm" if slurm.available() else "local"
    check_executor(name)
    mod = EXECUTORS[name]
    if not mod.available():
        raise InputError(f"--executor {name}: {mod.UNAVAILABLE}")
    return name


def submit(executor: str, run_dirs: list[Path], folder: Path, profile: Profile, *,
           entry: str = "trainer:run", job_name: str = "ablate") -> dict[str, str]:
    return EXECUTORS[executor].submit(run_dirs, folder, profile, entry=entry, job_name=job_name)


def job_states(job_ids: list[str]) -> dict[str, str]:
    """STATE per job id, asking each executor about its own jobs (UNKNOWN for an unknown prefix)."""
    out: dict[str, str] = {}
    by_kind: dict[str, list[str]] = {}
    for j in job_ids:
        by_kind.setdefault(j.split(":", 1)[0], []).append(j)
    for kind, ids in by_kind.items():
        mod = EXECUTORS.get(kind)
        out.update(mod.job_states(ids) if mod else {j: "UNKNOWN" for j in ids})
    return out
