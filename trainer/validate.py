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

from dataclasses import dataclass
from typing import Callable, Optional

from trainer.dist.binding import separate_generation  # noqa: F401  (re-exported: one statement)
from trainer.config import TrainConfig


class ConfigConflict(ValueError):
    """Fields that are each valid but cannot be used together (one line: keys, why, fix)."""


@dataclass(frozen=True)
class JobShape:
    """Where a run's processes land. None = not known here (a check that needs it is skipped:
    the trainer repeats it at start on the machine it actually runs on)."""

    nodes: int = 1
    ranks_per_node: int = 1
    gpus_per_node: Optional[int] = None
    gpu_memory_gib: Optional[float] = None

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node


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
    # trainer/dist/groups.py split_gpus: 1 <= generation GPUs < GPUs per node (one GPU: shared).
    g, n = c.rollout.vllm.generation_gpus, shape.gpus_per_node
    if not separate_generation(c) or not n or n < 2 or g is None or 1 <= g < n:
        return None
    return (f"rollout.vllm.generation_gpus={g} on a {n}-GPU node (off_policy.mode=pipeline, "
            f"rollout.backend=vllm): the trainer needs at least one GPU of the node; use a value "
            f"in 1..{n - 1}, or null (half: {max(1, n // 2)})")


def generation_gpus_per_node(c: TrainConfig, gpus: int) -> int:
    """trainer/dist/groups.py split_gpus' count: rollout.vllm.generation_gpus, else half (>= 1).
    The one torch-free statement of it (validation, the memory plan, the engine placement)."""
    return c.rollout.vllm.generation_gpus or max(1, gpus // 2)


def training_gpus_per_node(c: TrainConfig, gpus: int) -> int:
    """trainer/dist/groups.py resolve_device: pipeline + vLLM keeps split_gpus' generation
    GPUs (rollout.vllm.generation_gpus, default half) out of the training ranks' choice."""
    if separate_generation(c) and gpus >= 2:
        return gpus - generation_gpus_per_node(c, gpus)
    return gpus


def _ranks_per_gpu(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/dist/groups.py resolve_device: a local rank beyond the node's training GPUs has
    # no GPU of its own and stops at start (one rank per GPU, never two).
    n = shape.gpus_per_node
    if not n or c.engine.device == "cpu" or _generation_split(c, shape):
        return None
    train = training_gpus_per_node(c, n)
    if shape.ranks_per_node <= train:
        return None
    why = (f" (off_policy.mode=pipeline, rollout.backend=vllm: {n - train} of the {n} GPUs "
           "generate)" if train < n else "")
    return (f"{shape.ranks_per_node} ranks per node (tasks_per_node) on {train} training GPUs "
            f"per node{why}: one rank per GPU needs slurm.tasks_per_node: {train}, or set "
            f"rollout.vllm.generation_gpus")


def _tensor_parallel(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/dist/binding.py plan_binding: a replica's tensor-parallel group must divide the node's
    # generation GPUs; without generation GPUs of their own the engines share one GPU.
    tp, n = c.rollout.vllm.tensor_parallel_size, shape.gpus_per_node
    if c.rollout.backend != "vllm" or not n or n < 2 or tp is None or _generation_split(c, shape):
        return None
    if not separate_generation(c):  # trainer/dist/binding.py: the engines share rank 0's one GPU
        return None if tp == 1 else (
            f"rollout.vllm.tensor_parallel_size={tp} with off_policy.mode="
            f"{c.off_policy.mode}: without generation GPUs of their own (pipeline mode) the "
            f"vLLM engines share local rank 0's one GPU; valid: 1 or null")
    gen = generation_gpus_per_node(c, n)
    if gen % tp == 0:
        return None
    divisors = [d for d in range(1, gen + 1) if gen % d == 0]
    return (f"rollout.vllm.tensor_parallel_size={tp} does not divide the {gen} generation GPUs "
            f"per node ({n}-GPU nodes); valid: {', '.join(map(str, divisors))}")


def _data_parallel_replicas(c: TrainConfig, shape: JobShape) -> Optional[str]:
    # trainer/dist/binding.py plan_binding: a node's replicas are tensor_parallel_size of its
    # generation GPUs each.
    dp, n = c.rollout.vllm.data_parallel_replicas, shape.gpus_per_node
    if (c.rollout.backend != "vllm" or dp is None or not n or n < 2 or not separate_generation(c)
            or _generation_split(c, shape) or _tensor_parallel(c, shape)):
        return None
    gen = generation_gpus_per_node(c, n)
    per_node = gen // (c.rollout.vllm.tensor_parallel_size or gen)
    if dp <= per_node:
        return None
    return (f"rollout.vllm.data_parallel_replicas={dp} needs {dp} x tensor_parallel_size GPUs "
            f"on every node (it counts engines per node), which has {gen} generation GPUs "
            f"({n}-GPU nodes); valid: 1..{per_node}, or a smaller "
            f"rollout.vllm.tensor_parallel_size")


def prompts_per_node(c: TrainConfig, shape: JobShape) -> Optional[str]:
    """In pipeline mode with vLLM every node's local rank 0 starts its node's engines and
    generates prompts_per_step / nodes groups of each step (trainer/generation/feeders.py,
    which also holds the feeders it finds at start to this rule)."""
    n, per_step = shape.nodes, c.rollout.prompts_per_step
    if not separate_generation(c) or n <= 1 or per_step % n == 0:
        return None
    return (f"rollout.prompts_per_step={per_step} does not split over {n} nodes (off_policy."
            f"mode=pipeline, rollout.backend=vllm: each node's engines generate prompts_per_step "
            f"/ nodes groups per step); valid: a multiple of {n}")


# Each returns the one-line problem, or None. Order: the most fundamental first.
CHECKS: tuple[Callable[[TrainConfig, JobShape], Optional[str]], ...] = (
    _zero3_pipeline_hf, _chat_template_proxy, _cuda_without_gpus, _generation_split,
    _ranks_per_gpu, _tensor_parallel, _data_parallel_replicas, prompts_per_node,
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

    from trainer.dist.binding import node_gpus
    from trainer.dist.groups import read_env  # torch: only the trainer calls local_shape

    env = read_env()
    gpus = len(node_gpus(os.environ))
    return JobShape(nodes=max(1, env.world_size // max(env.local_world_size, 1)),
                    ranks_per_node=env.local_world_size, gpus_per_node=gpus)
