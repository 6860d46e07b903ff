"""Slurm executor: job arrays through submitit, split to fit the cluster's MaxArraySize.

One array task per run, so a failing or preempted run touches nothing else. submitit writes
the sbatch script (profile values pass through as its parameters, `--signal=USR2@signal_delay_s`
among them) and, because jobs are `Checkpointable`, answers a timeout/preemption signal by
`scontrol requeue` — after the trainer has checkpointed at its next step boundary
(ablate/studies/launch/job.py; the trainer honours the stop inside generation and eval), so
`signal_delay_s` must cover one checkpoint; the job requeues itself `requeue_within` seconds
after the signal if the trainer has not returned by then.
Preemption by a higher-priority job sends the same signal only with the cluster's
`SlurmctldParameters=preempt_send_user_signal` (and a GraceTime that covers the same).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import submitit

from ablate.errors import InputError
from ablate.studies.launch.executor import RunResources
from ablate.studies.launch.job import RunJob
from ablate.studies.launch.slurm_profile import (  # noqa: F401  (the executor's parts)
    Section,
    capacity,
    describe,
    job_shape,
    limits,
    sentence,
)
from ablate.studies.launch.slurm_gpu_nodes import (  # noqa: F401  (its GpuNodes capability)
    CALLED,
    GPU_PROFILE,
    cpu_cores,
    keeps_proposal,
    key,
    nodes_per_run,
    proposal_profile,
    with_study_nodes,
)
from ablate.studies.launch.slurm_nodes import nodes_capacity, study_nodes  # noqa: F401

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default when scontrol says nothing
UNAVAILABLE = "no working Slurm here (`sinfo` missing or failing); use --executor local"
DEFAULT_PREFERENCE = 0  # first (launch.pick): a cluster that answers wins
CHOSEN_BECAUSE = "no executor named; Slurm answers here (`sinfo`)"
SHARES_JOBS = False  # one array task per run
RUNS_IN_SUBMIT = False
STOP_DEQUEUES = True  # scancel dequeues a pending job as well


def available() -> bool:
    """A usable Slurm: `sinfo` exists and answers (a controller is reachable). Asked once per
    process and environment: a configured Slurm whose controller is down takes ~9 s to say
    so, and one command asks more than once (the executor's choice, then its reason)."""
    return _answers(os.environ.get("PATH", ""), os.environ.get("SLURM_CONF", ""))


@functools.lru_cache(maxsize=8)
def _answers(path: str, slurm_conf: str) -> bool:
    """available() for this PATH and SLURM_CONF (the cache key: what decides the answer)."""
    if shutil.which("sinfo", path=path) is None or shutil.which("sbatch", path=path) is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def max_array_size() -> int:
    """MaxArraySize from `scontrol show config` (array indices must stay below it)."""
    try:
        text = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_MAX_ARRAY_SIZE
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE


# `max_num_timeout: auto` for a run the plan cannot derive requeues for (another trainer's
# config, an unknown model shape, no budget): the old fixed default.
AUTO_FALLBACK = 20


def max_num_timeout(runs: list[RunResources], profile: Profile) -> int:
    """submitit's max_num_timeout for these runs: the profile's integer, or under `auto` the
    most any of them needs by its time plan (RunResources.requeues, trainer/plan/time_plan.py
    auto_max_num_timeout). One array shares one executor, so every task gets the largest: it
    is a cap, not a target. submitit stores it in each job's pickle (slurm/slurm.py
    _internal_process_submissions: d.set_timeout(timeout_min, self.max_num_timeout)) and
    requeues after a time limit while that countdown lasts (core/job_environment.py
    checkpoint_and_try_requeue)."""
    cap = profile.slurm.max_num_timeout
    if cap != "auto":
        return int(cap)
    return max((AUTO_FALLBACK if r.requeues is None else r.requeues for r in runs),
               default=AUTO_FALLBACK)


def tasks_per_node(run: RunResources, profile: Profile) -> int:
    """The Slurm tasks of one run's job on each node: the profile's number, or under
    `tasks_per_node: auto` one per training GPU of the run's topology (the split `auto`
    resolves to, as the dry run showed it); a run of another trainer, which has no topology
    here, gets one per GPU."""
    n = profile.slurm.tasks_per_node
    if n != "auto":
        return int(n)
    if run.ranks_per_node is None:
        return max(1, profile.slurm.gpus_per_node)
    return run.ranks_per_node


def cpus_per_task(run: RunResources, profile: Profile) -> int:
    """CPU cores of each task of one run's GPU job: the profile's cpus_per_task, plus the
    cores the vLLM engines of its local rank 0 want (RunResources.engine_cores: one per engine
    process, its EngineCore and each tensor-parallel worker busy-loop one, and one for its
    client in the host: stream driver, output thread, reward scoring). srun gives every task
    of a step the same count, so every task gets the host's. A CPU job (no gpus_per_node: the
    proxy, the test clusters) keeps the profile's: its engines share the rank's cores. Under
    node roles the generation node's host takes the cores of every task of its node (its
    siblings there run nothing: trainer/generation/node_host.py), so each task gets its
    share of the engines' cores, not all of them (8 tasks x 16 more cores would ask a node
    for 128 cores beyond the ranks' own)."""
    base = profile.slurm.cpus_per_task
    if not profile.slurm.gpus_per_node:
        return base
    if run.engine_nodes:
        return base + -(-run.engine_cores // tasks_per_node(run, profile))
    return base + run.engine_cores


def executor(folder: Path, prof: Section, job_name: str,
             max_num_timeout: int, tasks: int, cpus: int | None = None) -> submitit.SlurmExecutor:
    """submitit's executor for runs of `tasks` tasks per node (`tasks_per_node`) of `cpus`
    cores each (cpus_per_task; None: the profile's). The count is given to srun too, as
    --cpus-per-task and SRUN_CPUS_PER_TASK: submitit 1.5.4's srun line carries no
    --cpus-per-task (submitit/slurm/slurm.py:516-524) and Slurm 22.05-23.02's srun does not
    take it from sbatch (23.11+ does), which leaves a task one core per rank or fewer."""
    cpus = prof.cpus_per_task if cpus is None else cpus
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_num_timeout,
                                python=prof.python)
    params = dict(
        job_name=job_name, nodes=prof.nodes, ntasks_per_node=tasks,
        cpus_per_task=cpus, time=prof.time_min, signal_delay_s=prof.signal_delay_s,
        array_parallelism=prof.array_parallelism,
        setup=[f"export SRUN_CPUS_PER_TASK={cpus}"] + list(prof.setup),
        srun_args=[f"--cpus-per-task={cpus}"] + list(prof.srun_args),
        additional_parameters=dict(prof.sbatch),
    )
    if prof.gpus_per_node:
        params["gpus_per_node"] = prof.gpus_per_node
    if prof.mem_gb:
        params["mem"] = f"{int(prof.mem_gb * 1024)}M"
    for key in ("partition", "account", "qos"):
        if getattr(prof, key):
            params[key] = getattr(prof, key)
    ex.update_parameters(**params)
    return ex


def submit(runs: list[RunResources], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """Submit one array task per run (several arrays if above MaxArraySize, or where the runs'
    tasks or cores per node differ under `tasks_per_node: auto`), per profile.slurm."""
    if not runs:
        return {}
    by_tasks: dict[tuple[int, int], list[RunResources]] = {}
    for r in runs:
        by_tasks.setdefault((tasks_per_node(r, profile), cpus_per_task(r, profile)),
                            []).append(r)
    out: dict[str, str] = {}
    for (tasks, cpus), group in by_tasks.items():
        ex = executor(folder, profile.slurm, job_name, max_num_timeout(group, profile), tasks,
                      cpus)
        out.update(_submit_arrays(ex, [r.run_dir for r in group], profile, entry))
    return out


def _submit_arrays(ex: submitit.SlurmExecutor, run_dirs: list[Path], profile: Profile,
                   entry: str) -> dict[str, str]:
    """The runs as arrays of one executor's parameters, each below MaxArraySize."""
    # Balanced chunks (not limit + remainder) so no run is left alone outside an array.
    n_arrays = -(-len(run_dirs) // max(1, max_array_size()))  # indices 0..MaxArraySize-1
    size = -(-len(run_dirs) // n_arrays)
    out: dict[str, str] = {}
    for start in range(0, len(run_dirs), size):
        chunk = run_dirs[start:start + size]
        try:
            with _quiet_stderr(), ex.batch():
                jobs = [ex.submit(RunJob([str(d)], entry=entry,
                                         requeue_within_s=requeue_within(profile.slurm)))
                        for d in chunk]
        except (submitit.core.utils.FailedSubmissionError, submitit.core.utils.FailedJobError) as e:
            # Almost always the profile (partition, account, GPUs...): say what sbatch said.
            lines = [x for x in str(e).splitlines() if "error" in x.lower()] or [str(e)]
            raise InputError(f"sbatch refused the job ({lines[-1].strip()}); check the "
                             "launch profile's slurm section") from None
        for d, job in zip(chunk, jobs):
            out[d.name] = f"slurm:{job.job_id}"
    return out


def requeue_within(prof: Section) -> float:
    """Seconds after USR2 by which the job requeues itself even if the trainer has not
    checkpointed (job.py Fallback): the signal's warning less a margin for submitit's pickle
    and `scontrol requeue` (30 s, or a tenth of a long warning)."""
    return max(1.0, prof.signal_delay_s - max(30.0, 0.1 * prof.signal_delay_s))


@contextlib.contextmanager
def _quiet_stderr():
    """Hold back what sbatch prints on fd 2 and what submitit echoes of it through sys.stderr
    (which is not fd 2 when the caller redirected it, as an in-process caller does): on failure
    the error becomes one InputError line; on success both are passed on unchanged."""
    sys.stderr.flush()
    saved = os.dup(2)
    echoed = io.StringIO()
    with tempfile.TemporaryFile() as buf:
        os.dup2(buf.fileno(), 2)
        ok = False
        try:
            with contextlib.redirect_stderr(echoed):
                yield
            ok = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                buf.seek(0)
                sys.stderr.write(buf.read().decode(errors="replace") + echoed.getvalue())


def _run(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Scheduler state per job: squeue for live jobs, sacct for finished ones, else UNKNOWN.

    A missing or failing sacct is not fatal: the run dir files stay the truth.
    """
    ids = [j.split(":", 1)[1] for j in job_ids]
    if not ids:
        return {}
    mains = sorted({i.split("_")[0] for i in ids})
    found: dict[str, str] = {}
    text = _run(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(mains)])
    for line in (text or "").splitlines():
        jid, _, state = line.strip().partition("|")
        found[jid] = state
    missing = [i for i in ids if i not in found]
    if missing:
        text = _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j",
                     ",".join(sorted({i.split("_")[0] for i in missing}))])
        for line in (text or "").splitlines():
            jid, _, state = line.strip().partition("|")
            if jid in missing:
                found[jid] = state.split()[0] if state else "UNKNOWN"
    return {f"slurm:{i}": found.get(i, "UNKNOWN" if text is None else "GONE") for i in ids}



def stop_command(job_ids: list[str]) -> str:
    """`scancel` of the jobs (an array task `slurm:123_4` cancels as 123_4, the whole array
    as 123): the job's USR2 handler is not involved, the run resumes from its last
    checkpoint on the next sweep."""
    ids = sorted({j.split(":", 1)[1] for j in job_ids})
    return f"scancel {' '.join(ids)}" if ids else ""
