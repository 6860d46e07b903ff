"""The Slurm executor's GPU-nodes capability (launch/executor.py GpuNodes): what `ablate sweep
--within` and the GPU-need check ask of an executor whose runs take whole nodes, answered from
the profile's `slurm:` section. Part of the Slurm executor (ablate/studies/launch/slurm.py
exposes it, with study_nodes and nodes_capacity from slurm_nodes.py), kept apart so that
module stays about submitting and following jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

CALLED = "Slurm"
GPU_PROFILE = "slurm_gpu"  # sweeps/slurm_gpu.yaml: 2 nodes x 8 GPUs of 80 GiB


def key(field: str) -> str:
    return f"slurm.{field}"


def nodes_per_run(profile: Profile) -> int:
    return profile.slurm.nodes


def cpu_cores(profile: Profile) -> int:
    """Its tasks' cores on every node (`tasks_per_node: auto` is one task on a CPU node)."""
    s = profile.slurm
    tasks = 1 if s.tasks_per_node == "auto" else s.tasks_per_node
    return s.nodes * tasks * s.cpus_per_task


def with_study_nodes(profile: Profile, nodes: int) -> Profile:
    section = profile.slurm.model_copy(update={"study_nodes": nodes})
    return profile.model_copy(update={"slurm": section})


def proposal_profile(data: dict[str, Any], nodes_per_run: int,
                     runs_at_once: int) -> dict[str, Any]:
    """`slurm.nodes` and `slurm.array_parallelism` (at least 1, as the section requires)."""
    section = dict(data.get("slurm") or {})
    section["nodes"] = nodes_per_run
    section["array_parallelism"] = max(1, runs_at_once)
    return {**data, "slurm": section}


def keeps_proposal(profile: Profile, nodes_per_run: int, runs_at_once: int) -> bool:
    """Its nodes per run are the proposal's and array_parallelism holds back none of its runs."""
    s = profile.slurm
    return nodes_per_run == s.nodes and s.array_parallelism >= runs_at_once
