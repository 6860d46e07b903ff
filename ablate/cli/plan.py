"""CLI: `ablate plan SOURCE --budget C`: which variant to scale, how far, what it will reach."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from ablate.cli.app import app
from ablate.cli.curves import (BaselineOpt, BinOpt, ByOpt, JsonOpt, MarginOpt,
                               MaxOpt, MethodOpt, MinOpt, PaperGridOpt, PlotOpt, SourceArg,
                               StepCostOpt, WideOpt, XOpt, YOpt, YRangeOpt, _analyze, _check_plot,
                               _finish, _opts, _print_json, out, said_plot, y_label)
from ablate.errors import InputError


@app.command()
def plan(source: Path = SourceArg,
         budget: float = typer.Option(..., "--budget", help="Compute of the run to make, in the "
                                      "fit's x units (e.g. the flops or gpu_hours column)."),
         tol: float = typer.Option(0.005, "--tol", help="Scale only as far as the predicted "
                                   "score is within this of its value at the budget."),
         x: Optional[str] = XOpt, y: Optional[str] = YOpt,
         y_range: Optional[tuple[float, float]] = YRangeOpt, by: Optional[str] = ByOpt,
         step_cost: Optional[float] = StepCostOpt, min_compute: Optional[float] = MinOpt,
         max_compute: Optional[float] = MaxOpt, bins: Optional[int] = BinOpt,
         method: str = MethodOpt, paper_grid: str = PaperGridOpt,
         baseline: Optional[str] = BaselineOpt, margin: float = MarginOpt,
         plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Given fitted variants and a compute budget: the variant to scale (least expected regret
    under the fits' uncertainty), how far, and the score it is predicted to reach."""
    from ablate.analysis.budget_plan import plan as make_plan
    from ablate.analysis.budget_plan import plan_answer, plot_plan

    _check_plot(plot)
    if not (tol >= 0 and math.isfinite(tol)):
        raise InputError(f"--tol {tol}: must be a score difference >= 0")
    a = _analyze(source, _opts(x, y, by, step_cost, min_compute, max_compute, bins, method,
                               paper_grid, baseline, margin, budget, y_range), json_)
    result = make_plan(a.groups, budget, tol=tol)
    if plot is not None and result["recommended"] is not None:
        plot_plan(a.groups, result, plot, x=a.curves.x, y=a.curves.y)
        said_plot(plot)
    answer = plan_answer(result, x=a.curves.x)
    if json_:
        rows = result.pop("rows")
        from ablate.analysis.ranking_text import INTERVAL_KIND

        _print_json(a.envelope("plan", answer, rows, **result, interval=INTERVAL_KIND))
        _finish(a.groups)
        return
    from ablate.cli.render import print_plan
    from ablate.number_text import compute

    out.print(answer, markup=False, highlight=False)
    print_plan(out.console(), result, title=f"plan: budget {compute(budget)} {a.curves.x} ({y_label(a.curves)})",
               tol=tol, wide=wide)
    _finish(a.groups)
