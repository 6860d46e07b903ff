"""The tables of `ablate fit / compare / extrapolate / plan / status` and the `sweep --wait` view.

Each takes what its command computed (never refits or reloads) and the console's width. By
default a table holds the columns that decide (rank, variant, A and B with their intervals,
the prediction, the verdict, P(beats baseline)); `wide=True` adds the rest (C_mid, R0, R²,
points, window, notes). `--json` never goes through here: its shape is the contract.
Layout rules (labels whole, two lines a cell at most) are in ablate/cli/tables.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

from rich.console import Console, Group
from rich.text import Text

from ablate.analysis.labels import shorten
from ablate.analysis.ranking_text import (PREDICTIVE, TARGET_INTERVAL, Column, fit_columns,
                                          has_prediction, note_text, p_beats_column,
                                          predicted_columns, rank_cells)
from ablate.cli.tables import Col, table
from ablate.number_text import compute, estimate, interval, number, span

if TYPE_CHECKING:
    from ablate.analysis.compare import Ranked
    from ablate.analysis.variant_fits import GroupFit
    from ablate.studies.status import RunState

NOTE_CELL = 40  # in --wide, a longer note goes under the table as "(n) variant: text"
WIDE = 10  # drop priority of the --wide columns: they give way before any default one


def note(g: GroupFit, *more: str) -> str:
    """A variant's note (ablate/analysis/ranking_text.note_text: the one rule, for the report
    and every table alike)."""
    return note_text(g.as_dict(), *more)


def window(g: GroupFit) -> str:
    f = g.fit
    if f is None:
        return "—"
    return (span(f.min_compute, f.window_max(), hi_none="")
            + (f" ({f.skipped} skipped)" if f.skipped else ""))


def verdict(v: Optional[str]) -> Text:
    """The trust verdict, coloured: green only when the fit can be read as an answer."""
    return Text(v or "—", style="green" if v == "ok" else "yellow")


def verdict_col(verdicts: list[Optional[str]], drop: int) -> Col:
    """The verdict column; when every fit is "ok" it gives way first, said in the caption."""
    same = all(v == "ok" for v in verdicts)
    return Col("verdict", [verdict(v) for v in verdicts], drop=WIDE - 1 if same else drop,
               summary="verdict: ok for every variant" if same else "")


def interval_caption(groups: list[GroupFit]) -> str:
    kinds = sorted({g.fit.interval_method for g in groups if g.fit is not None})
    return ("intervals: " + ", ".join({"seeds": "across seeds (t, k-1 dof)",
                                       "bootstrap": "AR(1)+noise residual bootstrap"}.get(k, k)
                                      for k in kinds)) if kinds else ""


def _window_cols(groups: list[GroupFit], x: str, wide: bool) -> tuple[str, list[Col]]:
    """The fit window (in x) said once, in the caption, when every variant shares it, else a
    column (for --wide, in the details table)."""
    spans = [window(g) for g in groups]
    fitted = {w for g, w in zip(groups, spans) if g.fit is not None}
    if len(fitted) == 1:  # a column repeating one value says nothing the caption does not
        return f"window: {x} {fitted.pop()}", []
    # A comparison fits every variant from one start (ablate/analysis/pipeline.py); only the
    # ends (a stopped or shorter run) and the points skipped before the start differ, so the
    # start is said once and the per-variant spans are detail for --wide.
    starts = {compute(g.fit.min_compute) for g in groups if g.fit is not None}
    if len(starts) == 1:
        return (f"window: {x} from {starts.pop()} for every variant",
                [Col("window", spans, drop=WIDE)] if wide else [])
    return "", [Col("window", spans, drop=WIDE if wide and len(fitted) <= 1 else 6)]


# How each ranking column (ablate/analysis/ranking_text.py) gives way to a narrow terminal:
# higher is left out first; the A column is the answer's own, left out last.
_DROP = {"A": 1, "B": 5, "C_mid": 3, "R0": 2, "r2": 1, "points": 1, "at_budget": 4,
         "at_max": 4, "p_beats": 3}


def _col(c: Column, drop: Optional[int] = None) -> Col:
    """A ranking column as a terminal column: an estimate's cell is one unit, never split
    from its interval (the header may wrap)."""
    return Col(c.header, list(c.cells), drop=_DROP.get(c.key, 6) if drop is None else drop,
               unbroken=c.key not in ("r2", "points"))


def _fit_cols(groups: list[GroupFit], wide: bool) -> tuple[list[Col], list[Col]]:
    """(A and B, the --wide fit columns: C_mid, R0, R², points). B is one of the two numbers
    a ranking is read by: never left out, at a narrow width its estimate alone."""
    dicts = [g.as_dict() for g in groups]
    cols = [_col(c) for c in fit_columns(dicts, wide=wide)]
    cols[1] = replace(cols[1], keep=True, narrow=[number(d.get("B"), d.get("B_ci"))
                                                  for d in dicts],
                      narrow_header="B", narrow_note="B")
    return cols[:2], cols[2:]


def _narrow_predictions(col: Col, c: Column, rows: list[dict]) -> Col:
    """A prediction column whose narrow form is the predicted score alone (header without
    "[95% predictive]")."""
    key = "predicted_at_budget" if c.key == "at_budget" else "predicted_at_max_compute"
    cells = [number(d[key]["score"], d[key]["ci"]) if d.get(key) else "—" for d in rows]
    return replace(col, narrow=cells, narrow_header=c.header.replace(" [95% predictive]", ""),
                   narrow_note="predicted")


def _details(console: Console, labels: list[str], legend: str, more: list[Col],
             win: list[Col], note_cols: list[Col]) -> None:
    """--wide: the fit's other columns (C_mid, R0, R², points, a window that differs between
    variants, short notes) as a second table under the first, one row per variant in the same
    order. Appended to the first they were the first to give way at 100 columns, so --wide
    showed nothing more there (issue 32)."""
    wide_win = [replace(c, drop=WIDE) for c in win if c.drop == WIDE]
    console.print(table(console, "fit details (--wide)", [_variant_col(labels), *more,
                                                          *wide_win, *note_cols],
                        legend=legend))


class Notes:
    """Notes of a table. By default all go under it as "variant: text" (an empty column took
    the width); with --wide short ones sit in a note column and long ones under it as "(n)".
    Variant names in them are shortened as in the table (the legend names the axes)."""

    def __init__(self, wide: bool, short: dict[str, str]) -> None:
        self.wide = wide
        self.lines: list[str] = []
        self.short = {k: v for k, v in short.items() if k != v}

    def _shorten(self, text: str) -> str:
        for full in sorted(self.short, key=len, reverse=True):  # a name inside another last
            text = text.replace(full, self.short[full])
        return text

    def cell(self, variant: str, text: str) -> str:
        if not text:
            return ""
        variant, text = self._shorten(variant), self._shorten(text)
        if not self.wide:
            self.lines.append(f"{variant}: {text}")
            return ""
        if len(text) <= NOTE_CELL:
            return text
        self.lines.append(f"({len(self.lines) + 1}) {variant}: {text}")
        return f"see ({len(self.lines)})"

    def column(self, cells: list[str]) -> list[Col]:
        return [Col("note", cells, justify="left", drop=WIDE + 5)] if self.wide and any(cells) \
            else []

    def print(self, console: Console) -> None:
        for line in self.lines:
            console.print(line, markup=False, highlight=False)


def _labels(variants: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """(legend, each row's short label, full -> short)."""
    legend, short = shorten(list(dict.fromkeys(variants)))
    return legend, [short[v] for v in variants], short


def _variant_col(labels: list[str]) -> Col:
    return Col("variant", labels, justify="left", whole=True, keep=True)


def print_fit(console: Console, groups: list[GroupFit], x: str, y: str, wide: bool) -> None:
    legend, labels, short = _labels([g.variant for g in groups])
    ab, more = _fit_cols(groups, wide)
    win_caption, win = _window_cols(groups, x, wide)
    notes = Notes(wide, short)
    cells = [notes.cell(g.variant, note(g)) for g in groups]
    main_win = [c for c in win if c.drop != WIDE]
    cols = [_variant_col(labels), *ab, verdict_col([g.verdict()[0] for g in groups], 2),
            *main_win]
    caption = "; ".join(c for c in (win_caption, interval_caption(groups)) if c)
    console.print(table(console, f"sigmoid fits: {y} vs {x}", cols, caption=caption,
                        legend=legend))
    if wide:
        _details(console, labels, legend, more, win, notes.column(cells))
    notes.print(console)


def print_compare(console: Console, rows: list[Ranked], groups: list[GroupFit], *, x: str,
                  y: str, base: Optional[str], margin: float, budget: Optional[float],
                  wide: bool) -> None:
    """The ranking: rank, variant, A, B, the prediction (at --budget, else at the largest
    compute observed), verdict, P(beats baseline)."""
    ranked = [r.group for r in rows]
    legend, labels, short = _labels([g.variant for g in ranked])
    short_base = short.get(base or "", base)
    ab, more = _fit_cols(ranked, wide)
    win_caption, win = _window_cols(ranked, x, wide)
    dicts = [r.as_dict() for r in rows]
    # at --budget the max column stays (the README's promise), giving way first when narrow
    preds = [_narrow_predictions(_col(c, None if c.key == "at_budget" or budget is None
                                      else 6), c, dicts)
             for c in predicted_columns(dicts, budget)]
    notes = Notes(wide, short)
    cells = [notes.cell(r.group.variant, note(r.group, r.note if r.rank is not None else ""))
             for r in rows]
    cols = [Col("rank", rank_cells(dicts), keep=True), _variant_col(labels), *ab, *preds,
            verdict_col([g.verdict()[0] for g in ranked], 2),
            _col(p_beats_column(dicts, short_base)),
            *[c for c in win if c.drop != WIDE]]
    caption = "; ".join(c for c in (f"baseline: {short_base or '—'}", f"margin on A: {margin:g}",
                                    win_caption, interval_caption(groups),
                                    PREDICTIVE if has_prediction(dicts) else "") if c)
    console.print(table(console, f"ranking by asymptote A ({y} vs {x})", cols, caption=caption,
                        legend=legend))
    if wide:
        _details(console, labels, legend, more, win, notes.column(cells))
    notes.print(console)


def _row_note(r: dict) -> str:
    """An extrapolation row's note (ablate/analysis/ranking_text.note_text, the row's own
    note after the verdict's)."""
    return note_text(r, r.get("note"))


def print_extrapolate(console: Console, rows: list[dict], *, what: str, key: str,
                      wide: bool) -> None:
    """Prediction per variant (`key` is "score" for --budget, "compute" for --target)."""
    legend, labels, short = _labels([r["variant"] for r in rows])
    notes = Notes(wide, short)
    cells = [notes.cell(r["variant"], _row_note(r)) for r in rows]
    ends = ["—" if not r.get("ci") else interval(*r["ci"]) for r in rows]
    cols = [Col("", ["★" if r.get("recommended") else "" for r in rows], justify="left",
                keep=True),
            _variant_col(labels),
            Col("predicted", [number(r.get(key), r.get("ci")) for r in rows], drop=1),
            Col("95% predictive" if key == "score" else "95% interval", ends, drop=2,
                unbroken=True),
            verdict_col([r.get("verdict") for r in rows], 4),
            Col("compare rank", ["—" if r.get("rank") is None else str(r["rank"]) for r in rows],
                drop=3),
            *notes.column(cells)]
    console.print(table(console, f"extrapolation: {what}", cols,
                        caption="★ = the variant to scale; "
                        + (PREDICTIVE if key == "score" else TARGET_INTERVAL), legend=legend))
    notes.print(console)


def print_plan(console: Console, result: dict[str, Any], *, title: str, tol: float,
               wide: bool) -> None:
    """Which variant to scale at the budget (bold green), its regret, how far to scale."""
    rows = result["rows"]
    legend, labels, short = _labels([r["variant"] for r in rows])
    ok = [not r["error"] for r in rows]
    notes = Notes(False, short)  # a failed fit's reason is long: always under the table

    def cells(fmt) -> list[str]:
        return [fmt(r) if good else "—" for r, good in zip(rows, ok)]

    for r in rows:
        if r["error"]:
            notes.cell(r["variant"], f"fit failed: {r['error']}")
    cols = [_variant_col(labels),
            Col("predicted [95% predictive]", cells(lambda r: estimate(r["score"], r["ci"])),
                drop=1, unbroken=True),
            Col("P(best)", cells(lambda r: f"{r['p_best']:.2f}"), drop=2),
            Col("E[regret]", cells(lambda r: f"{r['expected_regret']:.4f}"), drop=3),
            Col("scale to", cells(lambda r: compute(r["scale_to"])), drop=4),
            Col("extra compute", cells(lambda r: compute(r["extra_compute"])), drop=5)]
    if wide:
        cols.append(Col("A [95%]", cells(lambda r: estimate(r["A"], r["A_ci"])), drop=WIDE,
                        unbroken=True))
    regret = result["expected_regret"]
    rec = result["recommended"]
    caption = (f"recommended: {short.get(rec, rec) if rec else '—'}; expected regret "
               + ("—" if regret is None else f"{regret:.4f}")
               + f"; scale to = where the curve is within {tol:g} of its score at the budget; "
               + PREDICTIVE)
    styles = ["bold green" if r["recommended"] else "" for r in rows]
    console.print(table(console, title, cols, caption=caption, legend=legend, row_styles=styles))
    notes.print(console)


def status_table(console: Console, title: str, states: list[RunState], wide: bool,
                 extra: tuple[Col, ...] = ()) -> Group:
    """`ablate status`: one row per run. Ids stay whole (they are what users copy)."""
    from ablate.cli.live import STATE_STYLE

    legend, labels, short = _labels([s.name for s in states])
    cols = [Col("run_id", [s.run_id for s in states], justify="left", whole=True, drop=1),
            Col("name", labels, justify="left", whole=True, keep=True),
            Col("seed", [str(s.seed) for s in states], drop=4),
            Col("state", [Text(s.state, style=STATE_STYLE.get(s.state, "")) for s in states],
                keep=True),
            Col("step", ["" if s.step is None else str(s.step) for s in states], drop=2),
            Col("done", ["" if s.progress is None else f"{s.progress:.0%}" for s in states],
                drop=3)]
    if wide:
        cols += [Col("job", [s.job_id or "" for s in states], whole=True, drop=WIDE + 1),
                 Col("tries", [str(s.attempts) for s in states], drop=WIDE)]
    return table(console, title, cols + list(extra), legend=legend)
