"""Which GPUs each process of a job sees and uses: decided once, by one function, before CUDA
starts.

Why: a node of the paper's recipe has 8 GPUs, 4 for vLLM and 4 for training ranks. Computing a
device index from a rank in several places put the training ranks (cuda:LOCAL_RANK) and
DeepSpeed (which sets its device from LOCAL_RANK: deepspeed/runtime/engine.py
DeepSpeedEngine._set_distributed_vars, and zero/partition_parameters.py Init.local_device,
zero/utils.py read os.environ["LOCAL_RANK"] as a device index) on the generation GPUs, and
vLLM then refused to start. Instead every process is bound by construction:

- `bind_devices` runs at the very top of the trainer (trainer/loop/train.py run), before anything
  asks CUDA anything: the CUDA driver reads CUDA_VISIBLE_DEVICES once, at cuInit (which
  torch.cuda.is_available() already triggers: torch/cuda/__init__.py is_available ->
  _cuda_getDeviceCount), so narrowing it later has no effect.
- A training rank sees exactly one GPU, its own: `cuda:0` is the only device it can name, and
  LOCAL_RANK (what DeepSpeed reads as a device index) is 0. Its real local rank stays in
  ABLATE_LOCAL_RANK (trainer/dist/groups.py read_env). NCCL between ranks that each see one
  GPU is the usual `srun --gpus-per-task=1` setup: NCCL finds peers by PCI bus id, not by
  CUDA ordinal (read, not run here).
- The local rank 0 of each node that starts engines is bound to that node's vLLM engines (every
  node with vLLM, each generating its node's share of every generation,
  trainer/generation/feeders.py): each engine process is started
  with CUDA_VISIBLE_DEVICES = its own GPUs (the node's generation GPUs,
  `tensor_parallel_size` per engine) and V1 multiprocessing, so the engine core (a child
  process that inherits the environment: vllm/v1/engine/utils.py launch_core_engines ->
  CoreEngineProcManager) and its workers never see a training GPU. Without generation GPUs
  of their own (one-GPU nodes, which trainer/validate.py refuses on GPUs: the weight push
  would put two NCCL ranks on one GPU; the CPU) the engines share the host's device.
- Which GPUs train, which generate and the engines are not decided here: the job's topology
  (trainer/plan/topology.py) is, and this module maps it onto the GPU names of the node.
- The node's GPU list as the launcher gave it (Slurm's CUDA_VISIBLE_DEVICES: ordinals or UUIDs)
  is kept in ABLATE_NODE_GPUS, so a second call (or an engine placement later) sees the node,
  not the narrowed view.

Pure Python (no torch import): the contract test (tests/test_binding.py) runs it for every
process of a 2-node x 8-GPU job without CUDA, and `ablate` validation can use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, MutableMapping, Optional

from trainer.plan.topology import JobShape, Topology, topology

NODE_GPUS = "ABLATE_NODE_GPUS"  # the node's GPUs as the launcher gave them (before narrowing)
LOCAL_RANK = "ABLATE_LOCAL_RANK"  # the real local rank (LOCAL_RANK becomes the device index)
NODE = "ABLATE_NODE"  # the node index of this process in the job
GPU_MEMORY = "ABLATE_GPU_MEMORY_GIB"  # the node's GPU size in GiB ("" = unknown): recorded at
# bind time from nvidia-smi, or set by whoever starts the trainer; it sizes the default engines
GPU_MODEL = "ABLATE_GPU_MODEL"  # the node's GPU as the time plan names it (h100, h200, a100;
# "" = not in its table): recorded at bind time from nvidia-smi; `auto` splits are planned on it
NODES = "ABLATE_NODES"  # the job's nodes, recorded at bind time
BOUND_PID = "ABLATE_BOUND_PID"  # the process these describe: a child (an engine, a test's
# subprocess) inherits them but is not that process, and reads its launcher's variables instead


def bound_here(env: Mapping[str, str]) -> bool:
    """`env` holds this process's own binding (not one inherited from a parent)."""
    return env.get(BOUND_PID) == str(os.getpid())


@dataclass(frozen=True)
class Binding:
    """One process's devices. GPU ids are the node's own (as in `node_gpus`), never an index
    computed from a rank elsewhere."""

    rank: int
    world_size: int
    node: int
    local_rank: int
    local_world_size: int
    node_gpus: tuple[str, ...]  # every GPU of the node, as the launcher gave them
    training_gpus: tuple[str, ...]  # the node's GPUs that run training ranks
    generation_gpus: tuple[str, ...]  # the node's GPUs of their own for vLLM (may be empty)
    gpu: Optional[str]  # this rank's GPU (None: CPU)
    engines: tuple[tuple[str, ...], ...]  # each engine this process starts: its GPUs
    shared: bool  # the engines share this process's training GPU (no generation GPUs)
    # False on a generation node (node roles): its local rank 0 serves the node's engines
    # (trainer/generation/node_host.py), its other tasks have nothing to run; in no
    # training world (world_size there counts the training nodes' ranks only)
    trains: bool = True

    @property
    def device(self) -> str:
        """The torch device string this process uses: its one visible GPU, or the CPU."""
        return "cuda:0" if self.gpu is not None else "cpu"

    @property
    def visible(self) -> Optional[str]:
        """CUDA_VISIBLE_DEVICES of this process (None: left as it is, a CPU job)."""
        return self.gpu

    @property
    def deepspeed_local_rank(self) -> int:
        """LOCAL_RANK as DeepSpeed reads it (a device index): 0, the only visible GPU; on CPU
        the real local rank (the CPU accelerator ignores it)."""
        return 0 if self.gpu is not None else self.local_rank

    @property
    def hosts_engines(self) -> bool:
        return bool(self.engines)

    def engine_env(self, i: int) -> dict[str, str]:
        """Environment of engine `i`'s process (vLLM's engine core and workers inherit it):
        its own GPUs, and an engine process of its own (V1 multiprocessing) so that this
        process keeps only its training GPU. {} on CPU (the engine may run in process)."""
        gpus = self.engines[i]
        if not gpus:
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(gpus), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


def node_gpus(env: Mapping[str, str]) -> tuple[str, ...]:
    """The node's GPUs without touching CUDA: what an earlier bind recorded, else the
    launcher's CUDA_VISIBLE_DEVICES (Slurm sets it to the job's GPUs on the node), else one
    per GPU the NVIDIA driver lists (/proc/driver/nvidia/gpus), else none."""
    if NODE_GPUS in env and bound_here(env):
        return tuple(g for g in env[NODE_GPUS].split(",") if g)
    if "CUDA_VISIBLE_DEVICES" in env:
        value = env["CUDA_VISIBLE_DEVICES"].strip()
        if value in ("", "NoDevFiles") or value.startswith("-1"):
            return ()
        return tuple(g.strip() for g in value.split(",") if g.strip())
    try:
        return tuple(str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus"))))
    except OSError:
        return ()


@lru_cache(maxsize=2)
def _nvidia_smi(field: str) -> tuple[str, ...]:
    """One nvidia-smi field of every GPU the NVIDIA driver lists on this machine (empty
    without nvidia-smi). A separate process: the trainer's CUDA is not initialised
    (bind_devices must run first)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(x.strip() for x in out.splitlines() if x.strip())


def _nvidia_smi_gib() -> Optional[float]:
    """The smallest GPU the NVIDIA driver lists, in GiB (memory.total is MiB); None without."""
    try:
        sizes = [float(x) for x in _nvidia_smi("memory.total")]
    except ValueError:
        return None
    return min(sizes) / 1024 if sizes else None


def gpu_model(env: Mapping[str, str], gpus: tuple[str, ...]) -> Optional[str]:
    """The node's GPU as the time plan names it (trainer/plan/time_model.py GPUS): GPU_MODEL
    when set, else nvidia-smi's first GPU name; None on CPU, unknown or not in the table (the
    plan then assumes its default GPU, as the dry run does for a profile without gpu_model)."""
    from trainer.plan.time_model import gpu_key

    if not gpus:
        return None
    if GPU_MODEL in env:
        return env[GPU_MODEL].strip().lower() or None
    names = _nvidia_smi("name")
    return gpu_key(names[0]) if names else None


def gpu_memory_gib(env: Mapping[str, str], gpus: tuple[str, ...]) -> Optional[float]:
    """The size of this node's GPUs (GiB), as trainer/plan/engine_fit.py tensor_parallel
    needs it to choose the default engines: GPU_MEMORY when set ("" = unknown), else
    nvidia-smi's smallest GPU; None on CPU or when neither says."""
    if not gpus:
        return None
    if GPU_MEMORY in env:
        try:
            return float(env[GPU_MEMORY]) if env[GPU_MEMORY].strip() else None
        except ValueError:
            raise ValueError(f"{GPU_MEMORY}={env[GPU_MEMORY]!r}: expected a GPU's memory in "
                             f"GiB (e.g. 80) or empty") from None
    return _nvidia_smi_gib()


def usable_gpus(device: str, gpus: tuple[str, ...]) -> tuple[str, ...]:
    """The node's GPUs this job uses for `engine.device` ('auto', 'cuda', 'cpu'): none on CPU;
    a one-line ValueError for 'cuda' on a node without GPUs."""
    if device == "cpu" or (device == "auto" and not gpus):
        return ()
    if not gpus:
        raise ValueError("engine.device is 'cuda' but this node has no GPUs (CUDA_VISIBLE_DEVICES "
                         "empty and no NVIDIA driver); use engine.device: auto or cpu")
    return gpus


def plan_binding(t: Topology, gpus: tuple[str, ...], *, rank: int, world_size: int, node: int,
                 local_rank: int, local_world_size: int) -> Binding:
    """The binding of one process (pure): the job's topology (trainer/plan/topology.py, the
    one statement of which GPUs train and which generate, and of the engines) on this node's
    GPUs as the launcher named them; a one-line ValueError when this process has no GPU of
    its own. `gpus`: the node's usable GPUs (usable_gpus), () on CPU."""
    # Node roles (topology.py): a generation node holds no training GPU, a training node no
    # engine GPU; a generation node's one process hosts its engines, on no GPU of its own.
    gen_node = t.roles and node >= t.training_nodes
    train = () if gen_node else tuple(gpus[i] for i in t.training)
    gen = () if t.roles and not gen_node else tuple(gpus[i] for i in t.generation)
    gpu = None
    if t.roles:  # the training world is the training nodes' ranks, numbered first
        world_size = t.training_ranks
    if gpus and not gen_node:
        if local_rank >= len(train):  # one rank per GPU: never two ranks on one device
            raise ValueError(
                f"local rank {local_rank} has no GPU of its own: {len(train)} training GPUs on "
                f"this node ({len(gpus)} GPUs, {len(gen)} for vLLM); launch one task per "
                f"training GPU (slurm.tasks_per_node: {len(train)})")
        gpu = train[local_rank]
    engines: tuple[tuple[str, ...], ...] = ()
    if t.starts_engines(node, local_rank):  # a starting node's first rank hosts its engines
        engines = tuple(tuple(gpus[i] for i in e) for e in t.engines)
    return Binding(rank=rank, world_size=world_size, node=node, local_rank=local_rank,
                   local_world_size=local_world_size, node_gpus=tuple(gpus), training_gpus=train,
                   generation_gpus=gen, gpu=gpu, engines=engines,
                   shared=bool(engines) and not t.own_gpus and gpu is not None,
                   trains=not gen_node)


def job_shape(config, env: Mapping[str, str]) -> tuple[JobShape, tuple[str, ...]]:
    """The job's shape as the process described by `env` sees it (nodes from the launcher's
    variables, its node's usable GPUs and their size), and those GPUs' names."""
    from trainer.dist.groups import read_env  # torch import deferred: callers may be torch-free

    d = read_env(env)
    gpus = usable_gpus(config.engine.device,
                       () if config.engine.device == "cpu" else node_gpus(env))
    # the job's nodes: as bind_devices recorded them (with node roles it exports the training
    # world, fewer ranks than the job's tasks), else from the launcher's ranks
    nodes = (int(env[NODES]) if NODES in env and bound_here(env)
             else max(1, -(-d.world_size // max(d.local_world_size, 1))))
    return JobShape(nodes=nodes, ranks_per_node=d.local_world_size, gpus_per_node=len(gpus),
                    gpu_memory_gib=gpu_memory_gib(env, gpus), gpu_model=gpu_model(env, gpus)), gpus


def job_topology(config, env: Mapping[str, str] = os.environ) -> Topology:
    """The topology of the job this process belongs to (trainer/plan/topology.py topology on
    job_shape): what the binding reads, and the devices gpu_hours counts."""
    return topology(config, job_shape(config, env)[0])


def config_binding(config, env: Mapping[str, str]) -> Binding:
    """plan_binding for a TrainConfig in the process described by `env` (no side effects)."""
    from trainer.dist.groups import read_env  # torch import deferred: callers may be torch-free

    d = read_env(env)
    shape, gpus = job_shape(config, env)
    return plan_binding(topology(config, shape), gpus, rank=d.rank, world_size=d.world_size,
                        node=d.node, local_rank=d.local_rank, local_world_size=d.local_world_size)


def _cuda_started() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def bind_devices(config, env: Optional[MutableMapping[str, str]] = None) -> Binding:
    """Bind this process (the one function that decides its devices) and write the result to
    `env` (default os.environ) before CUDA starts: CUDA_VISIBLE_DEVICES = this rank's GPU, the
    torchrun-style variables torch.distributed and DeepSpeed read (LOCAL_RANK = 0, the index of
    the one visible GPU), and the node's GPU list for later calls. Idempotent."""
    env = os.environ if env is None else env
    shape, _ = job_shape(config, env)
    b = config_binding(config, env)
    if env is os.environ and _cuda_started() and b.visible is not None \
            and env.get("CUDA_VISIBLE_DEVICES") != b.visible:
        raise RuntimeError("trainer/dist/binding.py bind_devices ran after CUDA started in this "
                           "process: its GPUs can no longer be narrowed; call it first")
    from trainer.dist.groups import read_env

    d = read_env(env)
    if b.gpu is None and d.launcher == "single":
        return b  # one CPU process: nothing to narrow, and its environment stays as it was
    env.update({
        "RANK": str(b.rank), "WORLD_SIZE": str(b.world_size),
        "LOCAL_RANK": str(b.deepspeed_local_rank), "LOCAL_WORLD_SIZE": str(b.local_world_size),
        "MASTER_ADDR": d.master_addr, "MASTER_PORT": str(d.master_port),
        LOCAL_RANK: str(b.local_rank), NODE: str(b.node), NODE_GPUS: ",".join(b.node_gpus),
        NODES: str(shape.nodes), BOUND_PID: str(os.getpid()),
    })
    if b.node_gpus:  # the GPU the engines and split were chosen for: later calls, the same
        gib = gpu_memory_gib(env, b.node_gpus)
        env[GPU_MEMORY] = "" if gib is None else f"{gib:g}"
        env[GPU_MODEL] = gpu_model(env, b.node_gpus) or ""
    if b.visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = b.visible
    elif b.node_gpus == () and config.engine.device == "cpu" and "CUDA_VISIBLE_DEVICES" in env:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run touches no GPU of the node
    return b


def current_binding(config) -> Binding:
    """This process's binding as bind_devices left it (recomputed from os.environ: the node's
    GPU list it recorded makes the answer the same as at bind time)."""
    return config_binding(config, os.environ)
