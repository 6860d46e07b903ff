"""The one load -> fit -> rank pipeline behind compare, extrapolate, plan, report and stages.

Every command that ranks variants reads them through `analyze` with the same `Options`, so
`ablate report` cannot disagree with `ablate compare` (bins, paper grid, stopped variants and
the window are the same code), and an option means the same thing everywhere.

One window per comparison. Variants compared against each other are fitted on one window: the
paper excludes the same early compute for every curve. When no `--min-compute` is given (and
the study's `fit:` sets none), each variant's own shape test (ablate.analysis.window) says
where its early phase ends, and the common start is the LATEST of those starts. Why the
latest: a start chosen for one variant says its points before it are off the sigmoid; any
earlier common start would fit that variant on them, and any start chosen per variant fits the
variants on different spans, which moves A and B by more than the paper's margin (the
quickstart's two off-policy modes are one curve on a shared window, but read A 0.867 vs 0.847,
B 0.83 vs 1.26, P(beats) 0.96 when one of them skips 14 early points and the other none). A
variant's test can therefore only widen the common start (skip more, for everyone), never give
one variant a span of its own. The end is each curve's own last point (or --max-compute): an
adaptive study's stopped variants simply end earlier. A single curve keeps its own start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from ablate.analysis import A_MARGIN
from ablate.errors import InputError
from ablate.studydir import adaptive_record

JSON_VERSION = 1  # of the compare/extrapolate/plan --json object (docs/JSON.md)
N_BOOT_DEFAULT = 1000  # ablate.analysis.fit.N_BOOT, without importing numpy at CLI start


@dataclass(frozen=True)
class Options:
    """What every analysing command takes (the CLI's shared options, same names)."""

    x: Optional[str] = None
    y: Optional[str] = None
    by: Optional[str] = None
    step_cost: Optional[float] = None
    y_range: Optional[tuple[float, float]] = None  # a score scale mapped onto [0, 1]
    min_compute: Optional[float] = None
    max_compute: Optional[float] = None
    bins: Optional[int] = None
    method: str = "default"
    paper_grid: str = "relative"
    baseline: Optional[str] = None
    margin: float = A_MARGIN
    budget: Optional[float] = None
    n_boot: int = N_BOOT_DEFAULT

    def check(self) -> None:
        """One-line InputError for an option no command can use (before anything loads)."""
        from ablate.analysis.fit import MIN_POINTS, PAPER_GRIDS

        if self.method not in ("default", "paper"):
            raise InputError(f"--method {self.method!r}: valid methods are default, paper")
        if self.paper_grid not in PAPER_GRIDS:
            raise InputError(f"--paper-grid {self.paper_grid!r}: valid: {', '.join(PAPER_GRIDS)}")
        lo, hi = self.min_compute, self.max_compute
        if lo is not None and hi is not None and lo >= hi:
            raise InputError(f"--min-compute {lo:g} must be below --max-compute {hi:g}")
        if self.bins is not None and self.bins < MIN_POINTS:
            raise InputError(f"--bin {self.bins}: must be at least {MIN_POINTS} (bins per run)")
        if self.budget is not None and not (self.budget > 0 and math.isfinite(self.budget)):
            raise InputError(f"--budget {self.budget}: must be a finite compute > 0")
        from ablate.analysis.sources import check_y_range

        check_y_range(self.y_range)


@dataclass
class Window:
    """The fit window of a comparison, said once.

    rule: "given" (--min-compute), "study" (the study's fit.min_compute), "shared" (the latest
    of the variants' shape-chosen starts, see the module doc) or "auto" (one curve: its own).
    `starts`: with "shared", each variant's own start (None: it skips nothing)."""

    lo: Optional[float]
    hi: Optional[float]
    rule: str
    starts: dict[str, Optional[float]] = field(default_factory=dict)

    def text(self, unit: str = "") -> str:
        """"1.2e+11–2.5e+12 flops" (the answer sentence and the report; the tables' captions
        say it with the same ablate/number_text.span)."""
        from ablate.number_text import span

        return span(self.lo, self.hi) + (f" {unit}" if unit else "")

    def to_json(self) -> dict[str, Any]:
        return {"min_compute": self.lo, "max_compute": self.hi, "rule": self.rule,
                "starts": self.starts}


@dataclass
class Analysis:
    """What `analyze` returns: a plain structure the renderers and the report read.

    curves: the loaded data (ablate.analysis.sources.Curves); groups: one GroupFit per variant
    in data order; rows: the ranking (ablate.analysis.compare.Ranked, failed fits last);
    baseline: the variant P(beats) is measured against (None when nothing fit); window: the
    comparison's one window; stopped: adaptive studies' stopped variants ({} otherwise);
    stages: the adaptive study's budgets / decisions / scale_winner (None otherwise)."""

    curves: Any
    groups: list
    rows: list
    baseline: Optional[str]
    window: Window
    options: Options
    stopped: dict[str, dict[str, Any]] = field(default_factory=dict)
    stages: Optional[dict[str, Any]] = None

    def ranking_json(self) -> list[dict[str, Any]]:
        """The ranking rows: one object per ranked row, with its `stopped` record."""
        return [{**r.as_dict(), "stopped": self.stopped.get(r.group.variant)} for r in self.rows]

    def envelope(self, command: str, answer: str, rows: list[dict[str, Any]],
                 **more: Any) -> dict[str, Any]:
        """The one object `compare`, `extrapolate` and `plan --json` print (docs/JSON.md):
        what was asked and answered, then the rows. Bump JSON_VERSION on any change a reader
        of the old shape would misread."""
        return {"version": JSON_VERSION, "command": command, "answer": answer,
                "source": str(self.curves.source), "x": self.curves.x, "y": self.curves.y,
                "y_range": None if self.curves.y_range is None else list(self.curves.y_range),
                "baseline": self.baseline, "margin": self.options.margin,
                "window": {**self.window.to_json(), "text": self.window.text(self.curves.x)},
                **more, "rows": rows}


def load_curves(source: str | Path, options: Options):
    """Check the options and read the source (ablate.analysis.sources.load)."""
    from ablate.analysis.sources import load

    options.check()
    return load(source, x=options.x, y=options.y, by=options.by, step_cost=options.step_cost,
                y_range=options.y_range)


def check_baseline(curves, baseline: Optional[str]) -> Optional[str]:
    """The variant `baseline` names: its full label, or the label the table shows (the values
    that differ, `0.3` for `optim.lr=0.3`; ablate.analysis.labels.shorten), with or without the
    parentheses the answer sentence puts around a multi-axis value. InputError when none or
    several match."""
    if baseline is None:
        return None
    variants = curves.variants()
    if baseline in variants:
        return baseline
    from ablate.analysis.labels import shorten

    _, short = shorten(variants)
    want = baseline.strip()
    want = want[1:-1] if want.startswith("(") and want.endswith(")") else want
    hits = [v for v in variants if short.get(v) == want or short.get(v, "").replace(" ", "")
            == want.replace(" ", "")]
    if len(hits) == 1:
        return hits[0]
    shown = [short.get(v, v) for v in variants]
    raise InputError(f"--baseline {baseline!r}: " + ("matches several variants: "
                     + ", ".join(hits) if hits else "no such variant; variants: "
                     + ", ".join(dict.fromkeys(variants + shown))))


def common_window(curves, options: Options) -> Window:
    """The comparison's window (see the module doc for the rule and why)."""
    hi = options.max_compute if options.max_compute is not None \
        else curves.defaults.get("max_compute")
    if options.min_compute is not None:
        return Window(float(options.min_compute), hi, "given")
    if curves.defaults.get("min_compute") is not None:
        return Window(float(curves.defaults["min_compute"]), hi, "study")
    variants = curves.variants()
    if len(variants) < 2:
        return Window(None, hi, "auto")
    from ablate.analysis.fit import FitError
    from ablate.analysis.fitters import shape_start

    starts: dict[str, Optional[float]] = {}
    firsts = []
    for v in variants:
        g = curves.frame[curves.frame["variant"] == v]
        pos = g[g["compute"] > 0]["compute"]
        if len(pos):
            firsts.append(float(pos.min()))
        try:
            starts[v] = shape_start(g["compute"].to_numpy(), g["score"].to_numpy(),
                                    g["seed"].to_numpy(), hi)
        except (FitError, InputError):
            starts[v] = None  # its own fit reports why; it moves no one's window
    chosen = [s for s in starts.values() if s is not None]
    lo = max(chosen) if chosen else (min(firsts) if firsts else None)
    return Window(lo, hi, "shared", starts)


def fit_all(curves, options: Options, window: Window,
            on_variant: Optional[Callable[[str], None]] = None) -> list:
    """One GroupFit per variant (data order), every one on `window`."""
    from ablate.analysis.variant_fits import fit_groups

    groups = []
    for v in curves.variants():
        if on_variant is not None:
            on_variant(v)
        sub = replace(curves, frame=curves.frame[curves.frame["variant"] == v])
        groups += fit_groups(sub, min_compute=window.lo, max_compute=window.hi,
                             method=options.method, paper_grid=options.paper_grid,
                             bins=options.bins, n_boot=options.n_boot)
    if window.rule in ("shared", "study"):
        for g in groups:
            if g.fit is not None:
                g.fit.window_rule = window.rule
    from ablate.analysis.sag import falls

    fell = falls(curves.frame)  # on every evaluation of each run, as `watch` reads it
    for g in groups:
        g.falls = fell.get(g.variant, [])
    return groups


def analyze_curves(curves, options: Options, *, source: Optional[Path] = None,
                   on_variant: Optional[Callable[[str], None]] = None) -> Analysis:
    """Fit every variant on the common window and rank them (ablate.analysis.compare)."""
    from ablate.analysis.compare import compare

    options = replace(options, baseline=check_baseline(curves, options.baseline))
    window = common_window(curves, options)
    groups = fit_all(curves, options, window, on_variant)
    if options.baseline is not None:
        g = next(g for g in groups if g.variant == options.baseline)
        if g.fit is None:
            raise InputError(f"--baseline {options.baseline!r}: its fit failed, pick another "
                             f"({g.error})")
    rows = compare(groups, baseline=options.baseline, margin=options.margin,
                   n_boot=options.n_boot, budget=options.budget)
    base = options.baseline or next((g.variant for g in groups if g.fit is not None), None)
    fitted_hi = [g.fit.window_max() for g in groups if g.fit is not None]
    if window.hi is None and fitted_hi and all(h is not None for h in fitted_hi):
        window = replace(window, hi=max(fitted_hi))
    if window.lo is None:
        los = [g.fit.min_compute for g in groups if g.fit is not None]
        window = replace(window, lo=min(los) if los else None)
    stopped, stages = adaptive_record(Path(source)) if source is not None else ({}, None)
    return Analysis(curves, groups, rows, base, window, options, stopped, stages)


def analyze(source: str | Path, options: Options = Options(), *,
            on_loaded: Optional[Callable[[Any], None]] = None,
            on_variant: Optional[Callable[[str], None]] = None) -> Analysis:
    """Load `source`, fit every variant on one window, rank: the whole pipeline. The CLI
    watches it: `on_loaded(curves)` once the source is read (its notes, a progress bar's
    length), `on_variant(name)` before each variant's fit."""
    curves = load_curves(source, options)
    if on_loaded is not None:
        on_loaded(curves)
    return analyze_curves(curves, options, source=Path(source), on_variant=on_variant)
