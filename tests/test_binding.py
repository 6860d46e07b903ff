"""trainer/dist/binding.py: every process of a GPU job sees exactly the GPUs it owns.

The contract, checked without CUDA by running the trainer's real start-up function
(bind_devices) for every process of a job, from the environment Slurm gives each task: each
training rank sees one GPU (its own, a training GPU), uses cuda:0 and hands DeepSpeed
LOCAL_RANK=0; the local rank 0 of each node that starts engines (every node in pipeline mode,
rank 0's otherwise) is bound to the node's vLLM engines, whose processes see only the node's
generation GPUs (or share the host's GPU when there are none); no two processes share a GPU
otherwise. Which GPUs those are is the job's topology (tests/test_topology.py). The paper's 2-node x 8-GPU profile first, then every split
the validation accepts on 1-, 2-, 4- and 8-GPU nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from trainer.dist.binding import bind_devices, usable_gpus
from trainer.config import TrainConfig
from trainer.validate import JobShape, problems, separate_generation

ROOT = Path(__file__).resolve().parents[1]
PAPER = {"model": {"name_or_path": "Qwen/Qwen2.5-0.5B"}, "rollout": {"backend": "vllm"},
         "off_policy": {"mode": "pipeline"}, "engine": {"type": "deepspeed", "zero_stage": 3}}


def config(mode: str = "pipeline", **vllm) -> TrainConfig:
    """PAPER with `vllm`; the split null (half) unless given: these tests are about binding a
    layout, which split `auto` picks is tests/test_topology.py's (and the paper profile's
    test below binds the split it picks)."""
    vllm = {"generation_gpus": None, **vllm}
    return TrainConfig.model_validate({**PAPER, "off_policy": {"mode": mode},
                                       "rollout": {"backend": "vllm", "vllm": vllm}})


def slurm_env(nodes: int, tasks: int, node: int, local: int, visible: str,
              gib: str = "", model: str = "") -> dict[str, str]:
    """One task's environment as `srun` gives it under --ntasks-per-node/--gpus-per-node, and
    the GPU size and model the default engines and split are chosen for
    (ABLATE_GPU_MEMORY_GIB, ABLATE_GPU_MODEL; "" = unknown, so that no nvidia-smi of the
    machine running the test decides)."""
    return {"SLURM_PROCID": str(node * tasks + local), "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(node), "SLURM_NTASKS": str(nodes * tasks),
            "SLURM_TASKS_PER_NODE": f"{tasks}(x{nodes})" if nodes > 1 else str(tasks),
            "SLURM_JOB_NODELIST": f"gpu[01-{nodes:02d}]", "SLURM_JOB_ID": "4242",
            "CUDA_VISIBLE_DEVICES": visible, "PATH": os.environ.get("PATH", ""),
            "ABLATE_GPU_MEMORY_GIB": gib, "ABLATE_GPU_MODEL": model}


def start_job(c: TrainConfig, nodes: int, tasks: int, visible: str, gib: str = "",
              model: str = ""):
    """bind_devices for every task of the job: [(env after start-up, binding)]."""
    out = []
    for node in range(nodes):
        for local in range(tasks):
            env = slurm_env(nodes, tasks, node, local, visible, gib, model)
            out.append((env, bind_devices(c, env)))
    return out


def check_job(c: TrainConfig, nodes: int, tasks: int, visible: str, gib: str = "",
              model: str = "") -> list:
    node_gpus = visible.split(",")
    procs = start_job(c, nodes, tasks, visible, gib, model)
    assert len(procs) == nodes * tasks
    own = separate_generation(c) and len(node_gpus) >= 2
    for node in range(nodes):
        here = [(env, b) for env, b in procs if b.node == node]
        # one GPU per training rank: its own, seen as cuda:0, LOCAL_RANK 0 for DeepSpeed
        for env, b in here:
            assert env["CUDA_VISIBLE_DEVICES"] == b.gpu and len(b.gpu.split(",")) == 1
            assert b.device == "cuda:0" and env["LOCAL_RANK"] == "0"
            assert env["ABLATE_LOCAL_RANK"] == str(b.local_rank)
            assert env["RANK"] == str(b.rank) and env["WORLD_SIZE"] == str(nodes * tasks)
            assert env["MASTER_ADDR"] == "gpu01"
            assert b.gpu in b.training_gpus and b.gpu not in b.generation_gpus
        train = Counter(b.gpu for _, b in here)
        assert max(train.values()) == 1, train  # never two ranks on one GPU
        hosts = [b for _, b in here if b.hosts_engines]
        if node > 0 and not separate_generation(c):  # rank 0 alone starts engines
            assert hosts == []
            continue
        assert [b.local_rank for b in hosts] == [0]  # the node's first rank, only it
        host = hosts[0]
        engine_gpus = [g for i in range(len(host.engines))
                       for g in host.engine_env(i)["CUDA_VISIBLE_DEVICES"].split(",")]
        if own:  # the node's generation GPUs, each in one engine, none a training GPU
            assert set(engine_gpus) <= set(host.generation_gpus)
            assert len(engine_gpus) == len(set(engine_gpus))
            assert not set(engine_gpus) & set(train) and not host.shared
            assert host.generation_gpus == tuple(node_gpus[:len(host.generation_gpus)])
            for i in range(len(host.engines)):
                assert host.engine_env(i)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
        else:  # no generation GPUs of their own: the engines share the host's one GPU
            assert set(engine_gpus) == {host.gpu} and host.shared
        # a second start-up in the same process changes nothing (idempotent)
        env, b = here[-1]
        assert bind_devices(c, dict(env)) == b
    return procs


def test_paper_profile_2_nodes_x_8_gpus():
    """sweeps/slurm_gpu.yaml (2 nodes x 8 GPUs of 80 GiB, tasks_per_node auto) with
    recipes/scalerl.yaml: the split the dry run plans (6 generate, 2 train, worked out in
    tests/test_topology.py) is the one every process of the launched job binds to. Slurm
    starts the tasks per node that split asks for (ablate/studies/launch/slurm.py
    tasks_per_node), and each process resolves `auto` again at start on the job it is in,
    through the same function."""
    from ablate.studies.launch.profile import load_profile
    from trainer.plan.topology import topology

    prof = load_profile(ROOT / "sweeps" / "slurm_gpu.yaml")
    paper = TrainConfig.model_validate(yaml.safe_load((ROOT / "recipes" / "scalerl.yaml")
                                                      .read_text()))
    planned = topology(paper, prof.job_shape("slurm"))
    nodes, tasks, gpus = prof.slurm.nodes, planned.shape.ranks_per_node, prof.slurm.gpus_per_node
    assert (nodes, tasks, gpus, prof.slurm.tasks_per_node) == (2, 2, 8, "auto")
    job = check_job(paper, nodes, tasks, "0,1,2,3,4,5,6,7", gib="80", model="h100")
    assert [b.gpu for _, b in job] == ["6", "7"] * 2
    assert [b.engines for _, b in job] == [tuple((str(i),) for i in range(6)), ()] * 2
    assert {b.training_gpus for _, b in job} == {tuple(str(i) for i in planned.training)}
    # Half set by hand, 4 tasks a node: GPUs 0-3 of each node generate, 4-7 train.
    tasks = 4
    procs = check_job(config(generation_gpus=4), nodes, tasks, ",".join(map(str, range(gpus))))
    assert [b.gpu for _, b in procs] == ["4", "5", "6", "7"] * 2
    assert [b.engines for _, b in procs] == [(("0", "1", "2", "3"),), (), (), ()] * 2
    assert procs[0][1].engine_env(0)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    # replicas: tensor_parallel_size 1 -> four one-GPU engines per node
    reps = check_job(config(tensor_parallel_size=1), nodes, tasks, "0,1,2,3,4,5,6,7")
    assert [reps[0][1].engine_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(4)] == \
        ["0", "1", "2", "3"]
    # the default on the profile's 80 GiB GPUs: the model fits one GPU -> the same replicas
    sized = check_job(config(), nodes, tasks, "0,1,2,3,4,5,6,7", gib="80")
    assert [b.engines for _, b in sized] == [b.engines for _, b in reps]


def test_slurm_gpu_ids_pass_through_unchanged():
    """Slurm may name a node's GPUs by UUID or give a subset (shared nodes): processes are
    bound to those names, never to an index computed from a rank."""
    uuids = ",".join(f"GPU-{i:08x}" for i in range(8))
    procs = check_job(config(), 2, 4, uuids)
    assert procs[1][1].gpu == "GPU-00000005"
    assert procs[0][1].engine_env(0)["CUDA_VISIBLE_DEVICES"] == ",".join(uuids.split(",")[:4])
    subset = check_job(config(generation_gpus=1), 1, 3, "2,3,6,7")
    assert [b.gpu for _, b in subset] == ["3", "6", "7"]
    assert subset[0][1].engines == (("2",),)


SPLITS = [(mode, gpus, gen, tp, dp) for mode in ("pipeline", "ppo_off_policy")
          for gpus in (1, 2, 4, 8) for gen in (None, 1, 2, 3, 6) for tp in (None, 1, 2, 4)
          for dp in (None, 1, 2)]


def test_every_split_the_validation_accepts():
    checked = 0
    for mode, gpus, gen, tp, dp in SPLITS:
        c = config(mode, generation_gpus=gen, tensor_parallel_size=tp, data_parallel_replicas=dp)
        sep = separate_generation(c) and gpus >= 2
        tasks = gpus - (gen or max(1, gpus // 2)) if sep else gpus
        if tasks < 1 or problems(c, JobShape(nodes=2, ranks_per_node=tasks, gpus_per_node=gpus)):
            continue
        for gib in ("", "80"):  # GPU size unknown (one engine), or the model fits one GPU
            check_job(c, 2, tasks, ",".join(map(str, range(gpus))), gib)
        checked += 1
    assert checked >= 50, checked


def test_a_rank_without_a_gpu_of_its_own_is_refused():
    """A fifth task on a node with 4 training GPUs would share one: refused in one line."""
    with pytest.raises(ValueError, match="local rank 4 has no GPU of its own.*tasks_per_node: 4"):
        bind_devices(config(), slurm_env(1, 5, 0, 4, "0,1,2,3,4,5,6,7"))
    with pytest.raises(ValueError, match="no GPUs"):
        usable_gpus("cuda", ())


def test_cpu_jobs_keep_their_local_rank():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "CUDA_VISIBLE_DEVICES": ""}
    b = bind_devices(TrainConfig.model_validate({"engine": {"device": "cpu"}}), env)
    assert b.device == "cpu" and b.gpu is None and env["LOCAL_RANK"] == "1" and not b.engines


@pytest.mark.slow
def test_start_up_binds_before_cuda_in_a_real_process():
    """The start-up on os.environ in a fresh process (what trainer.loop.train.run does first): the
    variables every later reader sees, and CUDA untouched by it."""
    code = (
        "import json, os, sys\n"
        "from trainer.dist.binding import bind_devices\n"
        "from trainer.config import TrainConfig\n"
        "c = TrainConfig.model_validate(json.loads(sys.argv[1]))\n"
        "b = bind_devices(c)\n"
        "import torch\n"
        "from trainer.dist.groups import read_env\n"
        "d = read_env()\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'LOCAL_RANK',"
        " 'RANK', 'ABLATE_NODE_GPUS')} | {'cuda_started': torch.cuda.is_initialized(),"
        " 'local_rank': d.local_rank, 'node': d.node, 'engines': b.engines}))\n")
    seen = []
    for node, local in ((0, 0), (1, 2)):
        env = {**os.environ, **slurm_env(2, 4, node, local, "0,1,2,3,4,5,6,7"),
               "PYTHONPATH": str(ROOT)}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ABLATE_NODE_GPUS", "ABLATE_LOCAL_RANK",
                  "ABLATE_NODE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        out = subprocess.run([sys.executable, "-c", code, config().model_dump_json()], env=env,
                             capture_output=True, text=True, timeout=120, check=True)
        seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert seen[0] == {"CUDA_VISIBLE_DEVICES": "4", "LOCAL_RANK": "0", "RANK": "0",
                       "ABLATE_NODE_GPUS": "0,1,2,3,4,5,6,7", "cuda_started": False,
                       "local_rank": 0, "node": 0, "engines": [["0", "1", "2", "3"]]}
    assert seen[1] == {"CUDA_VISIBLE_DEVICES": "6", "LOCAL_RANK": "0", "RANK": "6",
                       "ABLATE_NODE_GPUS": "0,1,2,3,4,5,6,7", "cuda_started": False,
                       "local_rank": 2, "node": 1, "engines": []}


def test_a_child_does_not_inherit_its_parents_binding():
    """An engine process or a test's subprocess inherits the bound variables but is another
    process: it reads its launcher's variables, not its parent's device index / local rank."""
    from trainer.dist.binding import node_gpus
    from trainer.dist.groups import read_env

    env = slurm_env(1, 4, 0, 2, "0,1,2,3,4,5,6,7")
    bind_devices(config(), env)
    assert read_env(env).local_rank == 2 and node_gpus(env) == tuple("01234567")
    inherited = {**env, "ABLATE_BOUND_PID": "1", "RANK": "3", "LOCAL_RANK": "3"}
    assert read_env(inherited).local_rank == 3  # torchrun's, not the parent's record
    assert node_gpus(inherited) == ("6",)  # what this process was given, not the parent's node


@pytest.mark.slow
def test_a_refused_start_is_the_runs_one_line_error(tmp_path):
    """trainer.loop.train.run binds first; a process it cannot bind (engine.device cuda on a node
    without GPUs) stops there, before any process group or model, with status.json's error
    in one line."""
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from trainer.config import TrainConfig\n"
            "from trainer.loop.train import run\n"
            "run(TrainConfig.model_validate({'engine': {'device': 'cuda'}}), Path(sys.argv[1]))\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ABLATE_BOUND_PID"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed" and status["error"].startswith(
        "ValueError: engine.device is 'cuda' but this node has no GPUs"), status
    assert "\n" not in status["error"] and not (tmp_path / "run" / "config.yaml").exists()
