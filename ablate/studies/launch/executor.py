"""The one interface every executor implements (a module, registered in launch.EXECUTORS).

Why a Protocol: `ablate sweep` plans, submits, describes and stops runs, and `ablate status`
asks about their jobs, without knowing where they run; a typed contract says what a new
executor (Ray, a cloud batch service, another scheduler) must provide, and a type checker or
tests/test_executors.py says when one does not. Everything that depends on *where* runs go
lives in the executor's module: its profile section (`Section`, the profile's key is the
registered name), the shape of one run's job and its limits (trainer/plan: nodes, ranks,
GPUs, time), how many runs go at once and the dry run's sentence, its jobs' states, how to
stop them, and whether it is usable here. Shared code asks `launch.EXECUTORS[name]`, never
compares a name (tests/test_executor_names.py). What only some executors can do is an
optional capability, a protocol of its own that extends this one (`GpuNodes`).

Job states use one vocabulary, Slurm's (launch.ALIVE: still coming; COMPLETED, FAILED,
CANCELLED..., GONE when the job is no longer known): an executor maps its own onto it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile
    from ablate.validation import Strict
    from ablate.adapters.builtin import JobShape, Limits


@dataclass(frozen=True)
class StudyNodes:
    """The nodes a study may hold at once, where an executor counts them (GpuNodes), and
    where that number comes from."""

    nodes: int
    source: str  # the profile key that states it (`slurm.study_nodes`), a query, "assumed"
    detail: str  # in words, for the dry run

    def text(self) -> str:
        n = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        if self.source == "assumed":
            return f"assumed {n} (the profile's; {self.detail})"
        return f"{n} ({self.detail})"


@dataclass(frozen=True)
class Capacity:
    """Runs of a study at once under an executor, and why that many (the dry run's study
    line, `sweep --dry-run --json`'s launch object)."""

    executor: str
    runs_at_once: int  # 0: not one run fits where the study may run
    said: str  # in words: `2 at once (local.max_parallel)`
    nodes_per_run: int = 1
    nodes: Optional[StudyNodes] = None  # the study may hold, where an executor counts them
    array_cap: Optional[int] = None  # an executor's own cap on runs at once, when it binds

    def text(self) -> str:
        return self.said

    def to_json(self) -> dict:
        out = asdict(self)
        out["nodes"] = asdict(self.nodes) if self.nodes else None
        return out


@dataclass(frozen=True)
class RunResources:
    """One run's needs as its trainer's plans give them on the executor's job shape, computed
    once by the planner (ablate/studies/sweep.py resources_of) and handed to `submit`, so no
    executor reads a run's config or plans it again."""

    run_dir: Path
    # Training ranks per node of the run's topology (trainer/plan/topology.py; None: its
    # trainer has no plan here, an executor gives it one rank per GPU).
    ranks_per_node: Optional[int] = None
    # CPU cores the vLLM engines its local rank 0 hosts want beside that rank: one per engine
    # process and one for their client (0: no engines of their own, or no plan).
    engine_cores: int = 0
    # Node roles (trainer/plan/topology.py): the engines fill nodes of their own, hosted by
    # one task that takes its node's cores (trainer/generation/node_host.py node_cpus), so a
    # per-task count may spread engine_cores over the node's tasks.
    engine_nodes: bool = False
    # Restarts after time limits its time plan derives (auto_max_num_timeout; None: no plan).
    requeues: Optional[int] = None


@runtime_checkable
class Executor(Protocol):
    """Where jobs run. Job ids it returns start with its registered name and a colon."""

    UNAVAILABLE: str  # the one-line reason `available()` is False, naming what to use instead
    # The default rule (launch.pick): with no executor named, of the available() executors
    # the one of lowest DEFAULT_PREFERENCE (None: never by default, only when named);
    # CHOSEN_BECAUSE says why, in the dry run.
    DEFAULT_PREFERENCE: Optional[int]
    CHOSEN_BECAUSE: str
    # A job trains several runs one after another (local: `max_parallel` shares), so a run's
    # job may be RUNNING while the run itself waits.
    SHARES_JOBS: bool
    # The runs train inside submit() (debug): their status.json predates the submission.
    RUNS_IN_SUBMIT: bool
    # stop_command() also dequeues a queued job (scancel does; a signal to a waiting local
    # share would end its queued runs as interrupted).
    STOP_DEQUEUES: bool
    Section: type[Strict]  # the profile's section under the executor's registered name

    def available(self) -> bool:
        """Whether this machine can submit to it (checked before anything is written)."""
        ...

    def job_shape(self, profile: Profile) -> JobShape:
        """Where one run's processes land (trainer/validate.py checks configs against it,
        trainer/plan/memory.py plans memory on it): nodes, ranks and GPUs per node."""
        ...

    def limits(self, profile: Profile) -> Limits:
        """What one run may take (trainer/plan/time_plan.py plans against it): a job's time
        limit, the requeues after timeouts, the stop signal's lead."""
        ...

    def capacity(self, profile: Profile) -> Capacity:
        """How many of a study's runs go at once, and why."""
        ...

    def describe(self, profile: Profile, cap: Capacity) -> dict[str, Any]:
        """The dry run's `launch` object: this executor's settings that decide where and how
        runs go (`runs_at_once` among them)."""
        ...

    def sentence(self, info: dict[str, Any]) -> str:
        """The dry run's line after `where: executor NAME (why)`, from describe()'s object."""
        ...

    def submit(self, runs: list[RunResources], folder: Path, profile: Profile, *, entry: str,
               job_name: str) -> dict[str, str]:
        """Start jobs training `runs` (scripts and logs under `folder`), as `profile` says
        and each run's resources ask; returns run_id (the run dir's name) -> job id.
        InputError when the scheduler refuses the profile (nothing may be left running)."""
        ...

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """The scheduler's STATE of each job id (launch.ALIVE for ones still coming; anything
        else for ended ones: the run dir's files decide how it ended)."""
        ...

    def stop_command(self, job_ids: list[str]) -> str:
        """The shell command that stops these jobs ("" when none is known), each run
        checkpointing where the executor lets it (the next sweep resumes it)."""
        ...


@runtime_checkable
class GpuNodes(Executor, Protocol):
    """An executor whose runs take whole nodes of GPUs from a share of a cluster that its
    profile section states (Slurm): what `ablate sweep --within` sizes in nodes
    (ablate/studies/sizing.py, proposal.py, cli/within.py) and what the GPU-need check asks
    (ablate/studies/gpu_need.py), in the executor's own words and key names, so those modules
    name no executor. launch.gpu_nodes finds the executors that have it."""

    CALLED: str  # its name in a sentence: "its Slurm jobs", "Slurm's defaults"
    GPU_PROFILE: str  # a shipped profile (sweeps/NAME.yaml) with GPUs, to name in advice

    def key(self, field: str) -> str:
        """A key of its profile section as the user writes it (`slurm.study_nodes`)."""
        ...

    def nodes_per_run(self, profile: Profile) -> int:
        """The nodes one run's job takes."""
        ...

    def cpu_cores(self, profile: Profile) -> int:
        """The CPU cores one run's job holds on nodes without GPUs (its processes' cores)."""
        ...

    def study_nodes(self, profile: Profile) -> StudyNodes:
        """The nodes the study may hold at once, and where that number comes from."""
        ...

    def nodes_capacity(self, profile: Profile, nodes_per_run: Optional[int] = None,
                       array_cap: Optional[int] = -1) -> Capacity:
        """Runs at once on the study's nodes at `nodes_per_run` (None: the profile's), capped
        by `array_cap` (-1: the profile's own cap; None: none, for a proposal that writes
        its own)."""
        ...

    def with_study_nodes(self, profile: Profile, nodes: int) -> Profile:
        """A copy of `profile` whose study may hold `nodes` nodes."""
        ...

    def proposal_profile(self, data: dict[str, Any], nodes_per_run: int,
                         runs_at_once: int) -> dict[str, Any]:
        """A profile file's keys (`data`, as read) with a proposal's nodes per run and runs at
        once set in its section."""
        ...

    def keeps_proposal(self, profile: Profile, nodes_per_run: int, runs_at_once: int) -> bool:
        """Whether `profile` runs a proposal of these nodes per run and runs at once as it is
        (no copy with other keys needed)."""
        ...
