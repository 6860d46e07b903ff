"""Local executor: background processes on this machine through submitit's LocalExecutor.

submitit starts every submitted job at once, so to honour `max_parallel` the runs are dealt
into that many jobs, each training its share in order. Processes outlive `ablate sweep`
(submitit's controller is detached), so the command returns and `ablate status` follows them.

Ctrl-C in the terminal of `ablate sweep --wait` stops the waiting, not the runs: the jobs are
background work like a Slurm job, and a Ctrl-C that reached them killed the trainers mid-step
(a traceback from each, queued runs left "interrupted"). The terminal sends SIGINT to its
whole foreground process group, which submitit's controller joins (submitit.local.local.
start_controller: a plain Popen); so the controller is started with SIGINT ignored (an ignored
signal stays ignored across fork and exec, and Python keeps it so), and each job's process
moves to its own process group and takes SIGINT back (`_Detached`), for the trainers it starts.
To stop local jobs: `kill -INT` (or `kill`) their processes (`stop_pids` says which): each run
checkpoints at its next step boundary and reads "stopped"; the next `ablate sweep` resumes it
without counting an attempt.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import submitit
from pydantic import Field

from ablate.studies.launch.executor import Capacity, RunResources
from ablate.studies.launch.job import RunJob
from ablate.validation import Strict
from ablate.adapters.builtin import JobShape, Limits, preempt

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


UNAVAILABLE = "cannot happen: local jobs run wherever ablate runs"
DEFAULT_PREFERENCE = 1  # after Slurm (launch.pick): always available, so the fallback
CHOSEN_BECAUSE = "no executor named and no working Slurm here"
SHARES_JOBS = True  # `max_parallel` shares, each training its runs in turn
RUNS_IN_SUBMIT = False
STOP_DEQUEUES = False  # a signal to a waiting share would end its queued runs as interrupted

# submitit.LocalExecutor.__init__'s max_num_timeout default (submit() does not pass one): a
# local background job is requeued at most this often after timeouts.
LOCAL_MAX_NUM_TIMEOUT = 3


class Section(Strict):
    """The profile's `local:` section."""

    max_parallel: int = Field(
        1, ge=1, description="Runs at once on this machine; the runs are split into this many "
        "background jobs that each run their share one after another."
    )
    timeout_min: float = Field(
        7 * 24 * 60, gt=0, description="Wall-clock limit of one background job (then requeued)."
    )
    setup: list[str] = Field(default_factory=list, description="Shell lines run before each job.")


def available() -> bool:
    """Always: background processes on this machine."""
    return True


def job_shape(profile: Profile) -> JobShape:
    """One process; GPUs not known here (the trainer checks at start)."""
    return JobShape(gpu_memory_gib=profile.gpu_memory_gib, gpu_model=profile.gpu_model)


def limits(profile: Profile) -> Limits:
    """The background job's timeout and submitit's default requeues."""
    return Limits(time_min=profile.local.timeout_min, max_requeues=LOCAL_MAX_NUM_TIMEOUT,
                  gpu_model=profile.gpu_model, time_key="local.timeout_min", requeue_key=None)


def capacity(profile: Profile) -> Capacity:
    n = profile.local.max_parallel
    return Capacity("local", n, f"{n} at once (local.max_parallel)")


def describe(profile: Profile, cap: Capacity) -> dict[str, Any]:
    return dict(timeout_min=profile.local.timeout_min, runs_at_once=cap.runs_at_once,
                gpu_memory_gib=profile.gpu_memory_gib, gpu_model=profile.gpu_model)


def sentence(info: dict[str, Any]) -> str:
    return (f": background jobs on this machine, {info['runs_at_once']} at once, "
            f"{info['timeout_min']:g} min per job")


def submit(runs: list[RunResources], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """Start background jobs (profile.local); returns run_id -> job id (the controller's pid).
    A job is one process on this machine: the runs' resources ask nothing of it."""
    run_dirs = [r.run_dir for r in runs]
    if not run_dirs:
        return {}
    prof = profile.local
    ex = submitit.LocalExecutor(folder=folder)
    ex.update_parameters(timeout_min=prof.timeout_min, setup=list(prof.setup))
    n = min(prof.max_parallel, len(run_dirs))
    shares = [run_dirs[i::n] for i in range(n)]
    out: dict[str, str] = {}
    for share in shares:
        with _sigint_ignored():  # inherited by the controller: the terminal's Ctrl-C misses it
            job = ex.submit(_Detached([str(d) for d in share], entry=entry))
        for d in share:
            out[d.name] = f"local:{job.job_id}"
    return out


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process meanwhile (main thread only: elsewhere signal.signal
    cannot be called, and the children keep the usual disposition)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _Detached(RunJob):
    """A local job's callable: out of the terminal's process group, SIGINT as usual."""

    def __call__(self) -> list[str]:
        try:
            os.setpgid(0, 0)  # the terminal's Ctrl-C goes to its foreground group, not here
        except OSError:  # already a group or session leader: nothing to leave
            pass
        # SIGINT (`kill -INT`, what `ablate sweep`'s Ctrl-C message says) and SIGTERM (a plain
        # `kill`; submitit's own handler would ignore it) stop the run at its next step
        # boundary with a checkpoint: "stopped", resumed by the next `ablate sweep`
        for sig in (signal.SIGINT, signal.SIGTERM):
            preempt.install(sig)
        return super().__call__()


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


CONTROLLER, TASK = "submitit.local._local", "submitit.core._submit"  # what their processes run


def stop_command(job_ids: list[str]) -> str:
    """`kill -INT` of the jobs' task processes (stop_pids says why SIGINT), "" when none
    lives."""
    pids = stop_pids(job_ids)
    return f"kill -INT {' '.join(map(str, pids))}" if pids else ""


def stop_pids(job_ids: list[str]) -> list[int]:
    """The processes to send SIGINT to (`kill -INT`) to stop local jobs: each job's own
    process (submitit's task, which runs the trainer), found under the job's controller.
    Not SIGTERM: submitit's job environment bypasses it in the task (job_environment.py,
    _handle_signals: Slurm sends it before a preemption), so the run would go on; nor the job
    id's pid, which is a shell around the controller when the profile has `setup:` lines.
    The task takes SIGINT as a stop (`_Detached`): its run checkpoints at the next step
    boundary and ends, its controller then ends, and `ablate status` reads the runs as stopped
    (`ablate sweep` resumes them from their checkpoints)."""
    out = []
    for jid in job_ids:
        pid = int(jid.split(":", 1)[1])
        controllers = [pid] if CONTROLLER in _cmdline(pid) else [
            c for c in _children(pid) if CONTROLLER in _cmdline(c)]
        tasks = [t for c in controllers for t in _children(c) if TASK in _cmdline(t)]
        out += tasks
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]
