"""CLI: `ablate report STUDY_DIR` writes one self-contained HTML page (ablate/analysis/report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ablate.cli import app, margin_option
from ablate.errors import InputError


@app.command()
def report(
    study_dir: Path = typer.Argument(..., help="A study results dir, e.g. results/loss_agg."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="HTML file to write (default STUDY_DIR/report.html)."),
    baseline: Optional[str] = typer.Option(None, "--baseline",
                                           help="Variant to compare against (default: the top one)."),
    margin: float = margin_option("A's within this are tied: refit at the shared A and "
                                  "compare B (paper's rule)."),
    method: str = typer.Option("default", "--method", help="default or paper (fit method)."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout: the path "
                                 "and what the page shows (without the images)."),
) -> None:
    """Write the study's answer as one HTML page: question, ranking with intervals and
    shared-A verdicts, curves with fits and extrapolation bands, run states, failures, and
    the commands to reproduce it. Plots are embedded; the file stands alone."""
    from ablate.analysis.report import write_report

    if method not in ("default", "paper"):
        raise InputError(f"--method {method!r}: valid methods are default, paper")
    path, data = write_report(study_dir, out, baseline=baseline, margin=margin, method=method)
    if as_json:
        print(json.dumps({"report": str(path), **data.to_json()}))
        return
    from rich.console import Console

    Console().print(f"report -> [bold]{path}[/]  ({len(data.ranking)} variants, "
                    f"{len(data.runs)} runs, {len(data.problems)} failed/diverged)")
