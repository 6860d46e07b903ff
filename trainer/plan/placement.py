"""Where a job's vLLM engines run and what each is sent: the memory plan's view of them.

Why a module of its own: the plan (trainer/plan/memory.py) must size each engine's KV cache for
the sequences that engine really decodes, and count the generation GPUs the job holds but does
not use. Both follow from where the trainer starts engines, which the plan must not guess:

- trainer/generation/replicas.py node_engines -> trainer/dist/binding.py plan_binding: each node's
  local rank 0 is bound to its node's engines. In pipeline mode with vLLM
  (trainer/validate.py separate_generation) every node's local rank 0 starts them and
  generates its node's share of each step, rollout.prompts_per_step / nodes prompt groups
  (trainer/generation/offpolicy.py), so the rollouts decode on nodes x replicas engines; eval goes to
  rank 0's node's engines only (rank 0's eval service, trainer/generation/eval_service.py),
  beside the rollouts there. In the other modes (ppo_off_policy) rank 0 alone starts
  engines, on its own node, and generates the whole step.
- On a node with >= 2 GPUs in pipeline mode the engines sit on the first
  rollout.vllm.generation_gpus (default half) GPUs, each tensor_parallel_size of them
  (default: the fewest that hold the model, tensor_parallel below),
  rollout.vllm.data_parallel_replicas of them per node (default: as many as fit). Otherwise
  (other modes, a one-GPU node, CPU) data_parallel_replicas engines (default 1) share local
  rank 0's GPU.
So a multi-node job in pipeline mode uses every node's generation GPUs; in ppo_off_policy the
engines share rank 0's GPU, and GPUs without a training rank (tasks_per_node below the node's
GPUs) are allocated (and counted in gpu_hours, trainer/devices.py) but idle.

Pure Python (no torch): `ablate sweep --dry-run` plans thousands of variants with it;
tests/test_resources.py keeps it equal to replica_count and the binding of every process
(trainer/dist/binding.py plan_binding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import TrainConfig
from trainer.plan.engine_fit import tensor_parallel
from trainer.validate import JobShape, generation_gpus_per_node, separate_generation


@dataclass(frozen=True)
class Engines:
    """The job's vLLM engines: `replicas` engines of `tp` GPUs each on each of `nodes` nodes
    (pipeline mode with vLLM: every node's local rank 0 starts its node's; otherwise rank 0
    alone, nodes = 1)."""

    replicas: int  # per node
    tp: int
    own_gpus: bool  # on generation GPUs of their own (pipeline mode, >= 2 GPUs per node)
    per_gpu: int = 1  # engines on one GPU (a one-GPU node with data_parallel_replicas > 1)
    nodes: int = 1  # nodes whose engines run (each generates prompts_per_step / nodes a step)


def engine_nodes(c: TrainConfig, shape: JobShape) -> int:
    """Nodes that start engines: every node in pipeline mode with vLLM (each node's local rank
    0 generates its node's share, trainer/generation/offpolicy.py), else rank 0's node alone."""
    return max(1, shape.nodes) if separate_generation(c) else 1


def engines(c: TrainConfig, shape: JobShape) -> Engines:
    """trainer/generation/replicas.py node_engines (trainer/dist/binding.py plan_binding) on this
    job's shape."""
    vc, gpus, nodes = c.rollout.vllm, shape.gpus_per_node or 0, engine_nodes(c, shape)
    if gpus < 2 or not separate_generation(c):  # CPU, or sharing the host rank's GPU
        n = vc.data_parallel_replicas or 1
        return Engines(replicas=n, tp=1, own_gpus=False, per_gpu=n, nodes=nodes)
    gen = generation_gpus_per_node(c, gpus)
    tp = tensor_parallel(c, gen, shape.gpu_memory_gib) or gen
    replicas = vc.data_parallel_replicas or max(1, gen // tp)
    return Engines(replicas=replicas, tp=tp, own_gpus=separate_generation(c), nodes=nodes)


def rollout_rows(c: TrainConfig, nodes: int = 1) -> int:
    """Sequences one node's rollout generate call sends (trainer/generation/offpolicy.py): pipeline, a
    call of off_policy.groups_per_call (default the node's share of a step,
    prompts_per_step / nodes) groups; ppo_off_policy, one big generation of
    k x prompts_per_step prompts on rank 0's node; G samples each."""
    g = c.rollout.generations_per_prompt
    if c.off_policy.mode == "pipeline":
        share = max(1, c.rollout.prompts_per_step // max(1, nodes))
        return (c.off_policy.groups_per_call or share) * g
    return c.off_policy.k * c.rollout.prompts_per_step * g


def eval_rows(c: TrainConfig) -> int:
    """Sequences the held-out eval sends the engines (trainer/generation/eval_service.py: the whole eval,
    one call on GPUs)."""
    return (c.eval.num_prompts or c.task.num_eval_prompts) * c.eval.samples_per_prompt


def rows_per_engine(c: TrainConfig, e: Engines) -> int:
    """Sequences each engine of rank 0's node (the busiest) is sent at once at most: its
    node's rollout call over the node's replicas, plus eval, which goes to rank 0's node's
    engines only. In pipeline mode eval's requests join the running rollout call's (rank 0's
    eval service and its node's generator share the engines); in ppo_off_policy eval runs
    between steps, never beside the big generation."""
    rows = rollout_rows(c, e.nodes)
    rows = rows + eval_rows(c) if c.off_policy.mode == "pipeline" else max(rows, eval_rows(c))
    return math.ceil(rows / e.replicas)


def gpus_used(c: TrainConfig, shape: JobShape, e: Engines, rank0_node: bool) -> int:
    """GPUs of one node that a training rank or an engine runs on (trainer/dist/binding.py
    plan_binding: local rank r takes the r-th training GPU; pipeline mode keeps the first
    generation GPUs out; the engines take the first of those on every node that starts
    engines, or share local rank 0's GPU without generation GPUs of their own)."""
    gpus = shape.gpus_per_node or 0
    first = generation_gpus_per_node(c, gpus) if separate_generation(c) else 0
    ranks = set(range(first, min(gpus, first + shape.ranks_per_node)))
    runs = rank0_node or e.nodes > 1
    engine = set(range(e.replicas * e.tp)) if runs and e.own_gpus else set()
    return len(ranks | engine)


def idle_gpus(c: TrainConfig, shape: JobShape, e: Engines) -> tuple[int, int]:
    """(idle GPUs on rank 0's node, idle GPUs on each other node) of a multi-GPU job."""
    gpus = shape.gpus_per_node or 0
    if gpus < 2:
        return 0, 0
    return gpus - gpus_used(c, shape, e, True), gpus - gpus_used(c, shape, e, False)


def _where(c: TrainConfig, e: Engines, gpus: int) -> str:
    """Where the engines run and what they serve (the placement sentence's first half)."""
    n = f"{e.replicas} vLLM engine{'s' if e.replicas > 1 else ''}"
    size = ("" if gpus < 2 else f" of {e.tp} GPUs (tensor parallel)" if e.tp > 1 else
            f" of 1 GPU{' each' if e.replicas > 1 else ''}")
    if e.nodes > 1:
        host = ("on each node's local rank 0's GPU, shared with its trainer rank" if gpus == 1
                else "on each node's local rank 0's machine" if not gpus else "on every node")
        share = c.rollout.prompts_per_step // e.nodes
        return (f"{n}{size} {host} ({e.nodes} nodes, {e.nodes * e.replicas} in all) serve the "
                f"job's rollouts, each node {share} of a step's {c.rollout.prompts_per_step} "
                f"prompt groups; rank 0's node's also serve eval")
    where = ("on rank 0's node" if gpus >= 2 else
             "on rank 0's GPU, shared with its trainer rank" if gpus else "on rank 0's machine")
    verb = "serves" if e.replicas == 1 else "serve"
    return f"{n}{size} {where} {verb} the job's rollouts and eval"


def placement_note(c: TrainConfig, shape: JobShape, e: Engines) -> str:
    """One sentence: where the engines run, and the GPUs the job holds but leaves idle."""
    gpus = shape.gpus_per_node or 0
    text = _where(c, e, gpus)
    first, other = idle_gpus(c, shape, e)
    idle = first + (shape.nodes - 1) * other
    if not idle:
        return text
    where_idle = [f"{first} on rank 0's node"] if first else []
    if other and shape.nodes > 1:
        where_idle.append(f"{other} on {'the other node' if shape.nodes == 2 else 'each other node'}")
    why, gen = [], generation_gpus_per_node(c, gpus)
    if separate_generation(c) and e.replicas * e.tp < gen:
        node = "each node's" if e.nodes > 1 else "rank 0's node's"
        why.append(f"{e.replicas} engine(s) x tensor_parallel_size {e.tp} use {e.replicas * e.tp} "
                   f"of {node} {gen} generation GPUs")
    train = gpus - gen if separate_generation(c) else gpus
    if shape.ranks_per_node < train:
        why.append(f"tasks_per_node={shape.ranks_per_node} starts fewer ranks than the node's "
                   f"{train} training GPUs")
    return (f"{text}; {idle} of the job's {shape.nodes * gpus} GPUs are idle "
            f"({', '.join(where_idle)}): held and counted in gpu_hours, but no rank or engine "
            f"runs there ({'; '.join(why)})")
