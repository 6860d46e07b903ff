"""The resolved study a study dir records (study.json): what every reader of a study dir asks.

At submit the study store (ablate/studydir.py) writes, beside the study file as submitted
(study.yaml, verbatim: the report shows it and sweeps it again), the study as ablate resolved
it: its name and question, the validated `fit:` with its trainer's default columns filled in
(each trainer's adapter says them: ablate/adapters `fit_columns`), the validated `trainer:` and
`stages:` blocks. The analysis, the report, `status` and the stages' record read this, never the
YAML, so a study file is parsed and checked in one place (ablate/studies/study.py) and its fit
is resolved in one place (the adapter, at submit).

A study dir written before the record existed has only study.yaml: `from_study_yaml` reads it
into the same record, with the fit as written (`fit_resolved` false); its reader resolves it
by the same adapter rule (ablate/analysis/gather.py `study_fit`), so old results still read as
they did.

Bottom layer (beside studydir.py): imports nothing of ablate but the strict base and the run
dir's column names.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ablate.errors import InputError
from ablate.validation import Strict
from trainer.rundir import GPU_HOURS, PASS_RATE

RECORD_VERSION = 1
SCALE_WINNER_DEFAULT = False  # stages.scale_winner when a study does not say (StageSpec's default)


class FitSpec(Strict):
    """Defaults for the curve engine (`ablate fit/compare` read them from the study dir)."""

    x: str = Field(GPU_HOURS, description="Compute column of metrics.jsonl (gpu_hours, flops...).")
    y: str = Field(PASS_RATE, description="Score column (mean@k pass rate on held-out prompts).")
    min_compute: Optional[float] = Field(
        None, ge=0, description="Start of the fit window: skip the early, nearly linear phase."
    )
    max_compute: Optional[float] = Field(
        None, gt=0, description="End of the fit window (fit on a prefix, extrapolate beyond)."
    )


class StudyFit(BaseModel):
    """A study's fit as recorded: its columns and window. A column is None where the trainer's
    own log decides it (another trainer's study that names none: its curve reader picks)."""

    model_config = ConfigDict(extra="forbid")

    x: Optional[str] = None
    y: Optional[str] = None
    min_compute: Optional[float] = None
    max_compute: Optional[float] = None

    def axes(self, x: Optional[str] = None, y: Optional[str] = None) -> tuple[str, str]:
        """(x, y): the ones given (--x/--y), else the recorded ones, else FitSpec's defaults."""
        return (x or self.x or FitSpec().x, y or self.y or FitSpec().y)

    def given(self) -> dict[str, Any]:
        """The keys that hold a value ({"x": "flops", "min_compute": 2e9}, ...)."""
        return self.model_dump(exclude_none=True)


class StudyRecord(BaseModel):
    """study.json: the study as resolved at submit (see the module doc)."""

    model_config = ConfigDict(extra="forbid")

    version: int = RECORD_VERSION
    name: str
    description: str = ""
    base: Optional[str] = None  # as written: relative to the study file's folder
    trainer: dict[str, Any] = Field(default_factory=dict)  # the validated `trainer:` block
    fit: StudyFit = Field(default_factory=StudyFit)
    fit_resolved: bool = True  # False: read from an older study.yaml, the fit as written
    stages: Optional[dict[str, Any]] = None  # the validated `stages:` block (adaptive studies)
    cli_overrides: list[str] = Field(default_factory=list)  # `sweep --override`s it ran with

    @property
    def scale_winner(self) -> bool:
        return bool((self.stages or {}).get("scale_winner", SCALE_WINNER_DEFAULT))


def from_study_yaml(doc: Any, where: str, name: str) -> StudyRecord:
    """The record of a study dir that has only study.yaml (written before study.json): its
    keys as written, the fit checked as `fit:` is (FitSpec's bounds; YAML 1.1 reads 1e12 as
    text, so numbers are converted), the trainer's defaults not yet applied. `where` names the
    file in errors; `name` is the folder's, for a file that names none."""
    doc = doc if isinstance(doc, dict) else {}
    fit = doc.get("fit") if isinstance(doc.get("fit"), dict) else {}
    written = {k: fit[k] for k in ("x", "y", "min_compute", "max_compute")
               if fit.get(k) is not None}
    for k in ("min_compute", "max_compute"):
        if k in written:
            try:
                written[k] = float(written[k])
            except (TypeError, ValueError):
                raise InputError(f"{where}: fit.{k} = {written[k]!r} is not a number") from None
    trainer = doc.get("trainer") if isinstance(doc.get("trainer"), dict) else {}
    stages = doc.get("stages") if isinstance(doc.get("stages"), dict) else None
    base = doc.get("base")
    try:
        return StudyRecord(name=str(doc.get("name") or name),
                           description=str(doc.get("description") or ""),
                           base=base if isinstance(base, str) else None, trainer=trainer,
                           fit=StudyFit(**written), fit_resolved=False, stages=stages)
    except ValidationError as e:
        raise InputError(f"{where}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None
