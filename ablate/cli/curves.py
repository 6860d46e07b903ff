"""CLI: `ablate fit`, `ablate compare`, `ablate extrapolate` (scaling-curve analysis).

Tables and notes go to the terminal (notes on stderr); `--json` prints only JSON on stdout.
Input problems raise InputError before anything is written (the plot, the metrics cache).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from ablate.cli import app, margin_option
from ablate.cli.progress import delayed_progress
from ablate.errors import InputError

if TYPE_CHECKING:  # numpy/scipy/pandas load when a command fits, not for `ablate --help`
    from ablate.analysis.fitgroups import GroupFit
    from ablate.analysis.sources import Curves

# Wide when piped (rich would wrap at 80 columns): the tables carry intervals in every cell.
# COLUMNS, when set, wins (a script or test asking for the table at a given width).
_PIPE_WIDTH = None if "COLUMNS" in os.environ else 200
out = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH)
err = Console(stderr=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH)

SourceArg = typer.Argument(..., help="Study results dir, .csv/.jsonl/.parquet long table "
                           "(variant, seed, compute, score), W&B CSV export, MLflow tracking "
                           "dir, TensorBoard log dir, verl/TRL JSONL log or trainer_state.json.")
StepCostOpt = typer.Option(None, "--step-cost", help="Other tools' logs with only steps: "
                           "compute = step x this (e.g. GPU-hours per step).")
XOpt = typer.Option(None, "--x", help="Compute column/tag (default: study dir gpu_hours or its "
                    "study.yaml fit.x; table compute; TensorBoard the step).")
YOpt = typer.Option(None, "--y", help="Score column/tag (default: study dir eval/pass_rate or "
                    "study.yaml fit.y; table score; TensorBoard eval/pass_rate).")
ByOpt = typer.Option(None, "--by", help="Comma-separated columns naming a variant (default: variant).")
MinOpt = typer.Option(None, "--min-compute", help="Fit only points with compute >= X. Default: "
                      "chosen from each curve's shape: early points are kept unless they are off "
                      "the sigmoid the later points follow (an early phase); see ablate/analysis/window.py.")
MaxOpt = typer.Option(None, "--max-compute", help="Fit only points with compute <= X.")
MethodOpt = typer.Option("default", "--method", help="default (fast multi-start least squares) "
                         "or paper (the paper's A x C_mid grid with curve_fit for B).")
PaperGridOpt = typer.Option("relative", "--paper-grid", help="Unit of the paper method's C_mid "
                            "grid ([100, 40000] GPU-hours): relative (placed relative to the "
                            "paper's 16k-GPU-hour runs: x max compute / 16000; any unit) or "
                            "gpu-hours (verbatim, for data in GPU-hours).")
JsonOpt = typer.Option(False, "--json", help="Print only JSON on stdout.")
BinOpt = typer.Option(None, "--bin", help="Average each run's points in the fit window into at "
                      "most N bins of consecutive evaluations before fitting (for dense logs; "
                      "see README: fit speed and interval widths with and without it).")
PlotOpt = typer.Option(None, "--plot", help="Write a log-x PNG of points, fits and extrapolation.")
WideOpt = typer.Option(False, "--wide", help="Show every column (C_mid, R0, R², points, window, "
                       "notes); by default the table holds the columns that decide.")


def _check_plot(plot: Optional[Path]) -> None:
    if plot is None:
        return
    if plot.suffix.lower() != ".png":
        raise InputError(f"--plot {plot}: the figure must be a .png file")
    if not plot.parent.exists():
        raise InputError(f"--plot {plot}: folder {plot.parent} does not exist")


def _plot(curves: Curves, groups: list[GroupFit], plot: Optional[Path],
          extend_to: Optional[float] = None) -> None:
    """Write the figure when asked and at least one variant was fit."""
    if plot is not None and any(g.fit for g in groups):
        from ablate.analysis.plots import plot_fits

        plot_fits(curves, groups, plot, extend_to=extend_to)


def _run_fits(source: Path, x, y, by, min_compute, max_compute, method, quiet: bool,
              check=None, step_cost: Optional[float] = None,
              paper_grid: str = "relative", bins: Optional[int] = None,
              ) -> tuple[Curves, list[GroupFit]]:
    """Load, validate (`check(curves)` before any work), fit each variant with a progress bar."""
    from ablate.analysis.fit import MIN_POINTS, PAPER_GRIDS
    from ablate.analysis.fitgroups import fit_groups
    from ablate.analysis.sources import Curves, load

    if method not in ("default", "paper"):
        raise InputError(f"--method {method!r}: valid methods are default, paper")
    if paper_grid not in PAPER_GRIDS:
        raise InputError(f"--paper-grid {paper_grid!r}: valid: {', '.join(PAPER_GRIDS)}")
    if min_compute is not None and max_compute is not None and min_compute >= max_compute:
        raise InputError(f"--min-compute {min_compute:g} must be below --max-compute {max_compute:g}")
    if bins is not None and bins < MIN_POINTS:
        raise InputError(f"--bin {bins}: must be at least {MIN_POINTS} (bins per run)")
    curves = load(source, x=x, y=y, by=by, step_cost=step_cost)
    if not quiet:
        for note in curves.notes:  # what a reader of another tool's log picked
            err.print(f"[dim]{note}[/dim]")
    if curves.dropped:  # always on stderr, --json or not: the data differs from the file
        err.print(f"{curves.source}: dropped {curves.dropped} row(s) with a blank "
                  f"{curves.x!r} or {curves.y!r} cell")
    for note in curves.duplicates:  # also always: rows were dropped or replaced
        err.print(f"{curves.source}: {note}")
    if check is not None:
        check(curves)
    variants = curves.variants()
    with delayed_progress(err, disable=quiet) as bar:
        task = bar.add_task("fitting", total=len(variants))
        groups = []
        for v in variants:
            bar.update(task, description=f"fitting {v}")
            sub = Curves(curves.frame[curves.frame["variant"] == v], curves.source, curves.x,
                         curves.y, curves.defaults)
            groups += fit_groups(sub, min_compute=min_compute, max_compute=max_compute,
                                 method=method, paper_grid=paper_grid, bins=bins)
            bar.advance(task)
    for g in groups:
        if not quiet and g.fit is not None and g.fit.skipped and g.fit.window_rule == "auto":
            err.print(f"[dim]{g.variant}: skipped {g.fit.skipped} early point(s) below "
                      f"{curves.x}={g.fit.min_compute:.4g}: they are off the sigmoid the later "
                      "points follow (an early phase); --min-compute 0 keeps them[/dim]")
    return curves, groups


def _finish(groups: list[GroupFit]) -> None:
    """Exit 2 when no variant could be fit at all (every reason is already in the output)."""
    failed = [g for g in groups if g.fit is None]
    if groups and len(failed) == len(groups):
        raise InputError(f"no variant could be fit; {failed[0].error}")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _print_json(obj) -> None:
    print(json.dumps(_clean(obj), indent=2))


@app.command()
def fit(source: Path = SourceArg, x: Optional[str] = XOpt, y: Optional[str] = YOpt,
        by: Optional[str] = ByOpt, min_compute: Optional[float] = MinOpt,
        max_compute: Optional[float] = MaxOpt, method: str = MethodOpt, json_: bool = JsonOpt,
        plot: Optional[Path] = PlotOpt, step_cost: Optional[float] = StepCostOpt,
        paper_grid: str = PaperGridOpt, bins: Optional[int] = BinOpt,
        wide: bool = WideOpt) -> None:
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) to each variant."""
    _check_plot(plot)
    curves, groups = _run_fits(source, x, y, by, min_compute, max_compute, method, json_,
                               step_cost=step_cost, paper_grid=paper_grid, bins=bins)
    _plot(curves, groups, plot)
    if json_:
        _print_json([g.as_dict() for g in groups])
    else:
        from ablate.cli.render import print_fit

        print_fit(out, groups, curves.x, curves.y, wide)
    _finish(groups)


@app.command()
def compare(source: Path = SourceArg, baseline: Optional[str] = typer.Option(
                None, "--baseline", help="Variant to compare against (default: the first variant fit)."),
            margin: float = margin_option("A's within this are tied: refit with the shared A "
                                          "and compare B (paper's rule)."),
            plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt, x: Optional[str] = XOpt,
            y: Optional[str] = YOpt, by: Optional[str] = ByOpt,
            min_compute: Optional[float] = MinOpt, max_compute: Optional[float] = MaxOpt,
            method: str = MethodOpt, step_cost: Optional[float] = StepCostOpt,
            budget: Optional[float] = typer.Option(None, "--budget", help="Also show each "
                                                   "variant's predicted score at this compute."),
            paper_grid: str = PaperGridOpt, bins: Optional[int] = BinOpt,
            wide: bool = WideOpt) -> None:
    """Rank variants by asymptote A (ties within --margin broken by B at a shared A), next to
    what each is predicted to reach at the largest compute observed (and at --budget)."""
    from ablate.analysis.compare import compare as rank

    _check_plot(plot)
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise InputError(f"--budget {budget}: must be a finite compute > 0")

    def check(curves: Curves) -> None:
        if baseline is not None and baseline not in curves.variants():
            raise InputError(f"--baseline {baseline!r}: no such variant; variants: "
                             + ", ".join(curves.variants()))

    curves, groups = _run_fits(source, x, y, by, min_compute, max_compute, method, json_, check,
                               step_cost=step_cost, paper_grid=paper_grid, bins=bins)
    if baseline is not None and next(g for g in groups if g.variant == baseline).fit is None:
        raise InputError(f"--baseline {baseline!r}: its fit failed, pick another "
                         f"({next(g for g in groups if g.variant == baseline).error})")
    rows = rank(groups, baseline=baseline, margin=margin, budget=budget)
    base = baseline or next((g.variant for g in groups if g.fit is not None), None)
    _plot(curves, groups, plot)
    from ablate.studies.stages import stopped_variants

    # Adaptive studies: a variant stopped at an early stage is ranked on its shorter curve.
    stopped = stopped_variants(Path(source)) if Path(source).is_dir() else {}
    if json_:
        _print_json([{**r.as_dict(), "stopped": stopped.get(r.group.variant)} for r in rows])
    else:
        from ablate.cli.render import print_compare

        print_compare(out, rows, groups, x=curves.x, y=curves.y, base=base, margin=margin,
                      budget=budget, wide=wide)
        for r in rows:
            if r.disagreement:  # the paper's rank and the predictions disagree: say it plainly
                err.print(f"[yellow]rank vs prediction:[/yellow] {r.group.variant} {r.disagreement}")
        for v, why in stopped.items():
            out.print(f"[yellow]stopped at stage {why['stage']}[/yellow] {v}: {why['reason']}")
    _finish(groups)


@app.command()
def extrapolate(source: Path = SourceArg,
                budget: Optional[float] = typer.Option(None, "--budget", help="Compute to "
                                                       "predict the score at (units of --x)."),
                target: Optional[float] = typer.Option(None, "--target", help="Score to find "
                                                       "the compute for."),
                max_compute: Optional[float] = MaxOpt, json_: bool = JsonOpt,
                x: Optional[str] = XOpt, y: Optional[str] = YOpt, by: Optional[str] = ByOpt,
                min_compute: Optional[float] = MinOpt, method: str = MethodOpt,
                plot: Optional[Path] = PlotOpt, step_cost: Optional[float] = StepCostOpt,
                margin: float = margin_option("As in compare: the rank shown next to each "
                                              "prediction uses it."),
                paper_grid: str = PaperGridOpt, bins: Optional[int] = BinOpt,
                wide: bool = WideOpt) -> None:
    """Predict the score at --budget, or the compute to reach --target, with 95% intervals."""
    from ablate.analysis.extrapolate import extrapolate as predict

    if (budget is None) == (target is None):
        raise InputError("give exactly one of --budget C (compute) or --target R (score)")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise InputError(f"--budget {budget}: must be a finite compute > 0")
    if target is not None and not (0 < target < 1):
        raise InputError(f"--target {target}: must be a score strictly between 0 and 1")
    _check_plot(plot)
    curves, groups = _run_fits(source, x, y, by, min_compute, max_compute, method, json_,
                               step_cost=step_cost, paper_grid=paper_grid, bins=bins)
    rows = predict(groups, budget=budget, target=target, margin=margin)
    _plot(curves, groups, plot, extend_to=budget)
    if json_:
        _print_json(rows)
    else:
        what = f"score at {curves.x}={budget:g}" if budget is not None else \
            f"{curves.x} to reach {curves.y}={target:g}"
        from ablate.cli.render import print_extrapolate

        print_extrapolate(out, rows, what=what, key="score" if budget is not None else "compute",
                          wide=wide)
    _finish(groups)
