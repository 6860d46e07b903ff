"""CLI: `ablate plan SOURCE --budget C`: which variant to scale, how far, what it will reach."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ablate.cli import app
from ablate.cli.curves import (ByOpt, JsonOpt, MaxOpt, MethodOpt, MinOpt, PlotOpt, SourceArg,
                               XOpt, YOpt, _check_plot, _finish, _print_json, _run_fits, out)
from ablate.errors import InputError


@app.command()
def plan(source: Path = SourceArg,
         budget: float = typer.Option(..., "--budget", help="Compute of the run to make, in the "
                                      "fit's x units (e.g. the flops or gpu_hours column)."),
         tol: float = typer.Option(0.005, "--tol", help="Scale only as far as the predicted "
                                   "score is within this of its value at the budget."),
         plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt, x: Optional[str] = XOpt,
         y: Optional[str] = YOpt, by: Optional[str] = ByOpt,
         min_compute: Optional[float] = MinOpt, max_compute: Optional[float] = MaxOpt,
         method: str = MethodOpt) -> None:
    """Given fitted variants and a compute budget: the variant to scale (least expected regret
    under the fits' uncertainty), how far, and the score it is predicted to reach."""
    from ablate.analysis.plan import plan as make_plan
    from ablate.analysis.plan import plot_plan

    _check_plot(plot)
    if not (budget > 0 and math.isfinite(budget)):
        raise InputError(f"--budget {budget}: must be a finite compute > 0")
    if not (tol >= 0 and math.isfinite(tol)):
        raise InputError(f"--tol {tol}: must be a score difference >= 0")
    curves, groups = _run_fits(source, x, y, by, min_compute, max_compute, method, json_)
    result = make_plan(groups, budget, tol=tol)
    if plot is not None and result["recommended"] is not None:
        plot_plan(groups, result, plot, x=curves.x, y=curves.y)
    if json_:
        _print_json(result)
        return
    t = Table(title=f"plan: budget {budget:.4g} {curves.x} ({curves.y})",
              caption=f"recommended: {result['recommended'] or '—'}; expected regret "
              + ("—" if result["expected_regret"] is None else f"{result['expected_regret']:.4f}")
              + f"; scale-to = where the curve is within {tol:g} of its score at the budget")
    for col in ("variant", "predicted [95%]", "P(best)", "E[regret]", "scale to",
                "extra compute", "A [95%]"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for r in result["rows"]:
        if r["error"]:
            t.add_row(r["variant"], "—", "—", "—", "—", "—", f"fit failed: {r['error']}")
            continue
        t.add_row(r["variant"], f"{r['score']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]",
                  f"{r['p_best']:.2f}", f"{r['expected_regret']:.4f}", f"{r['scale_to']:.3g}",
                  f"{r['extra_compute']:.3g}", f"{r['A']:.3f} [{r['A_ci'][0]:.3f}, {r['A_ci'][1]:.3f}]",
                  style="bold green" if r["recommended"] else "")
    out.print(t)
    _finish(groups)
