"""A node's GPUs split between generation (vLLM) and training for pipeline mode: the one
statement of the split, used by the process binding (trainer/dist/binding.py), gpu_hours
(trainer/devices.py) and re-exported by trainer/dist/groups.py. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GpuSplit:
    """Which local GPUs generate (vLLM) and which train, for pipeline mode on one node."""

    generation: tuple[int, ...]
    training: tuple[int, ...]

    @property
    def shared(self) -> bool:
        """One GPU for both: vLLM gets a memory fraction of it, the trainer the rest."""
        return bool(set(self.generation) & set(self.training))


def split_gpus(num_gpus: int, generation_gpus: Optional[int] = None) -> GpuSplit:
    """Split a node's GPUs between the generator and the trainer.

    PipelineRL keeps the generator busy while the trainer steps, so they want disjoint devices;
    the default gives generation half (rounded down, at least one), as PipelineRL's reference
    setups do. One GPU is shared (vLLM then runs with a smaller gpu_memory_utilization).
    `generation_gpus` (rollout.vllm.generation_gpus) overrides the count.
    """
    if num_gpus < 1:
        raise ValueError("split_gpus needs at least one GPU")
    if num_gpus == 1:
        return GpuSplit((0,), (0,))
    g = generation_gpus if generation_gpus is not None else max(1, num_gpus // 2)
    if not 1 <= g < num_gpus:
        raise ValueError(
            f"generation GPUs must be between 1 and {num_gpus - 1} on a {num_gpus}-GPU node, "
            f"got {g}"
        )
    return GpuSplit(tuple(range(g)), tuple(range(g, num_gpus)))
