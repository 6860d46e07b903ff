"""CLI: `ablate fit`, `ablate compare`, `ablate extrapolate` (scaling-curve analysis).

Tables and notes go to the terminal (notes on stderr); `--json` prints only JSON on stdout.
Input problems raise InputError before anything is written (the plot, the metrics cache).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console

from ablate.cli.app import app, margin_option
from ablate.cli.delayed_progress import delayed_progress
from ablate.errors import InputError, NoAnswerYet
from ablate.number_text import compute, count

if TYPE_CHECKING:  # numpy/scipy/pandas load when a command fits, not for `ablate --help`
    from ablate.analysis.variant_fits import GroupFit
    from ablate.analysis.pipeline import Analysis, Options
    from ablate.analysis.sources import Curves



class _Stream:
    """stdout or stderr as a rich Console made when it is used, at the width of the one rule
    (ablate/cli/width.py) at the call (an in-process caller's later COLUMNS is seen)."""

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr

    def console(self) -> Console:
        from ablate.cli.width import console

        return console(stderr=self.stderr)

    def print(self, *args: Any, **kw: Any) -> None:
        self.console().print(*args, **kw)


out, err = _Stream(stderr=False), _Stream(stderr=True)

SourceArg = typer.Argument(..., help="Study results dir, .csv/.jsonl/.parquet long table "
                           "(variant, seed, compute, score), W&B CSV export, MLflow tracking "
                           "dir, TensorBoard log dir, verl/TRL JSONL log or trainer_state.json.")
StepCostOpt = typer.Option(None, "--step-cost", help="Other tools' logs with only steps: "
                           "compute = step x this (e.g. GPU-hours per step).")
XOpt = typer.Option(None, "--x", help="Compute column/tag (default: study dir gpu_hours or its "
                    "study.yaml fit.x; table compute; TensorBoard the step).")
YOpt = typer.Option(None, "--y", help="Score column/tag (default: study dir eval/pass_rate or "
                    "study.yaml fit.y; table score; TensorBoard eval/pass_rate).")
YRangeOpt = typer.Option(None, "--y-range", help="The score's scale LO HI, mapped onto the "
                         "pass-rate scale [0, 1] the sigmoid assumes: -1 1 for rewards in "
                         "[-1, 1] (TRL's correctness reward), 0 100 for percent. A, "
                         "predictions and --target are then on the [0, 1] scale.")
ByOpt = typer.Option(None, "--by", help="Comma-separated columns naming a variant (default: variant).")
MinOpt = typer.Option(None, "--min-compute", help="Fit only points with compute >= X. Default: "
                      "one start for every variant, read from the curves' shapes: early points "
                      "are kept unless a variant's are off the sigmoid its later points follow "
                      "(an early phase), then they are skipped for all; stderr names what was "
                      "skipped (docs/analysis.md).")
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
                      "docs/analysis.md; speed and interval widths in benchmarks/RESULTS.md).")
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
    """Write the figure when asked and at least one variant was fit; say so on stderr either
    way (a file written with no word is easy to miss, one not written more so)."""
    if plot is None:
        return
    if not any(g.fit for g in groups):
        err.print(f"no plot written to {plot}: no variant could be fit", markup=False)
        return
    from ablate.analysis.plots import plot_fits

    plot_fits(curves, groups, plot, extend_to=extend_to)
    said_plot(plot)


def said_plot(plot: Path) -> None:
    err.print(f"plot -> {plot}", markup=False, highlight=False)


def y_label(curves: Curves) -> str:
    """The score's name in titles; with --y-range it says the numbers are on the mapped scale
    (a table of "eval_reward" values 0.66 must not read as a reward of 0.66)."""
    if curves.y_range is None:
        return curves.y
    lo, hi = curves.y_range
    return f"{curves.y} mapped from [{lo:g}, {hi:g}] to [0, 1]"


def _options(**kw) -> "Options":
    """The shared options as the pipeline's typed Options (ablate.analysis.pipeline)."""
    from ablate.analysis.pipeline import Options

    return Options(**kw)


def _print_load_notes(curves: Curves, quiet: bool) -> None:
    if not quiet:
        for note in curves.notes:  # what a reader of another tool's log picked
            err.print(note, style="dim", markup=False, highlight=False)  # names as written
    if curves.dropped:  # always on stderr, --json or not: the data differs from the file
        err.print(f"{curves.source}: dropped {count(curves.dropped, 'row')} with a blank "
                  f"{curves.x!r} or {curves.y!r} cell", markup=False)
    for note in curves.duplicates:  # also always: rows were dropped or replaced
        err.print(f"{curves.source}: {note}", markup=False)
    for note in curves.readings:  # also always: how rows became variants and seeds
        err.print(note, markup=False, highlight=False)


def _print_window_note(a: Analysis) -> None:
    """Say once why early points were skipped (the shared window, or one curve's own start)."""
    w, x = a.window, a.curves.x
    skipped = [g for g in a.groups if g.fit is not None and g.fit.skipped]
    if not skipped or w.rule not in ("shared", "auto"):
        return
    if w.rule == "auto":
        g = skipped[0]
        err.print(f"{g.variant}: skipped {count(g.fit.skipped, 'early point')} below {x}="
                  f"{compute(g.fit.min_compute)}: they are off the sigmoid the later points follow "
                  "(an early phase); --min-compute 0 keeps them", style="dim", markup=False)
        return
    by = [v for v, s in w.starts.items() if s is not None and s == w.lo]
    err.print(f"one window for every variant: points below {x}={compute(w.lo)} are skipped for all "
              f"({', '.join(f'{g.variant} {g.fit.skipped}' for g in skipped)}) because "
              f"{', '.join(by)}'s early points are off the sigmoid its later points follow; "
              "--min-compute 0 keeps them", style="dim", markup=False)


def _analyze(source: Path, options: Options, quiet: bool) -> Analysis:
    """The pipeline (ablate.analysis.pipeline.analyze), watched: the source's notes on stderr
    once it is read, then a progress bar over the fits (shown only when they are slow)."""
    from contextlib import ExitStack

    from ablate.analysis.pipeline import analyze

    con = err.console()  # no bar on a pipe: nobody watches it, and it left a blank line there
    with ExitStack() as stack:
        bar: list = []  # (progress, task), once the source is read

        def loaded(curves: Curves) -> None:
            _print_load_notes(curves, quiet)
            progress = stack.enter_context(delayed_progress(
                con, disable=quiet or not con.is_terminal))
            bar.append((progress, progress.add_task("fitting", total=len(curves.variants()))))

        def step(v: str) -> None:
            progress, task = bar[0]
            progress.update(task, description=f"fitting {v}")
            progress.advance(task)

        a = analyze(source, options, on_loaded=loaded, on_variant=step)
    if not quiet:
        _print_window_note(a)
    return a


def _finish(groups: list[GroupFit]) -> None:
    """Exit 3 ("not yet", not bad input) when no variant could be fit at all: the file was read
    and every reason is already in the output; more evaluations may answer."""
    failed = [g for g in groups if g.fit is None]
    if groups and len(failed) == len(groups):
        raise NoAnswerYet(f"no variant could be fit yet; {failed[0].error}")


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


BaselineOpt = typer.Option(None, "--baseline", help="Variant to compare against, as written "
                           "or as the table shows it (default: the first variant fit).")
MarginOpt = margin_option("A's within this are tied: refit with the shared A and compare B "
                          "(paper's rule).")


def _opts(x, y, by, step_cost, min_compute, max_compute, bins, method, paper_grid,
          baseline=None, margin=None, budget=None, y_range=None) -> Options:
    """The shared options, in the order every command declares them."""
    from ablate.analysis import A_MARGIN

    return _options(x=x, y=y, by=by, step_cost=step_cost, min_compute=min_compute,
                    max_compute=max_compute, bins=bins, method=method, paper_grid=paper_grid,
                    baseline=baseline, margin=A_MARGIN if margin is None else margin,
                    budget=budget, y_range=None if y_range is None else tuple(y_range))


# Every analysing command declares the shared options in this order: source, its own options
# (--budget/--target/--tol), --x, --y, --y-range, --by, --step-cost, --min-compute, --max-compute, --bin,
# --method, --paper-grid, --baseline, --margin, --plot, --json, --wide.

@app.command()
def fit(source: Path = SourceArg, x: Optional[str] = XOpt, y: Optional[str] = YOpt,
        y_range: Optional[tuple[float, float]] = YRangeOpt, by: Optional[str] = ByOpt,
        step_cost: Optional[float] = StepCostOpt,
        min_compute: Optional[float] = MinOpt, max_compute: Optional[float] = MaxOpt,
        bins: Optional[int] = BinOpt, method: str = MethodOpt, paper_grid: str = PaperGridOpt,
        plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid/C)^B) to each variant."""
    _check_plot(plot)
    a = _analyze(source, _opts(x, y, by, step_cost, min_compute, max_compute, bins, method,
                               paper_grid, y_range=y_range), json_)
    _plot(a.curves, a.groups, plot)
    if json_:
        _print_json([g.as_dict() for g in a.groups])
    else:
        from ablate.cli.render import print_fit

        print_fit(out.console(), a.groups, a.curves.x, y_label(a.curves), wide)
    _finish(a.groups)


@app.command()
def compare(source: Path = SourceArg,
            budget: Optional[float] = typer.Option(None, "--budget", help="Also show each "
                                                   "variant's predicted score at this compute."),
            x: Optional[str] = XOpt, y: Optional[str] = YOpt,
            y_range: Optional[tuple[float, float]] = YRangeOpt, by: Optional[str] = ByOpt,
            step_cost: Optional[float] = StepCostOpt, min_compute: Optional[float] = MinOpt,
            max_compute: Optional[float] = MaxOpt, bins: Optional[int] = BinOpt,
            method: str = MethodOpt, paper_grid: str = PaperGridOpt,
            baseline: Optional[str] = BaselineOpt, margin: float = MarginOpt,
            plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Rank variants by asymptote A (ties within --margin broken by B at a shared A), next to
    what each is predicted to reach at the largest compute observed (and at --budget); the
    answer in one sentence above the table."""
    _check_plot(plot)
    a = _analyze(source, _opts(x, y, by, step_cost, min_compute, max_compute, bins, method,
                               paper_grid, baseline, margin, budget, y_range), json_)
    _plot(a.curves, a.groups, plot)
    from ablate.analysis.answer import answer_sentence

    answer = answer_sentence(a)
    if json_:
        _print_json(a.envelope("compare", answer, a.ranking_json(), budget=budget))
    else:
        from ablate.cli.render import print_compare

        out.print(answer, markup=False, highlight=False)
        print_compare(out.console(), a.rows, a.groups, x=a.curves.x, y=y_label(a.curves), base=a.baseline,
                      margin=a.options.margin, budget=budget, wide=wide)
        for r in a.rows:
            if r.disagreement:  # the paper's rank and the predictions disagree: say it plainly
                err.print(f"rank vs prediction: {r.group.variant} {r.disagreement}",
                          style="yellow", markup=False)
        for v, why in a.stopped.items():  # adaptive: ranked on its shorter curve
            out.print(f"stopped at stage {why['stage'] + 1} {v}: {why['reason']}",
                      style="yellow", markup=False)
    _finish(a.groups)


@app.command()
def extrapolate(source: Path = SourceArg,
                budget: Optional[float] = typer.Option(None, "--budget", help="Compute to "
                                                       "predict the score at (units of --x)."),
                target: Optional[float] = typer.Option(None, "--target", help="Score to find "
                                                       "the compute for."),
                x: Optional[str] = XOpt, y: Optional[str] = YOpt,
                y_range: Optional[tuple[float, float]] = YRangeOpt, by: Optional[str] = ByOpt,
                step_cost: Optional[float] = StepCostOpt, min_compute: Optional[float] = MinOpt,
                max_compute: Optional[float] = MaxOpt, bins: Optional[int] = BinOpt,
                method: str = MethodOpt, paper_grid: str = PaperGridOpt,
                baseline: Optional[str] = BaselineOpt, margin: float = MarginOpt,
                plot: Optional[Path] = PlotOpt, json_: bool = JsonOpt,
                wide: bool = WideOpt) -> None:
    """Predict the score at --budget, or the compute to reach --target, with 95% intervals."""
    from ablate.analysis.extrapolate import extrapolate as predict

    if (budget is None) == (target is None):
        raise InputError("give exactly one of --budget C (compute) or --target R (score)")
    if target is not None and not (0 < target < 1):
        raise InputError(f"--target {target}: must be a score strictly between 0 and 1")
    _check_plot(plot)
    a = _analyze(source, _opts(x, y, by, step_cost, min_compute, max_compute, bins, method,
                               paper_grid, baseline, margin, budget, y_range), json_)
    from ablate.analysis.extrapolate import extrapolate_answer

    rows = predict(a.groups, budget=budget, target=target, margin=a.options.margin,
                   frame=a.curves.frame)
    _plot(a.curves, a.groups, plot, extend_to=budget)
    answer = extrapolate_answer(rows, x=a.curves.x, y=a.curves.y, budget=budget, target=target)
    if json_:
        from ablate.analysis.ranking_text import INTERVAL_KIND, TARGET_INTERVAL_KIND

        _print_json(a.envelope("extrapolate", answer, rows, budget=budget, target=target,
                               interval=INTERVAL_KIND if target is None
                               else TARGET_INTERVAL_KIND))
    else:
        what = f"score at {a.curves.x}={compute(budget)}" if budget is not None else \
            f"{a.curves.x} to reach {y_label(a.curves)}={target:g}"
        from ablate.cli.render import print_extrapolate

        out.print(answer, markup=False, highlight=False)
        print_extrapolate(out.console(), rows, what=what, key="score" if budget is not None else "compute",
                          wide=wide)
    _finish(a.groups)
