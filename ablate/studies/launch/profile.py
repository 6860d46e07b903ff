"""Launch profiles (sweeps/*.yaml): *where* and *how* jobs run, kept apart from *what* runs.

A study says what to train; a profile says which executor, partition, GPUs, time limit and
setup lines. The same study runs on a laptop (`sweeps/local.yaml`) or a cluster
(`sweeps/slurm.yaml`) unchanged. Values pass straight through to submitit's parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from ablate import shipped
from ablate.errors import InputError
from ablate.studies.launch import EXECUTORS
from ablate.validation import Strict, format_validation_error
from ablate.yamlio import load_yaml
from trainer.plan.time_plan import GPUS, Limits
from trainer.validate import JobShape

# submitit.LocalExecutor.__init__'s max_num_timeout default (ablate/studies/launch/local.py
# does not pass one): a local background job is requeued at most this often after timeouts.
LOCAL_MAX_NUM_TIMEOUT = 3

Executor = Literal[tuple(EXECUTORS)]  # the registered executors' names


class LocalProfile(Strict):
    max_parallel: int = Field(
        1, ge=1, description="Runs at once on this machine; the runs are split into this many "
        "background jobs that each run their share one after another."
    )
    timeout_min: float = Field(
        7 * 24 * 60, gt=0, description="Wall-clock limit of one background job (then requeued)."
    )
    setup: list[str] = Field(default_factory=list, description="Shell lines run before each job.")


class SlurmProfile(Strict):
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


class Profile(Strict):
    executor: Optional[Executor] = Field(
        None, description="Default executor for this profile; `--executor` wins."
    )
    local: LocalProfile = Field(default_factory=LocalProfile)
    slurm: SlurmProfile = Field(default_factory=SlurmProfile)
    gpu_memory_gib: Optional[float] = Field(
        None, gt=0, description="Memory of one GPU in GiB (e.g. 80 for an H100 80GB). `ablate "
        "sweep` plans each run's GPU memory against it and refuses a study that does not fit; "
        "None (CPU jobs): no GPU check."
    )
    gpu_model: Optional[Literal[tuple(GPUS)]] = Field(
        None, description="The GPU type, for the time plan's datasheet peaks (FLOP/s, memory "
        "bandwidth; trainer/plan/time_plan.py GPUS). None with GPUs: planned as an H100, and the "
        "dry run says so."
    )

    def job_shape(self, executor: Optional[str] = None) -> JobShape:
        """Where one run's processes land under this profile (trainer/validate.py checks
        configs against it; trainer/plan/memory.py plans memory on it). Slurm: its nodes, tasks
        and GPUs; local/debug: one process, GPUs not known here (the trainer checks at start)."""
        if (executor or self.executor) == "slurm":
            s = self.slurm
            auto = s.tasks_per_node == "auto"  # each run's topology sets its ranks
            return JobShape(nodes=s.nodes, ranks_per_node=1 if auto else s.tasks_per_node,
                            gpus_per_node=s.gpus_per_node, gpu_memory_gib=self.gpu_memory_gib,
                            gpu_model=self.gpu_model, ranks_auto=auto)
        return JobShape(gpu_memory_gib=self.gpu_memory_gib, gpu_model=self.gpu_model)

    def limits(self, executor: Optional[str] = None) -> Limits:
        """What one run may take under this profile (trainer/plan/time_plan.py plans against it):
        Slurm, a job's time limit, the requeues after timeouts (max_num_timeout) and the
        stop signal's lead; local, the background job's timeout and submitit's default
        requeues; debug (in-process), no limit."""
        name = executor or self.executor
        if name == "slurm":
            s = self.slurm
            auto = s.max_num_timeout == "auto"
            return Limits(time_min=s.time_min, max_requeues=None if auto else s.max_num_timeout,
                          signal_delay_s=s.signal_delay_s, gpu_model=self.gpu_model,
                          auto_requeues=auto)
        if name == "local":
            return Limits(time_min=self.local.timeout_min, max_requeues=LOCAL_MAX_NUM_TIMEOUT,
                          gpu_model=self.gpu_model, time_key="local.timeout_min",
                          requeue_key=None)
        return Limits(gpu_model=self.gpu_model)


def find_profile(ref: str, study_dir: Optional[Path] = None, where: str = "") -> Path:
    """Resolve `--profile`/`profile:`: a path (relative to the study, then the current folder),
    or a bare NAME: sweeps/NAME.yaml next to the study, in its parent, in the current folder,
    then the profile ablate ships (ablate/shipped.py: the user's file of that name wins).
    `where` (the study's `file:line`, or `--profile`) heads the error."""
    if Path(ref).suffix in (".yaml", ".yml") or "/" in ref:
        return shipped.find(ref, "sweeps", study_dir, what="profile", where=where)
    return shipped.find(f"{ref}.yaml", "sweeps", study_dir, folders=("sweeps", "../sweeps"),
                        cwd_folders=("sweeps",), what="profile", where=where, shown=ref)


def load_profile(path: Path) -> Profile:
    doc = load_yaml(path)
    try:
        return Profile.model_validate(doc.data or {})
    except ValidationError as err:
        raise InputError(format_validation_error(err, doc.where, Profile)) from None
