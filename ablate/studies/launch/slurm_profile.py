"""The Slurm executor's profile section (`slurm:`), the job shape and limits it gives one run,
and the dry run's words for it; part of the Slurm executor (ablate/studies/launch/slurm.py
exposes all of it), kept apart so that module stays about submitting and following jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import Field, ValidationInfo, field_validator

from ablate.number_text import count
from ablate.studies.launch.executor import Capacity
from ablate.studies.launch.slurm_nodes import nodes_capacity
from ablate.validation import Strict
from ablate.adapters.builtin import JobShape, Limits

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile


class Section(Strict):
    """The profile's `slurm:` section; values pass straight through to submitit's parameters."""

    partition: Optional[str] = Field(None, description="sbatch --partition (None: the default).")
    account: Optional[str] = Field(None, description="sbatch --account.")
    qos: Optional[str] = Field(None, description="sbatch --qos.")
    nodes: int = Field(1, ge=1, description="Nodes per run.")
    tasks_per_node: Union[Literal["auto"], int] = Field(
        1, description="Processes per node (one per GPU for multi-GPU training: each runs "
        "the trainer under srun with RANK/WORLD_SIZE/MASTER_ADDR set from Slurm). `auto`: one "
        "per training GPU of each run's split (trainer/plan/topology.py: the GPUs its vLLM "
        "engines leave in pipeline mode, all of them otherwise; one on a CPU job), so a run "
        "whose split the plan picks (rollout.vllm.generation_gpus: auto) gets its ranks."
    )

    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (0: CPU-only job).")
    cpus_per_task: int = Field(1, ge=1, description="CPU cores per process.")
    mem_gb: Optional[float] = Field(None, gt=0, description="Memory per node in GB (None: default).")
    time_min: int = Field(60, gt=0, description="Time limit per job in minutes; jobs checkpoint "
                          "and requeue themselves when it runs out.")
    signal_delay_s: int = Field(
        90, ge=1, description="Seconds before the time limit at which Slurm signals the job to "
        "checkpoint and requeue."
    )
    max_num_timeout: Union[Literal["auto"], int] = Field(
        "auto", description="Requeues allowed after time limits: `auto` gives each job the "
        "requeues its time plan derives (trainer/plan/time_plan.py auto_max_num_timeout); an "
        "integer caps them (the plan refuses a run that needs more).")

    @field_validator("tasks_per_node", "max_num_timeout", mode="before")
    @classmethod
    def _auto_or_count(cls, v: object, info: ValidationInfo) -> object:
        least = 1 if info.field_name == "tasks_per_node" else 0
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= least):
            return v
        raise ValueError(f"must be auto or a whole number >= {least}")

    array_parallelism: int = Field(64, ge=1, description="Array tasks running at once.")
    study_nodes: Optional[int] = Field(
        None, ge=1, description="Nodes of the partition this study may hold at once (your "
        "share of it). None: the partition's usable nodes as `sinfo` lists them, or where it "
        "does not answer, `nodes` (one run at a time), said as assumed. The dry run's study "
        "wall time and `ablate sweep --within` plan against it (ablate/studies/capacity.py).")
    sbatch: dict[str, Union[str, int, float, bool]] = Field(
        default_factory=dict,
        description="Extra `#SBATCH --key=value` lines, e.g. {constraint: a100, exclusive: true}.",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="Shell lines at the top of the job script (module load, venv activate, exports).",
    )
    srun_args: list[str] = Field(default_factory=list, description="Extra arguments to srun.")
    python: Optional[str] = Field(
        None, description="Python on the compute nodes (None: the one running `ablate sweep`)."
    )


def job_shape(profile: Profile) -> JobShape:
    """Its nodes, tasks and GPUs (`tasks_per_node: auto`: each run's topology sets its ranks)."""
    s = profile.slurm
    auto = s.tasks_per_node == "auto"
    return JobShape(nodes=s.nodes, ranks_per_node=1 if auto else s.tasks_per_node,
                    gpus_per_node=s.gpus_per_node, gpu_memory_gib=profile.gpu_memory_gib,
                    gpu_model=profile.gpu_model, ranks_auto=auto)


def limits(profile: Profile) -> Limits:
    """A job's time limit, the requeues after timeouts (max_num_timeout), the stop signal's
    lead."""
    s = profile.slurm
    auto = s.max_num_timeout == "auto"
    return Limits(time_min=s.time_min, max_requeues=None if auto else s.max_num_timeout,
                  signal_delay_s=s.signal_delay_s, gpu_model=profile.gpu_model,
                  auto_requeues=auto)


def capacity(profile: Profile) -> Capacity:
    """The study's nodes over a run's, capped by array_parallelism (slurm_nodes.py)."""
    return nodes_capacity(profile)


def describe(profile: Profile, cap: Capacity) -> dict[str, Any]:
    s = profile.slurm
    return dict(partition=s.partition, account=s.account, qos=s.qos, nodes=s.nodes,
                tasks_per_node=s.tasks_per_node, gpus_per_node=s.gpus_per_node,
                gpu_memory_gib=profile.gpu_memory_gib, gpu_model=profile.gpu_model,
                time_min=s.time_min, max_num_timeout=s.max_num_timeout,
                signal_delay_s=s.signal_delay_s, array_parallelism=s.array_parallelism,
                runs_at_once=cap.runs_at_once,
                study_nodes=cap.nodes.nodes if cap.nodes else None,
                study_nodes_from=cap.nodes.source if cap.nodes else None)


def _requeue_cap(cap: Any) -> str:
    return ("requeues as each run's plan derives (max_num_timeout auto)" if cap == "auto"
            else f"up to {cap} requeues")


def _tasks(n: Any) -> str:
    return ("a task per training GPU of each run's split (tasks_per_node auto)"
            if n == "auto" else f"{count(n, 'task')} per node")


def sentence(info: dict[str, Any]) -> str:
    part = info["partition"] or "the cluster's default"
    gpus = info["gpus_per_node"]
    mem = (f" of {info['gpu_memory_gib']:g} GiB" if info["gpu_memory_gib"] else
           " (size not set: gpu_memory_gib)") if gpus else ""
    extra = "".join(f", {k} {info[k]}" for k in ("account", "qos") if info[k])
    return (f", partition {part}{extra}; {count(info['nodes'], 'node')} x {gpus} GPUs{mem}, "
            f"{_tasks(info['tasks_per_node'])}; time limit {info['time_min']} min "
            f"per job, {_requeue_cap(info['max_num_timeout'])}, stop signal "
            f"{info['signal_delay_s']} s before; at most {count(info['array_parallelism'], 'run')} "
            "at once (array_parallelism)")
