"""torch.distributed from the launcher's environment (Slurm srun or torchrun), this process's
device (bound beforehand by trainer/dist/binding.py bind_devices, from the job's topology,
trainer/plan/topology.py), and the collectives the trainer uses.

Why its own module: every job of a study is launched by submitit (one Slurm task per process)
or by torchrun; both describe the process group in environment variables, but with different
names. DeepSpeed and torch.distributed read RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT
(without them DeepSpeed falls back to MPI discovery and fails on a missing mpi4py), so we
translate Slurm's variables into those once, before anything initialises a process group.

Sources of truth, in order: torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK) when present,
else Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST), else one process.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal, Mapping, Optional

import torch


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: Literal["torchrun", "slurm", "single"]
    node: int = 0  # this process's node in the job (0 for rank 0's)


@functools.lru_cache(maxsize=64)
def first_host(nodelist: str) -> str:
    """First host of a Slurm nodelist ("gpu[01-04,07]" -> "gpu01").

    `scontrol show hostnames` is the authoritative expander (ranges, zero padding, several
    bracket groups); the fallback parser only handles the common "prefix[a-b,c]" form, for
    machines where scontrol is not on PATH (e.g. inside a container).
    """
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist],
                capture_output=True, text=True, check=True, timeout=30,
            ).stdout.split()
            if out:
                return out[0]
        except (subprocess.SubprocessError, OSError):
            pass
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
    if "[" not in head:
        return head.strip()
    prefix, rest = head.split("[", 1)
    first = rest.split(",")[0].split("]")[0].split("-")[0]
    return prefix + first


def _slurm_tasks_per_node(env: Mapping[str, str], world_size: int) -> int:
    # SLURM_NTASKS_PER_NODE is set only with --ntasks-per-node; SLURM_TASKS_PER_NODE always
    # ("4(x2)" or "4,3"): the first count is this layout's per-node width.
    if env.get("SLURM_NTASKS_PER_NODE"):
        return int(env["SLURM_NTASKS_PER_NODE"])
    tpn = env.get("SLURM_TASKS_PER_NODE", "")
    if tpn:
        return int(tpn.split("(")[0].split(",")[0])
    return world_size


def default_port(job_id: Optional[str]) -> int:
    """A port every task of one Slurm job derives alike without talking to each other;
    different jobs sharing a node get different ports."""
    if job_id and job_id.isdigit():
        return 15000 + int(job_id) % 20000
    return 29500


def read_env(env: Optional[Mapping[str, str]] = None) -> DistEnv:
    """Describe this process from torchrun's or Slurm's variables (no side effects). After
    trainer/dist/binding.py bind_devices, LOCAL_RANK is the device index DeepSpeed reads (0) and
    the real local rank / node are in ABLATE_LOCAL_RANK / ABLATE_NODE."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        rank, local_world = int(env["RANK"]), int(env.get("LOCAL_WORLD_SIZE", world))
        # trainer/dist/binding.py's record of this very process (LOCAL_RANK is a device index
        # there); torchrun's GROUP_RANK is the node's index; Slurm's SLURM_NODEID
        own = env.get("ABLATE_BOUND_PID") == str(os.getpid())
        node = ((env.get("ABLATE_NODE") if own else None) or env.get("GROUP_RANK")
                or env.get("SLURM_NODEID"))
        local = (env.get("ABLATE_LOCAL_RANK") if own else None) or env.get("LOCAL_RANK", 0)
        return DistEnv(
            rank=rank,
            world_size=world,
            local_rank=int(local),
            local_world_size=local_world,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher="torchrun",
            node=int(node) if node else rank // max(local_world, 1),
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world = int(env["SLURM_NTASKS"])
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1"
        rank, local_world = int(env["SLURM_PROCID"]), _slurm_tasks_per_node(env, world)
        return DistEnv(
            rank=rank,
            world_size=world,
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            local_world_size=local_world,
            master_addr=env.get("MASTER_ADDR") or first_host(nodelist),
            master_port=int(env.get("MASTER_PORT") or default_port(env.get("SLURM_JOB_ID"))),
            launcher="slurm",
            node=int(env.get("SLURM_NODEID") or rank // max(local_world, 1)),
        )
    return DistEnv(0, 1, 0, 1, env.get("MASTER_ADDR", "127.0.0.1"),
                   int(env.get("MASTER_PORT", 29500)), "single")


def export_env(d: DistEnv) -> None:
    """Write the torchrun-style variables that torch.distributed's env:// and DeepSpeed read."""
    os.environ.update({
        "RANK": str(d.rank), "WORLD_SIZE": str(d.world_size),
        "LOCAL_RANK": str(d.local_rank), "LOCAL_WORLD_SIZE": str(d.local_world_size),
        "MASTER_ADDR": d.master_addr, "MASTER_PORT": str(d.master_port),
    })


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' -> the GPU this process sees when CUDA is there, else CPU. No index is computed
    here: trainer/dist/binding.py bind_devices left a bound process exactly one visible GPU (its
    own), so a GPU process always uses cuda:0. A process that sees several GPUs was not bound
    (its device would be a guess): an error, not a second tenant on someone's GPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("engine.device is 'cuda' but torch sees no CUDA device")
        if torch.cuda.device_count() != 1:
            raise RuntimeError(
                f"this process sees {torch.cuda.device_count()} GPUs: trainer/dist/binding.py "
                f"bind_devices must run first (before CUDA starts) so it sees only its own")
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device(device)


def group_timeout_s(config) -> float:
    """The process group's collective timeout for a TrainConfig, in seconds
    (engine.collective_timeout_minutes): under the vllm backend rank 0 evaluates alone while
    the other ranks wait at a barrier, and torch's default 30 minutes would fail a paper-scale
    eval; see the field's description."""
    return float(config.engine.collective_timeout_minutes) * 60.0


# How NCCL errors end a process (torch 2.13, torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:
# 64-69 reads TORCH_NCCL_ASYNC_ERROR_HANDLING, then the deprecated NCCL_ASYNC_ERROR_HANDLING;
# :160-176 the modes: 1 TearDown aborts the communicators and ends the process, the default 3
# SkipCleanUp ends it without aborting them). 1: a collective that fails or times out (a peer
# died) ends this rank with its communicators aborted, so the job fails (trainer/dist/abort.py
# records why) instead of a rank hanging on a half-open communicator.
NCCL_ERROR_HANDLING = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def nccl_error_handling(env) -> None:
    """Set TORCH_NCCL_ASYNC_ERROR_HANDLING before the NCCL process group starts (it is read at
    ProcessGroupNCCL's construction), unless the job set it, or its deprecated name, itself."""
    if "NCCL_ASYNC_ERROR_HANDLING" not in env:
        for k, v in NCCL_ERROR_HANDLING.items():
            env.setdefault(k, v)


def init_distributed(device: str = "auto", backend: Optional[str] = None,
                     timeout_s: float = 1800.0) -> tuple[DistEnv, torch.device]:
    """Initialise the default process group once (gloo on CPU, nccl on GPU).

    Safe to call in a single process: it still creates a world of one so that DeepSpeed and
    collective code paths are the same everywhere.
    """
    import datetime

    import torch.distributed as dist

    d = read_env()
    if os.environ.get("ABLATE_BOUND_PID") != str(os.getpid()):  # not bound: as launched
        export_env(d)
    dev = resolve_device(device)
    if not dist.is_initialized():
        backend = backend or ("nccl" if dev.type == "cuda" else "gloo")
        if backend == "nccl":
            nccl_error_handling(os.environ)
        dist.init_process_group(
            backend=backend, init_method="env://", rank=d.rank, world_size=d.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return d, dev


def join_process_group(device: str, timeout_s: float = 1800.0) -> bool:
    """Join the launcher's process group when the job has more than one process (idempotent;
    a single process stays without a group); True on rank 0. `timeout_s`: how long a
    collective waits (trainer: group_timeout_s)."""
    import torch.distributed as dist

    env = read_env()
    if env.world_size > 1 and not dist.is_initialized():
        init_distributed(device, timeout_s=timeout_s)
    return env.rank == 0


def rank() -> int:
    """This process's global rank (0 when torch.distributed is not initialised)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Processes in the initialised group (1 when torch.distributed is not initialised)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    import torch.distributed as dist

    if world_size() > 1:
        dist.barrier()


def all_reduce_floats(values: list[float], device: torch.device,
                      op: Literal["sum", "max"] = "sum") -> list[float]:
    """Element-wise sum / max over ranks (identity in a single process)."""
    if world_size() == 1 or not values:
        return values
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64 if device.type == "cpu" else torch.float32,
                     device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def on_all_ranks(flag: bool, device: torch.device) -> bool:
    """True only when `flag` is True on every rank (a MIN all-reduce)."""
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def average_grads(model: torch.nn.Module) -> None:
    """Mean of every gradient over the data-parallel ranks (no-op in a single process)."""
    import torch.distributed as dist

    if world_size() == 1:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # a rank whose forward skipped a parameter still joins the reduce
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    i = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[i:i + n].view_as(p.grad))
        i += n


def broadcast_object(obj, src: int = 0):
    """Rank `src`'s Python object on every rank (e.g. the checkpoint directory every rank must
    pass to a collective DeepSpeed save, or a batch of rollouts made only on rank 0)."""
    import torch.distributed as dist

    if world_size() == 1:
        return obj
    box = [obj if rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(obj) -> list:
    """Every rank's Python object, in rank order, on every rank (e.g. each node's share of a
    step's rollouts, made by that node's engines: trainer/generation/feeders.py). Pickled and
    sent as tensors on the current CUDA device under NCCL (torch 2.13
    torch/distributed/distributed_c10d.py all_gather_object: "the user's responsibility to
    ensure ... torch.cuda.set_device()"): resolve_device sets cuda:0, the one GPU each rank
    sees (trainer/dist/binding.py), as broadcast_object already needs."""
    import torch.distributed as dist

    if world_size() == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
