"""The study file's schema: which recipe to start from, what to vary, how many seeds, how long
(`ablate schema` prints it as JSON Schema for editors). Loading and cross-checks are in
ablate/studies/study.py."""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from ablate.adapters.base import TrainerSpec
from ablate.adapters.builtin import BudgetConfig, leaf_paths
from ablate.studies.stagespec import StageSpec
from ablate.study_record import FitSpec  # the study dir's record holds it too
from ablate.validation import Strict

# Default run limit. Expanding validates each run's config (~0.3 ms each on a 2-core machine),
# so 10,000 runs expand in ~3 s while 3.2M would take ~16 min and gigabytes; and 10,000 full
# trainer jobs is already more than any cluster allocation runs as one ablation.
MAX_VARIANTS = 10_000

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class Study(Strict):
    """One study file. `ablate schema` prints this as JSON Schema for editors."""

    name: str = Field(
        description="Study name; results go to <results>/<name>/ (letters, digits, '_', '-', '.')."
    )
    description: str = Field("", description="Free text: the question this study answers.")
    base: Optional[str] = Field(
        None,
        description="Recipe to start from: a YAML of TrainConfig values, path relative to this "
        "file, else to the current folder, else one ablate ships (scalerl.yaml, proxy.yaml). A "
        "recipe may itself have `base:` (chained). Required for the built-in trainer (its "
        "defaults are a full-size run); other trainers build theirs from their own keys.",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Changes to the base for every variant; nested or dotted keys "
        "(`loss: {eps_max: 8}` or `loss.eps_max: 8`).",
    )
    axes: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Dotted TrainConfig path -> values to try, e.g. `loss.aggregation: [sample, "
        "prompt, token]`.",
    )
    components: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="leave_one_out only: component name -> the dotted paths and *reverted* "
        "values that remove that component from the full recipe.",
    )
    mode: Literal["grid", "one_at_a_time", "leave_one_out", "zip"] = Field(
        "grid",
        description="grid: every combination; one_at_a_time: each axis value against the base; "
        "leave_one_out: the base plus one variant per reverted component; zip: i-th values of "
        "all axes together.",
    )
    seeds: list[int] = Field([0], min_length=1, description="One run per variant and seed.")
    budget: Optional[BudgetConfig] = Field(
        None, description="Replaces TrainConfig.budget for every run: steps, gpu_hours or flops."
    )
    fit: FitSpec = Field(default_factory=FitSpec, description="Curve-fit defaults for compare.")
    profile: Optional[str] = Field(
        None,
        description="Launch profile: a NAME (sweeps/NAME.yaml next to this file, in its parent "
        "or the current folder, else the one ablate ships: local, slurm, slurm_gpu) or a YAML "
        "path relative to this file; `--profile` on the command line wins.",
    )
    stages: Optional[StageSpec] = Field(
        None, description="Adaptive study: intermediate budgets after which variants are "
        "fitted and those that cannot win stop; survivors continue to `budget` (needs `budget`).",
    )
    max_attempts: int = Field(
        3, ge=1, description="A failed run is resubmitted by a later `ablate sweep` until it "
        "has been submitted this many times."
    )
    trainer: TrainerSpec = Field(
        default_factory=TrainerSpec, description="Which trainer runs the variants: the built-in "
        "one (kind ablate), or TRL, verl or any command, whose own keys the axes then are "
        "(docs/trainers.md).")
    max_variants: int = Field(
        MAX_VARIANTS, ge=1, description="Refuse a study that expands to more runs than this "
        "(variants x seeds), counted before expanding: a grid of 5 axes x 20 values is 3.2M "
        "runs, almost always a typo. Raise it if you mean it."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not NAME_RE.match(v) or ".." in v:
            raise ValueError(
                f"'{v}' is not a plain folder name: use letters, digits, '_', '-', '.' (it becomes "
                "<results>/<name>/ and must not escape it)"
            )
        return v

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        dup = sorted({s for s in v if v.count(s) > 1})
        if dup:
            said = ", ".join(map(str, dup))
            raise ValueError(f"{'seed' if len(dup) == 1 else 'seeds'} {said} listed twice; "
                             "each seed once")
        return v


def study_json_schema() -> dict[str, Any]:
    """JSON Schema of the study file, with axis/override keys enumerated for completion."""
    schema = Study.model_json_schema()
    paths = sorted(leaf_paths())
    props = schema["properties"]
    props["axes"]["propertyNames"] = {"enum": paths}
    props["overrides"]["description"] += " Valid dotted keys: see axes.propertyNames."
    return schema
