"""Launch profiles (sweeps/*.yaml): *where* and *how* jobs run, kept apart from *what* runs.

A study says what to train; a profile says which executor, GPU size and model, and one
section per executor (its partition, GPUs, time limit, setup lines...: the executor's module
defines it as `Section`). The same study runs on a laptop (`sweeps/local.yaml`) or a cluster
(`sweeps/slurm.yaml`) unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, ValidationError, create_model

from ablate import shipped
from ablate.errors import InputError
from ablate.studies.launch import EXECUTORS, pick
from ablate.validation import Strict, format_validation_error
from ablate.yamlio import load_yaml
from ablate.adapters.builtin import GPUS, JobShape, Limits

Executor = Literal[tuple(EXECUTORS)]  # the registered executors' names


class _Common(Strict):
    """The keys every profile has; the executors' sections are added below (Profile)."""

    executor: Optional[Executor] = Field(
        None, description="Default executor for this profile; `--executor` wins."
    )
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
        """Where one run's processes land under this profile on `executor` (None: where
        launch.pick sends runs), as that executor says (launch/executor.py)."""
        return EXECUTORS[executor or pick(None, self)[0]].job_shape(self)

    def limits(self, executor: Optional[str] = None) -> Limits:
        """What one run may take under this profile on `executor` (trainer/plan/time_plan.py
        plans against it), as that executor says (None: where launch.pick sends runs)."""
        return EXECUTORS[executor or pick(None, self)[0]].limits(self)


# Each registered executor's section, under its name (`slurm:`, `local:`...), its defaults
# when the profile leaves it out.
Profile = create_model(
    "Profile", __base__=_Common, __doc__="A launch profile (sweeps/*.yaml): the common keys "
    "and one section per executor.",
    **{name: (mod.Section, Field(default_factory=mod.Section, description=f"{name} settings"))
       for name, mod in EXECUTORS.items()})

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
