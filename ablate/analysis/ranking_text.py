"""A ranking in words: the columns and notes that `compare`'s table (ablate/cli/render.py) and
the report's page (ablate/analysis/report.py) both print, made here from the same row objects
(`Ranked.as_dict()`, `Analysis.ranking_json()`), so the terminal and the page cannot say
different things about the same numbers. Numbers follow ablate/number_text.py's one rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ablate.number_text import compute, estimate

# What a predicted score's interval is, under every table and picture that shows one
# (ablate/analysis/intervals.py caps the band at A's interval: it never reaches above it).
PREDICTIVE = ("predicted: 95% predictive interval of a run's score (fit parameters, run drift, "
              "a plateau past the window); never above A's interval")
# The same for a predicted compute (`extrapolate --target`): that interval is of the compute
# where the fitted curve reaches the target, over the fit's parameter draws, not of a run's score.
TARGET_INTERVAL = ("predicted: the compute where the fitted curve reaches the target; 95% "
                   "interval over the fit's parameter draws (∞: some draws never reach it)")
# What `--json` says the rows' `ci` is (docs/JSON.md: `interval`), for a score and a compute.
INTERVAL_KIND = ("95% predictive: the score a run reaches there, from the fit's parameter "
                 "draws plus the run's drift and, in half the draws, a plateau after the window")
TARGET_INTERVAL_KIND = ("95% interval of the compute where the fitted curve reaches the "
                        "target, over the fit's parameter draws; null: some draws never reach it")

# A fit's warning (fit_diagnosis.bound_warnings) that a verdict's reason (fit_trust.assess)
# says again in other words: (how the reason starts, how the warning starts). The reason is kept
# (it names the remedy); the warning would say the same thing twice in one note.
_SAID_BY_REASON = (("C_mid ", "C_mid beyond the data"), ("A = ", "A at its bound"))

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of a ranking: `key` says what it is (the CLI gives each key its place and
    how it gives way to a narrow terminal; the page shows them all), `header` and `cells` what
    it prints, top to bottom in row order."""

    key: str
    header: str
    cells: list[str]


def _not_said_by(reason: str, warnings: list[str]) -> list[str]:
    """The warnings that `reason` (a verdict's) does not already say (`_SAID_BY_REASON`)."""
    said = tuple(w for r, w in _SAID_BY_REASON if reason.startswith(r))
    return [w for w in warnings if not (said and w.startswith(said))]


def note_text(row: Row, *more: Optional[str]) -> str:
    """A row's note: the failure reason, else the verdict with its reason when it is not "ok"
    and the fit's warnings it does not already say; then `more` (compare's shared-A note, an
    extrapolation's own note)."""
    verdict, reason = row.get("verdict"), row.get("verdict_reason") or ""
    if row.get("error"):
        parts = [row["error"]]
    elif verdict not in (None, "ok"):
        parts = [f"{verdict}: {reason}" if reason else verdict,
                 *_not_said_by(reason, list(row.get("warnings") or []))]
    else:
        parts = list(row.get("warnings") or [])
    # compare's own note of a failed fit ("fit failed: <the error>") would say the error twice
    said = row.get("error") or None
    return "; ".join(p for p in (*parts, *more) if p and not (said and said in p and p != said))


def _est(row: Row, name: str) -> str:
    return estimate(row.get(name), row.get(f"{name}_ci"))


def fit_columns(rows: list[Row], *, wide: bool) -> list[Column]:
    """A and B with their intervals; `wide` adds C_mid, R0 (with theirs), R² and points."""
    cols = [Column("A", "A [95%]", [_est(r, "A") for r in rows]),
            Column("B", "B [95%]", [_est(r, "B") for r in rows])]
    if wide:
        cols += [Column("C_mid", "C_mid [95%]", [_est(r, "C_mid") for r in rows]),
                 Column("R0", "R0 [95%]", [_est(r, "R0") for r in rows]),
                 Column("r2", "R²", ["—" if r.get("r2") is None else f"{r['r2']:.3f}"
                                     for r in rows]),
                 Column("points", "points", [str(r.get("n_points") or 0) for r in rows])]
    return cols


def predicted_cell(d: Optional[dict]) -> str:
    """A prediction ({"score", "ci"}) as `score [lo, hi]`, "—" for none."""
    return "—" if d is None else estimate(d["score"], d["ci"])


def predicted_columns(rows: list[Row], budget: Optional[float]) -> list[Column]:
    """Each variant's predicted score at the largest compute observed (its "max" column, which
    compare always shows), and at `budget` first when one was asked for."""
    at_max = next((r["predicted_at_max_compute"] for r in rows
                   if r.get("predicted_at_max_compute")), None)
    head = (f"predicted at {compute(at_max['compute'])} (max) [95% predictive]" if at_max
            else "predicted at max")
    cols = [Column("at_max", head, [predicted_cell(r.get("predicted_at_max_compute"))
                                    for r in rows])]
    if budget is not None:
        cols.insert(0, Column("at_budget", f"predicted at {compute(budget)} [95% predictive]",
                              [predicted_cell(r.get("predicted_at_budget")) for r in rows]))
    return cols


def p_beats_column(rows: list[Row], baseline: Optional[str]) -> Column:
    return Column("p_beats", f"P(beats {baseline or 'baseline'})",
                  ["—" if r.get("p_beats_baseline") is None else f"{r['p_beats_baseline']:.2f}"
                   for r in rows])


def rank_cells(rows: list[Row]) -> list[str]:
    return ["—" if r.get("rank") is None else str(r["rank"]) for r in rows]


def has_prediction(rows: list[Row]) -> bool:
    """Does any row carry a predicted score (then PREDICTIVE is said under the table)?"""
    return any(r.get("predicted_at_max_compute") or r.get("predicted_at_budget") for r in rows)
