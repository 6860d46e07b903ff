"""CLI: `ablate report STUDY_DIR` writes one self-contained HTML page (ablate/analysis/report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ablate.number_text import count
from ablate.cli.app import app
from ablate.cli.curves import (BaselineOpt, BinOpt, ByOpt, MarginOpt, MaxOpt, MethodOpt, MinOpt,
                               PaperGridOpt, StepCostOpt, XOpt, YOpt, YRangeOpt, _opts)


@app.command()
def report(
    study_dir: Path = typer.Argument(..., help="A study results dir, e.g. results/loss_agg."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="HTML file to write (default STUDY_DIR/report.html)."),
    x: Optional[str] = XOpt, y: Optional[str] = YOpt,
    y_range: Optional[tuple[float, float]] = YRangeOpt, by: Optional[str] = ByOpt,
    step_cost: Optional[float] = StepCostOpt, min_compute: Optional[float] = MinOpt,
    max_compute: Optional[float] = MaxOpt, bins: Optional[int] = BinOpt,
    method: str = MethodOpt, paper_grid: str = PaperGridOpt,
    baseline: Optional[str] = BaselineOpt, margin: float = MarginOpt,
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout: the path "
                                 "and what the page shows (without the images)."),
) -> None:
    """Write the study's answer as one HTML page: the answer in one sentence (baseline and fit
    window named), the ranking `compare` shows (same pipeline, same options), curves with fits
    and extrapolation bands (one colour per variant in every plot), run states, failures, and
    commands that reproduce it. Plots are embedded; the file stands alone."""
    from ablate.analysis.report import write_report
    from ablate.analysis.sources import study_meant
    from ablate.studies.status import study_states
    from ablate.studydir import is_study_dir

    options = _opts(x, y, by, step_cost, min_compute, max_compute, bins, method, paper_grid,
                    baseline, margin, y_range=y_range)
    options.check()
    # A folder one level off is the study it holds, by the rule compare reads folders by.
    study_dir = study_meant(study_dir) if study_dir.exists() else study_dir
    # The runs' states with the scheduler's view (queued, cancelled...); the report itself only
    # reads files. A dir that is no study is left to write_report's one-line error.
    states = study_states(study_dir) if is_study_dir(study_dir) else None
    path, data = write_report(study_dir, out, options=options, states=states)
    if as_json:
        print(json.dumps({"report": str(path), **data.to_json()}))
        return
    from ablate.cli.width import console

    con = console()
    con.print(data.answer or "(no answer: nothing could be fit)", markup=False, highlight=False)
    con.print(f"report -> [bold]{path}[/]  ({count(len(data.ranking), 'variant')}, "
              f"{count(len(data.runs), 'run')}, {len(data.problems)} failed/diverged)")
