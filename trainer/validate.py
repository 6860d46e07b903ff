"""Cross-field checks of a TrainConfig: every combination the trainer refuses at start.

Field-level rules (types, ranges, loss options, a budget) live in trainer/config.py's pydantic
models. What one field alone cannot say — ZeRO-3 with an in-process pipeline generator, a chat
template on the proxy's character tokenizer, a generation/training GPU split the node cannot
hold — is checked here, in one place that both sides call:

- the trainer at start (`trainer.run`, before any process group, model or file), with the
  shape of the machine it finds itself on;
- `ablate sweep` / `ablate sweep --dry-run` / `ablate run`, before anything is written or
  submitted, with the shape the launch profile asks for.

So a study that would fail on the cluster fails at the laptop instead, with one line naming
the keys, why, and a valid alternative. Pure Python (no torch): `ablate` checks thousands of
variants with it.
"""

from __future__ import annotations

from typing import Callable, Optional

from trainer.config import TrainConfig
from trainer.plan.placement import dealt_groups
from trainer.plan.topology import (  # noqa: F401  (JobShape, separate_generation: re-exported)
    JobShape,
    TopologyError,
    roles_topology,
    separate_generation,
    set_roles,
    split,
    topology,
)


class ConfigConflict(ValueError):
    """Fields that are each valid but cannot be used together (one line: keys, why, fix)."""


def _zero3_pipeline_hf(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/engine_deepspeed.py make_deepspeed_engine: the hf pipeline generator deep-copies
    # the module and snapshots its state_dict; under ZeRO-3 each rank holds only a shard.
    if (c.engine.type == "deepspeed" and c.engine.zero_stage == 3
            and c.off_policy.mode == "pipeline" and c.rollout.backend == "hf"):
        return ("engine.zero_stage=3 with off_policy.mode=pipeline needs rollout.backend: vllm, "
                "not rollout.backend=hf (the hf generator copies the whole model, which ZeRO-3 "
                "partitions across ranks); or use engine.zero_stage 0-2, or off_policy.mode: "
                "ppo_off_policy")
    return None


def _chat_template_proxy(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/models/chat.py prompt_encoder: the proxy's character tokenizer has no chat template.
    if c.model.chat_template and c.model.name_or_path is None:
        return ("model.chat_template=true with model.name_or_path=null: the CPU proxy's character "
                "tokenizer has no chat template; set model.chat_template: false, or "
                "model.name_or_path to an instruct/chat checkpoint")
    return None


def _cuda_without_gpus(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/dist/groups.py resolve_device: 'cuda' with no CUDA device.
    if c.engine.device == "cuda" and shape.gpus_per_node == 0:
        return ("engine.device=cuda but the job has no GPUs (gpus_per_node: 0); use "
                "engine.device: auto or cpu, or a profile with gpus_per_node > 0")
    return None


def _generation_split(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/plan/topology.py split: 1 <= generation GPUs < GPUs per node (one GPU: shared).
    try:
        split(c, shape.gpus_per_node or 0)
    except TopologyError as e:
        return str(e)
    return None


def _node_roles(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/plan/topology.py roles_topology: whole generation nodes beside at least one
    # training node; each generation node is fed by one training rank (Topology.fed_node),
    # through its engine host (trainer/generation/node_host.py), never from a rank's own
    # interpreter.
    n = set_roles(c)
    if n is None:
        return None
    if isinstance(c.rollout.vllm.generation_gpus, int):
        return (f"rollout.vllm.generation_nodes={n} with rollout.vllm.generation_gpus="
                f"{c.rollout.vllm.generation_gpus}: node roles give whole nodes to the engines, "
                f"a per-node split a share of every node; set one of them (the other to auto)")
    if c.rollout.vllm.client == "trainer":
        return (f"rollout.vllm.generation_nodes={n} with rollout.vllm.client=trainer: a "
                f"generation node's engines are driven from their engine host on that node; "
                f"valid: rollout.vllm.client auto or process")
    if shape.gpus_per_node is not None:
        try:
            t = roles_topology(c, shape, n)
        except TopologyError as e:
            return str(e)
        if t.training_ranks < n:
            return (f"rollout.vllm.generation_nodes={n}: each generation node is fed by one "
                    f"training rank, and {t.training_nodes} training node(s) hold "
                    f"{t.training_ranks}; valid: at most {t.training_ranks} generation nodes, or "
                    f"more tasks a node (slurm.tasks_per_node)")
    return None


def _engine_on_training_gpu(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/plan/topology.py (module doc): a vLLM engine on a training rank's GPU (a one-GPU
    # node) gets its weights over an NCCL group of that rank and the engine's workers
    # (trainer/generation/push.py WeightBroadcast), two ranks on one GPU, which NCCL's init
    # rejects ("Duplicate GPU detected", ncclInvalidUsage; NVIDIA/nccl v2.29.7-1
    # src/init.cc:973-977, the pin of torch 2.13): the first push would fail.
    gpus = shape.gpus_per_node
    if c.rollout.backend != "vllm" or not gpus or c.engine.device == "cpu":
        return None
    try:
        shared = topology(c, shape).shares_training_gpu
    except TopologyError:
        return None  # _generation_split / _engines say why
    if not shared:
        return None
    return (f"rollout.backend=vllm on {gpus}-GPU nodes (slurm.gpus_per_node): the vLLM engine "
            f"would share local rank 0's GPU with its training rank, and the weight push's "
            f"NCCL group (that rank and the engine's workers) would put two ranks on one GPU, "
            f"which NCCL refuses (\"Duplicate GPU detected\"); valid: nodes of at least 2 GPUs "
            f"(the engines get GPUs of their own, rollout.vllm.generation_gpus), "
            f"rollout.backend: hf, or engine.device: cpu")


def _engines(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/plan/topology.py: the engines' tensor-parallel groups and replicas the node's
    # generation GPUs cannot hold (the binding at start raises the same).
    if _generation_split(c, shape) or _node_roles(c, shape):
        return None
    try:
        topology(c, shape)
    except TopologyError as e:
        return str(e)
    return None


def _ranks_per_gpu(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/dist/binding.py plan_binding: a local rank beyond the node's training GPUs has
    # no GPU of its own and stops at start (one rank per GPU, never two).
    n = shape.gpus_per_node
    if not n or c.engine.device == "cpu" or shape.ranks_auto or _generation_split(c, shape):
        return None
    try:
        train = len(topology(c, shape).training)  # `auto` resolved as the binding resolves it
    except TopologyError:
        return None  # _engines says why
    if shape.ranks_per_node <= train:
        return None
    why = (f" (rollout.backend=vllm: {n - train} of the {n} GPUs generate)"
           if train < n else "")
    return (f"{shape.ranks_per_node} ranks per node (tasks_per_node) on {train} training GPUs "
            f"per node{why}: one rank per GPU needs slurm.tasks_per_node: {train}, or set "
            f"rollout.vllm.generation_gpus")


def prompts_per_node(c: TrainConfig, shape: JobShape) -> Optional[str]:
    """With vLLM every node's local rank 0 starts its node's engines and generates its share
    of each generation: its prompt groups dealt over the nodes (trainer/plan/placement.py
    shares, dealt_groups: a step's in pipeline mode, k steps' in ppo_off_policy; unevenly
    where they do not divide, the plan charging the largest share). A node dealt no group
    would hold its engines idle and its stream would wait for nothing (trainer/generation/
    feeders.py holds the feeders it finds at start to this rule too)."""
    n, per_call = shape.nodes, dealt_groups(c)
    if set_roles(c) is not None and 1 <= set_roles(c) < n:  # only the generation nodes deal
        n = set_roles(c)
    if not separate_generation(c) or n <= 1 or per_call >= n:
        return None
    what = (f"rollout.prompts_per_step={per_call}" if c.off_policy.mode == "pipeline" else
            f"rollout.prompts_per_step={c.rollout.prompts_per_step} x off_policy.k="
            f"{c.off_policy.k} ({per_call} prompt groups a generation)")
    gen = "generation " if set_roles(c) is not None else ""
    return (f"{what} is fewer than the job's {n} {gen}nodes (rollout.backend=vllm, "
            f"off_policy.mode={c.off_policy.mode}: every node's engines generate a share of "
            f"each generation's prompt groups); valid: at least {n}, or fewer slurm.nodes")


# Each returns the one-line problem, or None. Order: the most fundamental first.
CHECKS: tuple[Callable[[TrainConfig, JobShape], Optional[str]], ...] = (
    _zero3_pipeline_hf, _chat_template_proxy, _cuda_without_gpus, _generation_split,
    _node_roles, _ranks_per_gpu, _engines, _engine_on_training_gpu, prompts_per_node,
)


def problems(config: TrainConfig, shape: JobShape = JobShape()) -> list[str]:
    """Every cross-field problem of `config` on `shape` (empty: the trainer will start)."""
    return [p for check in CHECKS if (p := check(config, shape)) is not None]


def validate(config: TrainConfig, shape: JobShape = JobShape()) -> None:
    """Raise ConfigConflict with the first problem; return quietly when there is none."""
    found = problems(config, shape)
    if found:
        raise ConfigConflict(found[0])


def local_shape() -> JobShape:
    """The shape of the machine this process runs on (the trainer's own view at start)."""
    # Local: this module is ablate's validator too, and must not import torch for it. No CUDA
    # call either: this runs before trainer/dist/binding.py bind_devices narrows the process's GPUs
    # (the CUDA driver reads CUDA_VISIBLE_DEVICES once), so the node's GPUs come from the
    # launcher's variables (binding.node_gpus).
    import os

    from trainer.dist.binding import gpu_memory_gib, gpu_model, node_gpus
    from trainer.dist.groups import read_env  # torch: only the trainer calls local_shape

    env = read_env()
    gpus = node_gpus(os.environ)
    # The GPU size too, as the binding reads it: the engines the check sees are the ones the
    # trainer then starts (trainer/plan/topology.py chooses them by it).
    return JobShape(nodes=max(1, env.world_size // max(env.local_world_size, 1)),
                    ranks_per_node=env.local_world_size, gpus_per_node=len(gpus),
                    gpu_memory_gib=gpu_memory_gib(os.environ, gpus),
                    gpu_model=gpu_model(os.environ, gpus))
