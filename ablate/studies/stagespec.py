"""The `stages:` section of a study file: an adaptive study's intermediate budgets.

Kept apart from ablate.studies.adaptive (the controller) so the study schema can use it without
importing the launch machinery; the checks that need the whole study (the final budget, the
variant names) are here too, run by `ablate sweep` before anything is written. Every run first trains to `budgets[0]`; after each stage the variants are
fitted and the ones that cannot win stop; survivors continue from their checkpoints to the next
budget and, finally, to the study's `budget`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ablate.analysis import A_MARGIN
from ablate.errors import InputError
from ablate.study_record import SCALE_WINNER_DEFAULT
from ablate.adapters.builtin import BudgetConfig

if TYPE_CHECKING:
    from ablate.studies.expand import Variant
    from ablate.studies.study import LoadedStudy

LIMITS = ("steps", "gpu_hours", "flops")


class StageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budgets: list[BudgetConfig] = Field(
        min_length=1,
        description="Intermediate budgets, increasing, each below the study's `budget` and "
        "using the same single limit (steps, gpu_hours or flops); the study's `budget` is the "
        "last stage.",
    )
    margin: float = Field(
        A_MARGIN, ge=0, description="With `baseline`: a variant whose fitted A is below the "
        "baseline's by more than this stops (the paper's run-to-run margin on A).",
    )
    baseline: Optional[str] = Field(
        None, description="Variant name (e.g. `base`) for the margin rule; without it only the "
        "interval rule stops variants (A's upper bound below another variant's lower bound).",
    )
    scale_winner: bool = Field(
        SCALE_WINNER_DEFAULT, description="When a stage leaves a single variant, the winner is decided and the "
        "study ends there; true = train it on to the final budget anyway.",
    )

    stop_departed: bool = Field(
        False, description="true = also stop a variant whose runs have all departed from their "
        "frozen forecast (`ablate watch`'s rule: 3 evaluations in a row below the 99% band); "
        "off by default: a departure is a fact about one run, stopping is the study's choice.",
    )

    @field_validator("budgets")
    @classmethod
    def _one_limit_increasing(cls, v: list[BudgetConfig]) -> list[BudgetConfig]:
        kinds = {limit_of(b)[0] for b in v}
        if len(kinds) > 1:
            raise ValueError(f"every stage budget must use the same limit, got {sorted(kinds)}")
        vals = [limit_of(b)[1] for b in v]
        if any(b <= a for a, b in zip(vals, vals[1:])):
            raise ValueError(f"stage budgets must increase, got {vals}")
        return v


def limit_of(b: BudgetConfig | dict) -> tuple[str, float]:
    """(kind, value) of a budget that sets exactly one limit; ValueError otherwise."""
    d = b.model_dump(exclude_none=True) if isinstance(b, BudgetConfig) else {
        k: v for k, v in b.items() if v is not None}
    if len(d) != 1 or next(iter(d)) not in LIMITS:
        raise ValueError(f"a stage budget sets exactly one of {', '.join(LIMITS)}, got {d}")
    k, val = next(iter(d.items()))
    return k, float(val)


def check_stages(loaded: LoadedStudy) -> None:
    """Stage budgets use the final budget's single limit and stay below it. Raises InputError
    naming the study file's line."""
    s, doc = loaded.study, loaded.doc
    if s.stages is None:
        return
    where = doc.where(("stages",))
    if s.budget is None:
        raise InputError(f"{where}: stages need the study's `budget` (the last stage)")
    try:
        kind, final = limit_of(s.budget)
    except ValueError as e:
        raise InputError(f"{doc.where(('budget',))}: with stages, {e}") from None
    for i, b in enumerate(s.stages.budgets):
        k, v = limit_of(b)
        if k != kind or v >= final:
            raise InputError(f"{doc.where(('stages', 'budgets', str(i)))}: stage budget "
                             f"{{{k}: {v:g}}} must be {kind} below the final budget "
                             f"{{{kind}: {final:g}}}")


def check_baseline(loaded: LoadedStudy, variants: list[Variant]) -> None:
    """`stages.baseline` names a variant of the expansion."""
    st = loaded.study.stages
    if st is None or st.baseline is None:
        return
    names = list(dict.fromkeys(v.name for v in variants))
    if st.baseline not in names:
        raise InputError(f"{loaded.doc.where(('stages', 'baseline'))}: stages.baseline "
                         f"'{st.baseline}' is not a variant; variants: {', '.join(names)}")


def all_budgets(loaded: LoadedStudy) -> list[dict[str, float]]:
    """Stage budgets then the final one, as {kind: value} dicts."""
    s = loaded.study
    assert s.stages is not None and s.budget is not None
    return [b.model_dump(exclude_none=True) for b in [*s.stages.budgets, s.budget]]
