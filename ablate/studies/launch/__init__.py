"""Launching: the executors, registered by name in `EXECUTORS`, and what shared code asks them.

Each executor is one module implementing the `Executor` protocol (ablate/studies/launch/
executor.py): its profile section, job shape and limits, runs at once, the dry run's words,
submission, job states, stop, and whether it is usable here. A new executor is one such
module plus its line in `EXECUTORS` (tests/test_executors.py checks each against the
protocol; tests/test_executor_names.py that no shared module names one). Job ids are prefixed
with their executor's name (`slurm:123_4`, `local:4567`) so `ablate status` asks the right
scheduler. Profile validation, the `--executor` check, the default, submission and status
all read this one table; so do the modules that ask for an optional capability (`gpu_nodes`).

    executor.py   the Executor protocol and its optional capabilities (GpuNodes)
    profile.py    launch profiles (sweeps/*.yaml): which executor, one section each
    job.py        the callable every job runs: its runs in order, requeued on preemption
    local.py      background processes on this machine (submitit's LocalExecutor)
    debug.py      every job in this process, in order (a debugger's post-mortem)
    slurm.py      Slurm job arrays (submitit); slurm_profile.py: its `slurm:` section, job
                  shape and words; slurm_nodes.py: a partition's usable nodes (`sinfo`);
                  slurm_gpu_nodes.py: its GpuNodes capability
    ray.py        each run a Ray job; ray_job.py: what that job runs on every rank
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ablate.errors import InputError
from ablate.studies.entry import TRAINER_ENTRY
from ablate.studies.launch import debug, local, ray, slurm
from ablate.studies.launch.executor import Executor, GpuNodes, RunResources

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

EXECUTORS: dict[str, Executor] = {"local": local, "slurm": slurm, "debug": debug, "ray": ray}

# Job states (Slurm's words, the one vocabulary every executor maps its own onto) that mean
# "this job will still run or is running".
ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING"}


def check_executor(name: str) -> None:
    """InputError naming the valid executors when `name` is not one of them."""
    if name not in EXECUTORS:
        raise InputError(f"--executor: unknown executor '{name}' (valid: {', '.join(EXECUTORS)})")


def pick(requested: Optional[str], profile: Profile) -> tuple[str, str]:
    """(executor, why that one): --executor, else the profile's, else the one rule: of the
    executors usable here, the one of lowest DEFAULT_PREFERENCE. Says when a named one would
    not work here (the dry run shows it; choose_executor refuses it)."""
    name = requested or profile.executor
    if name:
        why = "--executor" if requested else "the profile's executor"
        mod = EXECUTORS.get(name)
        if mod is not None and not mod.available():
            why += f"; not usable here: {mod.UNAVAILABLE}"
        return name, why
    ranked = sorted((m.DEFAULT_PREFERENCE, n) for n, m in EXECUTORS.items()
                    if m.DEFAULT_PREFERENCE is not None)
    for _, n in ranked:
        if EXECUTORS[n].available():
            return n, EXECUTORS[n].CHOSEN_BECAUSE
    raise AssertionError("no default executor is available")  # the fallback always is


def choose_executor(requested: Optional[str], profile: Profile) -> str:
    """pick()'s executor, refused (InputError) when it is not usable here."""
    name = requested or profile.executor
    if name is not None:
        check_executor(name)
        mod = EXECUTORS[name]
        if not mod.available():
            raise InputError(f"--executor {name}: {mod.UNAVAILABLE}")
    return pick(requested, profile)[0]


def gpu_nodes(name: Optional[str] = None) -> Optional[GpuNodes]:
    """The executor that sizes runs in GPU nodes (executor.GpuNodes: `sweep --within`, the
    GPU-need check): `name`'s when it does (None when it does not); with no name the first
    registered that does, for words about where such runs would go (None: none does)."""
    if name is not None:
        mod = EXECUTORS.get(name)
        return mod if isinstance(mod, GpuNodes) else None
    return next((m for m in EXECUTORS.values() if isinstance(m, GpuNodes)), None)


def executor_of(job_id: str) -> Optional[Executor]:
    """The executor a job id belongs to (its prefix), None for an unknown one."""
    return EXECUTORS.get(job_id.split(":", 1)[0])


def submit(executor: str, runs: list[RunResources], folder: Path, profile: Profile, *,
           entry: str = TRAINER_ENTRY, job_name: str = "ablate") -> dict[str, str]:
    return EXECUTORS[executor].submit(runs, folder, profile, entry=entry, job_name=job_name)


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


def stop_command(job_ids: list[str]) -> str:
    """The command(s) that stop these jobs, each executor's for its own ("" when none)."""
    by_kind: dict[str, list[str]] = {}
    for j in job_ids:
        by_kind.setdefault(j.split(":", 1)[0], []).append(j)
    parts = [EXECUTORS[k].stop_command(ids) for k, ids in by_kind.items() if k in EXECUTORS]
    return " and ".join(p for p in parts if p)
