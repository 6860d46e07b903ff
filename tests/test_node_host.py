"""A generation node's host under node roles (trainer/generation/node_host.py), its parts that
need no engine: the record a feeder waits for, the node's cores the host takes, and the cores
a Slurm job asks for each task. The run itself: tests/test_node_roles.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ablate.studies.launch import slurm
from ablate.studies.launch.executor import RunResources
from ablate.studies.launch.profile import Profile
from trainer.generation import node_host


def test_a_feeder_connects_only_to_this_attempts_host(tmp_path, monkeypatch):
    """A record left by an earlier attempt of the job (a requeue: another restart count) is
    not this job's host: the feeder waits, then says which file and which job."""
    monkeypatch.setenv(node_host.HOSTS_DIR, str(tmp_path))
    for k, v in {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1", "MASTER_ADDR": "n0",
                 "MASTER_PORT": "29600"}.items():
        monkeypatch.setenv(k, v)
    old = {"job": "77:0:n0:29600", "node": 2, "host": "n2", "port": 1, "authkey": "00"}
    node_host.record_path(2).write_text(json.dumps(old))
    with pytest.raises(RuntimeError, match=r"generation node 2's engine host published nothing "
                       r"at .*node2.json for this job \(77:1:n0:29600\)"):
        node_host.find_host(2, timeout_s=0.3)
    node_host.record_path(2).write_text(json.dumps({**old, "job": "77:1:n0:29600"}))
    assert node_host.find_host(2, timeout_s=0.3)["host"] == "n2"


def _cgroup(tmp_path: Path, line: str, rel: str, name: str, cpus: str) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "cgroup"
    proc.write_text(line + "\n")
    d = tmp_path / "fs" / rel
    d.mkdir(parents=True)
    (d / name).write_text(cpus + "\n")
    return proc, tmp_path / "fs"


def test_the_host_takes_the_steps_cores_on_its_node(tmp_path):
    """The step's cpuset (every task's cores on the node), v2 or v1; the nearest level that
    states one; never narrower than this process's own affinity."""
    own = os.sched_getaffinity(0)
    wide = f"0-{max(own) + 4}"
    proc, root = _cgroup(tmp_path / "v2", "0::/slurm/job_7/step_0/task_0",
                         "slurm/job_7/step_0", "cpuset.cpus.effective", wide)
    assert node_host.node_cpus(proc, root) == set(range(max(own) + 5))
    proc, root = _cgroup(tmp_path / "v1", "3:cpuset:/slurm/uid_0/job_7/step_0",
                         "cpuset/slurm/uid_0/job_7/step_0", "cpuset.effective_cpus", wide)
    (tmp_path / "v1" / "cgroup").write_text("4:memory:/x\n3:cpuset:/slurm/uid_0/job_7/step_0\n")
    assert node_host.node_cpus(proc, root) == set(range(max(own) + 5))
    narrow = str(min(own))
    proc, root = _cgroup(tmp_path / "n", "0::/a", "a", "cpuset.cpus.effective", narrow)
    assert node_host.node_cpus(proc, root) == own  # a cpuset that does not hold us: ignored
    assert node_host._cpu_list("0-2,8,10-11") == {0, 1, 2, 8, 10, 11}


def test_slurm_spreads_a_generation_nodes_engine_cores_over_its_tasks():
    """srun gives every task of a step one count. Per-node split: the task hosting the node's
    engines needs its rank's cores and theirs, so every task asks for both; node roles: the
    generation node's host takes all its node's tasks' cores, so each task asks for its share."""
    prof = Profile.model_validate({"executor": "slurm", "slurm": {
        "nodes": 10, "gpus_per_node": 8, "cpus_per_task": 8, "tasks_per_node": "auto"}})
    split = RunResources(Path("r"), ranks_per_node=2, engine_cores=12)
    roles = RunResources(Path("r"), ranks_per_node=8, engine_cores=16, engine_nodes=True)
    assert slurm.cpus_per_task(split, prof) == 8 + 12
    assert slurm.cpus_per_task(roles, prof) == 8 + 2  # 8 tasks x 2 = the engines' 16
