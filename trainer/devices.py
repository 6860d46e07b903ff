"""How many devices a job holds: the multiplier of `gpu_hours` (wall x devices).

Why not the world size: in pipeline mode with vLLM the job's generation GPUs run no trainer
rank, so wall x world leaves them out, and an on-policy variant (every GPU a training rank,
generation colocated) and a pipeline variant of the same job shape would be fitted on
different x axes. The compute a variant spends is every GPU the job holds for its wall time.
On CPU each process counts as one device, as before.
"""

from __future__ import annotations

import os

import torch

from trainer.dist.binding import node_gpus
from trainer.dist.groups import GpuSplit, gpu_split_args, read_env, split_gpus


def devices_held(device_type: str, world: int, nodes: int = 1, split: GpuSplit | None = None,
                 gpus_per_node: int = 0) -> int:
    """Devices of a job of `world` trainer processes on `nodes` nodes. CUDA: the GPUs the job
    uses — one per rank (at most the split's training GPUs per node) plus every node's
    generation GPUs when `split` gives generation GPUs of its own (None: generation is
    colocated on the training GPUs; a split sharing one GPU adds none) — and never fewer than
    the GPUs it holds (`gpus_per_node` visible on each node: what the scheduler allocated,
    idle or not). Anything else: one device per process."""
    if device_type != "cuda":
        return world
    used = world
    if split is not None:
        per_node = -(-world // max(nodes, 1))
        used = nodes * min(per_node, len(split.training))
        used += 0 if split.shared else nodes * len(split.generation)
    return max(used, nodes * gpus_per_node)


def job_devices(config, device: torch.device, world: int,
                gpus_per_node: int | None = None) -> int:
    """devices_held for this process's job: nodes from the launcher's variables, the split
    from the config (trainer/dist/groups.py gpu_split_args) and the node's GPUs (default:
    the node's GPUs as the launcher gave them, trainer/dist/binding.py node_gpus: a bound process
    itself sees only its own)."""
    env = read_env()
    nodes = max(1, -(-world // max(env.local_world_size, 1)))
    args, split, gpus = gpu_split_args(config), None, 0
    if device.type == "cuda":
        gpus = len(node_gpus(os.environ)) if gpus_per_node is None else gpus_per_node
        if args["separate_generation"]:
            split = split_gpus(gpus, args["generation_gpus"])
    return devices_held(device.type, world, nodes, split, gpus)
