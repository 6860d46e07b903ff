"""Ray executor: each run a Ray job on a running Ray cluster (KubeRay, `ray start`, Anyscale).

Why jobs, not tasks: a Ray job runs a shell command as its own process tree under the
cluster's job supervisor, with its own logs, status and stop, and outlives `ablate sweep`
like a Slurm job; the trainer needs nothing from Ray inside. Through Ray's job API
(`ray.job_submission.JobSubmissionClient`, ray/dashboard/modules/job/sdk.py in ray 2.60.0):
`submit_job` (sdk.py:133) with a `submission_id` unique to the run and the attempt (Ray
refuses an id it has seen, sdk.py:192), `entrypoint_num_cpus`/`entrypoint_num_gpus` (the
entrypoint process is scheduled where those are free, and waits PENDING until they are) and
`runtime_env={"env_vars": ...}`; `get_job_status` (sdk.py:425); `stop_job` (sdk.py:271).

A run of several ranks is one job whose entrypoint is `torchrun --standalone
--nproc-per-node N`: torchrun gives each rank RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT, which trainer/dist/groups.py reads (launcher "torchrun"). So a run lives on one
node of the cluster: `ray.nodes` above 1 is refused in one line (a multi-node run needs a
placement group per run and a rendezvous across its bundles; docs/cluster.md).

Stop: `stop_job` sends SIGTERM to the entrypoint and every process under it
(job_supervisor.py:394-411), then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s by default;
each job gets the profile's `stop_wait_s` in its env_vars, which reach the supervisor actor:
job_manager.py _get_supervisor_runtime_env). The trainer answers SIGTERM by checkpointing
at its next step boundary (trainer/dist/preempt.py) and the run reads "stopped"; the next
`ablate sweep` submits it again under a new id and it resumes from that checkpoint.

Job ids are `ray:<submission_id>@<address>`, so `ablate status` asks the right cluster
without the profile. Ray's dashboard and job API have no authentication of their own:
reach a cluster through its own authenticated address or an SSH tunnel (docs/cluster.md).
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pydantic import Field

from ablate.errors import InputError
from ablate.studies.launch.executor import Capacity, RunResources
from ablate.validation import Strict
from ablate.adapters.builtin import JobShape, Limits

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

UNAVAILABLE = ("Ray's job client is not installed here (pip install 'ablate[ray]', which "
               "installs ray[default]); or use --executor local or slurm")
DEFAULT_PREFERENCE = None  # only when named: a cluster address is the user's to give
CHOSEN_BECAUSE = ""
SHARES_JOBS = False  # one job per run
RUNS_IN_SUBMIT = False
STOP_DEQUEUES = True  # `ray job stop` of a PENDING job ends it before it starts

# Ray's job states onto the shared words (launch.ALIVE; status.py reads CANCELLED as a stop
# the user asked for, FAILED and COMPLETED-without-done as a failure).
STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING", "STOPPED": "CANCELLED",
          "SUCCEEDED": "COMPLETED", "FAILED": "FAILED"}


class Section(Strict):
    """The profile's `ray:` section."""

    address: Optional[str] = Field(
        None, description="The cluster's job API (dashboard) address, e.g. http://127.0.0.1:8265 "
        "through an SSH tunnel. None: the RAY_ADDRESS environment variable.")
    nodes: int = Field(1, ge=1, description="Nodes per run: 1 (a run's ranks share a node; "
                       "more is refused, see docs/cluster.md).")
    ranks_per_node: int = Field(1, ge=1, description="Training processes per run, started "
                                "by torchrun (RANK/WORLD_SIZE/MASTER_ADDR for the trainer).")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per run (0: a CPU job).")
    cpus_per_rank: int = Field(1, ge=1, description="CPU cores per rank (the job reserves "
                               "ranks x this, plus its vLLM engines' cores on a GPU job).")
    runs_at_once: int = Field(1, ge=1, description="This study's runs the cluster holds at "
                              "once (its free resources over one run's): the dry run's study "
                              "wall time plans by it; Ray starts each job when it fits.")
    stop_wait_s: int = Field(120, ge=1, description="Seconds `ray job stop` waits after "
                             "SIGTERM before SIGKILL (RAY_JOB_STOP_WAIT_TIME_S): time for the "
                             "trainer to checkpoint its last finished step.")
    python: Optional[str] = Field(None, description="Python on the cluster's nodes, with ablate "
                                  "installed (None: the one running `ablate sweep`).")
    setup: list[str] = Field(default_factory=list, description="Shell lines run before "
                             "each job's trainer (venv activate, exports).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables "
                                "of each job (runtime_env env_vars).")


def available() -> bool:
    """Whether Ray's job client imports here (the `ray` extra); the cluster itself is asked at
    submit, where an unreachable address is one line."""
    try:
        import ray.job_submission  # noqa: F401
    except ImportError:
        return False
    return True


def job_shape(profile: Profile) -> JobShape:
    r = profile.ray
    return JobShape(nodes=r.nodes, ranks_per_node=r.ranks_per_node,
                    gpus_per_node=r.gpus_per_node, gpu_memory_gib=profile.gpu_memory_gib,
                    gpu_model=profile.gpu_model)


def limits(profile: Profile) -> Limits:
    """A Ray job has no time limit: the run goes until done, stopped or failed."""
    return Limits(gpu_model=profile.gpu_model)


def capacity(profile: Profile) -> Capacity:
    n = profile.ray.runs_at_once
    return Capacity("ray", n, f"{n} at once (ray.runs_at_once)")


def address(profile: Profile) -> Optional[str]:
    """The profile's address, else RAY_ADDRESS (None: neither)."""
    return profile.ray.address or os.environ.get("RAY_ADDRESS") or None


def describe(profile: Profile, cap: Capacity) -> dict[str, Any]:
    r = profile.ray
    return dict(address=address(profile), nodes=r.nodes, ranks_per_node=r.ranks_per_node,
                gpus_per_node=r.gpus_per_node, cpus_per_rank=r.cpus_per_rank,
                gpu_memory_gib=profile.gpu_memory_gib, gpu_model=profile.gpu_model,
                runs_at_once=cap.runs_at_once)


def sentence(info: dict[str, Any]) -> str:
    where = (f"on the cluster at {info['address']}" if info["address"] else
             "on no cluster yet (set ray.address or RAY_ADDRESS)")
    ranks = info["ranks_per_node"]
    how = "one process" if ranks == 1 else f"{ranks} ranks under torchrun"
    return (f": a Ray job per run {where}, {how} with "
            f"{info['gpus_per_node']} GPUs and {ranks * info['cpus_per_rank']} CPUs; "
            f"{info['runs_at_once']} at once (ray.runs_at_once), no time limit")


def _client(addr: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(addr)


def entrypoint(run: RunResources, profile: Profile, entry: str) -> str:
    """The job's shell command: the setup lines, then the job module (ray_job.py) on the run
    dir, under torchrun when the run has more than one rank."""
    r = profile.ray
    py = shlex.quote(r.python or sys.executable)
    job = f"-m ablate.studies.launch.ray_job {shlex.quote(str(run.run_dir))} {shlex.quote(entry)}"
    if r.ranks_per_node == 1:
        cmd = f"{py} {job}"
    else:  # --standalone: a rendezvous on this node at a free port (MASTER_ADDR/PORT)
        cmd = (f"{py} -m torch.distributed.run --standalone --nnodes 1 "
               f"--nproc-per-node {r.ranks_per_node} {job}")
    return " && ".join([*r.setup, cmd])


def submit(runs: list[RunResources], folder: Path, profile: Profile, *, entry: str,
           job_name: str) -> dict[str, str]:
    """One Ray job per run, each under a new submission id; InputError (nothing submitted
    after it) when the address is missing or the cluster refuses."""
    if not runs:
        return {}
    r = profile.ray
    if r.nodes > 1:
        raise InputError(f"ray.nodes: {r.nodes}: a Ray run is one job on one node (torchrun "
                         "starts its ranks); use ray.nodes: 1 and ray.ranks_per_node, or "
                         "Slurm for multi-node runs")
    addr = address(profile)
    if not addr:
        raise InputError("ray.address is not set and RAY_ADDRESS is empty: give the cluster's "
                         "job API address (e.g. http://127.0.0.1:8265 through an SSH tunnel)")
    try:
        client = _client(addr)
    except Exception as e:  # noqa: BLE001 - any failure to reach it is the one line below
        raise InputError(f"ray.address {addr}: no Ray job API answers there "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
    env = {"RAY_JOB_STOP_WAIT_TIME_S": str(r.stop_wait_s), **r.env}
    out: dict[str, str] = {}
    for run in runs:
        cpus = r.ranks_per_node * r.cpus_per_rank + (run.engine_cores if r.gpus_per_node else 0)
        sid = f"{job_name}-{run.run_dir.name}-{uuid.uuid4().hex[:8]}"  # never reused
        try:
            client.submit_job(entrypoint=entrypoint(run, profile, entry), submission_id=sid,
                              entrypoint_num_cpus=cpus, entrypoint_num_gpus=r.gpus_per_node,
                              runtime_env={"env_vars": env},
                              metadata={"ablate_run_dir": str(run.run_dir)})
        except Exception as e:  # noqa: BLE001 - the cluster refused: say what it said
            if out:  # jobs already started stay recorded only if all go: stop them
                for jid in out.values():
                    _stop(jid)
            raise InputError(f"the Ray cluster at {addr} refused the job ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:160]}); check the profile's ray "
                             "section") from None
        out[run.run_dir.name] = f"ray:{sid}@{addr}"
    return out


def _parse(job_id: str) -> tuple[str, str]:
    """`ray:SID@ADDRESS` -> (SID, ADDRESS)."""
    sid, _, addr = job_id.split(":", 1)[1].partition("@")
    return sid, addr


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Each job's state from its cluster (GONE: the cluster no longer knows it; UNKNOWN: the
    cluster does not answer, and the run dir's files decide)."""
    out: dict[str, str] = {}
    clients: dict[str, Any] = {}
    for jid in job_ids:
        sid, addr = _parse(jid)
        try:
            if addr not in clients:
                clients[addr] = _client(addr)
            client = clients[addr]
        except Exception:  # noqa: BLE001 - no answer: the files decide
            clients[addr] = None
        if clients.get(addr) is None:
            out[jid] = "UNKNOWN"
            continue
        try:
            state = str(getattr(client.get_job_status(sid), "value", ""))
        except Exception:  # noqa: BLE001 - RuntimeError "does not exist" and the like
            out[jid] = "GONE"
            continue
        out[jid] = STATES.get(state, "UNKNOWN")
    return out


def _stop(job_id: str) -> None:
    sid, addr = _parse(job_id)
    try:
        _client(addr).stop_job(sid)
    except Exception:  # noqa: BLE001 - best effort while undoing a refused submission
        pass


def stop_command(job_ids: list[str]) -> str:
    """`ray job stop` of each job: SIGTERM, the trainer checkpoints, the run reads stopped."""
    return " && ".join(f"ray job stop --address {shlex.quote(a)} {shlex.quote(s)}"
                       for s, a in sorted(map(_parse, job_ids)))
