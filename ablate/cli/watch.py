"""`ablate watch TARGET`: hold each run to its frozen forecast, once or while it runs.

Thin over ablate.analysis.watch (the verdicts) and ablate.analysis.watch_source (the runs of a
target). A header naming the axis and its unit once, then one line per run, at the terminal's
width (100 on a pipe; a part that does not fit goes whole onto an indented next line, so a
number never leaves its band); `--json` one object per run (a JSON list, docs/JSON.md); `--follow` re-reads as the
logs grow and prints a run's line only when its verdict changes. Run dirs (ours: a run dir or a
study dir) get watch.json (ablate.analysis.watch_store, one record per axis), which `ablate
status` reads, and the band beside the score in the trackers the run logs to
(ablate.analysis.watch_trackers); other tools' logs get nothing written. Exit codes: 0 a verdict for at least one
run; 3 not yet (every run is waiting for its forecast: an answer, not an error); 2 bad input
(one line, nothing written).
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from ablate.cli.app import app
from ablate.cli.width import PIPED
from ablate.errors import EXIT_NOT_YET, InputError
from ablate.number_text import count

WIDTH = PIPED  # the default width of line() and header(): ablate/cli/width.py
RETRIES = 10  # --follow: re-reads of a file caught changing or shorter than before
NAME_W = 60  # a longer run label is cut (~) in the one-line verdict; --json has it whole
EXIT_WAITING = EXIT_NOT_YET  # every run is waiting for its forecast (docs/JSON.md exit codes)
UNITS = {"gpu_hours": "GPU-hours", "flops": "FLOPs", "samples": "samples", "tokens": "tokens",
         "step": "steps", "compute": "compute units"}


@app.command()
def watch(
    target: Path = typer.Argument(..., help="A run dir, a study results dir, or any log "
                                  "`ablate fit` reads (tables, W&B CSV, MLflow, TensorBoard, "
                                  "JSONL)."),
    follow: bool = typer.Option(False, "--follow", help="Keep watching: re-read every "
                                "--interval seconds, print a run's line when its verdict "
                                "changes; stops when every run dir is done (Ctrl-C otherwise)."),
    interval: float = typer.Option(60.0, "--interval", help="--follow: seconds between reads."),
    k: int = typer.Option(3, "--k", help="Evaluations in a row below the band that make a "
                          "departure. With --level 0.99 on the watch benchmark (docs/watch.md): 105 healthy runs, 0 false alarms; 92% of "
                          "collapses flagged within 3 evaluations; 89% of sags >= 0.05 flagged "
                          "(k=2: collapses one evaluation sooner, less margin on long logs)."),
    level: float = typer.Option(0.99, "--level", help="Central probability of the forecast band "
                                "one evaluation is held to (chosen with --k on the same benchmark: "
                                "0.999 flags 84% of collapses within 3 evaluations)."),
    from_compute: Optional[float] = typer.Option(None, "--from", help="Freeze the forecast on "
                                                 "the evaluations with compute <= C (default: "
                                                 "the first where the fit is identified)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Compute the run is meant to "
                                           "reach, for today's forecast (default: a run dir's "
                                           "config budget, else 2x the latest compute)."),
    x: Optional[str] = typer.Option(None, "--x", help="Compute column/tag (as `ablate fit`)."),
    y: Optional[str] = typer.Option(None, "--y", help="Score column/tag (as `ablate fit`)."),
    step_cost: Optional[float] = typer.Option(None, "--step-cost", help="Other tools' logs "
                                              "with only steps: compute per step."),
    on_depart: Optional[str] = typer.Option(None, "--on-depart", help="Shell command run once "
                                            "per departure, with the run id and verdict "
                                            "appended as arguments (a notifier, or `scancel` "
                                            "via a script); a run dir's watch.json "
                                            "remembers it across invocations."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG: each run's frozen "
                                        "band, its points after the freeze, the departure."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout: a list of "
                                 "one object per run (docs/watch.md)."),
) -> None:
    """Is each run still on its forecast? on track, ahead, behind, departed, or waiting.

    Exit 0 with a verdict for at least one run, 3 when every run is still waiting for its
    forecast (not yet), 2 on bad input."""
    from ablate.analysis import watch as w

    if plot is not None and (plot.suffix.lower() != ".png" or not plot.parent.exists()):
        raise InputError(f"--plot {plot}: must be a .png file in an existing folder")
    if interval <= 0 or not math.isfinite(interval):
        raise InputError(f"--interval {interval}: must be a number of seconds > 0")
    if budget is not None and not budget > 0:
        raise InputError(f"--budget {budget}: must be a compute > 0")
    opts = dict(k=k, level=level, from_compute=from_compute, budget=budget)
    w.judge("check", "check", 0, [], [], **opts)  # option errors before anything is read
    looker = _Looker(target, opts, x, y, step_cost, follow, on_depart)
    while True:
        runs, js, changed = looker.look()
        _show(js, changed, looker, as_json, follow)
        looker.notify(js)
        if plot is not None:
            from ablate.analysis.watch_plot import plot_watch

            plot_watch(runs, js, plot, looker.x, looker.y)
        if not follow:
            if all(j.verdict == "waiting" for j in js):
                raise typer.Exit(EXIT_WAITING)
            return
        if runs and all(r.final for r in runs):
            return
        time.sleep(interval)


class _Looker:
    """One look at the target after another: the runs, their judgements (a run with no new
    evaluation is not refit), the watch files written, the departures told."""

    def __init__(self, target: Path, opts: dict, x, y, step_cost, follow: bool,
                 on_depart: Optional[str]) -> None:
        self.target, self.opts, self.xy, self.step_cost = target, opts, (x, y), step_cost
        self.follow, self.on_depart = follow, on_depart
        self.seen: dict[str, str] = {}
        self.notified: set[str] = set()
        self.frozen: dict[str, list] = {}
        self.last: dict[str, Any] = {}
        self.counts: Optional[dict[str, int]] = None  # evaluations per run at the last read
        self.x = self.y = ""
        self.header_shown = False
        self.last_drawn: dict[str, Any] = {}  # run -> the judgement its band was drawn from
        self.said: set[str] = set()  # a tracker's warning, said once

    def _draw(self, run_dir: Path, j) -> None:
        """The band in the run's trackers (ablate/analysis/watch_trackers.py); what could not
        be drawn is said once on stderr."""
        from ablate.analysis.watch_trackers import publish

        self.last_drawn[j.run] = j
        for line in publish(run_dir, j, self.x, self.y):
            if line not in self.said:
                self.said.add(line)
                print(line, file=sys.stderr, flush=True)

    def look(self):
        runs, self.x, self.y = _read(self.target, *self.xy, self.step_cost, self.follow,
                                     self.counts)
        self.counts = {r.run: r.compute.size for r in runs}
        js = [self.last[r.run] if r.run in self.last and self.last[r.run].evaluations ==
              r.compute.size and self.last[r.run].last_score == (
                  float(r.score[-1]) if r.score.size else None)
              else _judge(r, self.opts, self.frozen if self.follow else None) for r in runs]
        self.last = {j.run: j for j in js}
        for r, j in zip(runs, js):
            if r.run_dir is not None and j.forecast is not None:
                if _already_notified(r.run_dir, j, self.x, self.y):  # told by an earlier watch
                    self.notified.add(j.run)
                _write(r.run_dir, j, self.x, self.y, notified=bool(self.on_depart) and
                       j.verdict == "departed")
                if self.last_drawn.get(j.run) is not j:  # the band beside the score
                    self._draw(r.run_dir, j)
        changed = [j for j in js if self.seen.get(j.run) != _state(j)]
        for j in changed:
            self.seen[j.run] = _state(j)
        return runs, js, changed

    def notify(self, js) -> None:
        for j in js:
            if self.on_depart and j.verdict == "departed" and j.run not in self.notified:
                self.notified.add(j.run)
                _notify(self.on_depart, j.run, j.verdict)


def _show(js, changed, looker: _Looker, as_json: bool, follow: bool) -> None:
    """--json: the list of objects (under --follow, of the runs that changed); else the header
    once, then one line per run (under --follow, per run that changed)."""
    shown = changed if follow else js
    if as_json:
        if shown:
            print(json.dumps(_clean([{**j.as_json(), "x": looker.x, "y": looker.y}
                                     for j in shown])), flush=True)
        return
    from ablate.cli.width import columns

    width = columns()
    names = run_names(js)
    if not looker.header_shown and shown:
        print(header(looker.target, looker.x, looker.y, js[0].level, js[0].k, width,
                     names.legend), flush=True)
        looker.header_shown = True
    name_w = max((len(names.label(j)) for j in js), default=0)
    for j in shown:
        print(line(j, name_w, width, names.label(j)), flush=True)


def unit(x: str) -> str:
    """The compute column's unit in words ("FLOPs", "GPU-hours"), else its name."""
    return UNITS.get(x, x)


def header(target: Path, x: str, y: str, level: float, k: int, width: int = WIDTH,
           legend: str = "") -> str:
    """The axis and unit, said once: every compute below is in it; then the legend of the
    shortened variant names (as the tables print it). Wrapped at `width`, whole words."""
    axis = f"{y} against {x} ({unit(x)})"
    rule = f"{level:.0%} band of one evaluation, departed after {k} below"
    one = f"{axis}; {rule}"
    head = [one] if len(one) <= width else [*_wrap(f"{axis};", width, ""),
                                            *_wrap(rule, width, "    ")]
    return "\n".join(head + [x for line in legend.splitlines() for x in _wrap(line, width, "    ")])


def _wrap(text: str, width: int, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _read(target, x, y, step_cost, follow, counts: Optional[dict[str, int]] = None):
    """The runs. While following, a run dir or study dir that has nothing to read yet (a run
    still starting) is waited for, and so is a file that read before (`counts`: each run's
    evaluations then) and now does not: a logger rewriting it (pandas' to_csv truncates, then
    writes) is caught between the two. A file that changes while it is read, or reads with
    fewer evaluations than before (part-written), is read again: up to RETRIES times, then that
    read is taken (a log truly cut). Any other bad input ends the command; under --follow, a
    file that read before and now is bad is waited for, with one `waiting:` line on stderr
    (Ctrl-C ends it)."""
    from ablate.analysis.watch_source import read_runs
    from ablate.studydir import is_study_dir
    from trainer import rundir

    said, tries = False, 0
    while True:
        before = _stamp(target)
        try:
            got = read_runs(target, x=x, y=y, step_cost=step_cost)
        except InputError as e:
            ours = target.is_dir() and (is_study_dir(target) or any(
                (target / f).exists() for f in (rundir.STATUS, rundir.CONFIG, rundir.METRICS)))
            if not follow or not (ours or counts is not None):
                raise
            if not said:
                print(f"waiting: {e}", file=sys.stderr, flush=True)
                said = True
            time.sleep(5 if ours else 1)  # a starting run takes a while; a rewrite, a moment
            continue
        tries += 1
        shorter = any(r.compute.size < (counts or {}).get(r.run, 0) for r in got[0])
        if not follow or tries > RETRIES or (_stamp(target) == before and not shorter):
            return got
        time.sleep(0.5 if shorter else 0.2)


def _stamp(target: Path) -> Optional[tuple[int, int]]:
    """A file's size and mtime: equal before and after a read means the read saw one version."""
    try:
        st = target.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if target.is_file() else None


def _judge(r, opts: dict, frozen: Optional[dict]):
    """One run's judgement; under --follow the forecasts frozen so far are kept and reused (no
    refit, renewals still possible) until an evaluation lands past the band's compute grid."""
    from ablate.analysis import watch as w

    o = dict(opts)
    if r.budget is not None and o["budget"] is None:
        o["budget"], o["budget_rule"] = r.budget, "the run's config budget"
    fz = frozen.get(r.run) if frozen is not None else None
    if fz is not None and r.compute.size and r.compute[-1] > fz[-1]["grid"][-1]:
        fz = None
    j = w.judge(r.run, r.variant, r.seed, r.compute, r.score, frozen=fz, renew=True, **o)
    if frozen is not None and j.forecast is not None and j.forecast.rule != "provisional":
        frozen[r.run] = [f.as_dict() for f in j.forecasts]
    return j


def _state(j) -> str:
    """What --follow prints on a change of: the verdict (and where a departure began)."""
    return f"{j.verdict}|{j.departed_at}"


def _already_notified(run_dir: Path, j, x: str, y: str) -> bool:
    """The watch file says --on-depart already ran for this departure (an earlier `ablate
    watch`, e.g. from cron): it is not run again."""
    from ablate.analysis import watch_store

    doc = watch_store.read(run_dir, x, y) or {}
    return j.verdict == "departed" and doc.get("notified_departure") == j.departed_at


def _write(run_dir: Path, j, x: str, y: str, notified: bool) -> None:
    from ablate.analysis import watch_store

    watch_store.write(run_dir, _clean({
        "x": x, "y": y, "k": j.k, "level": j.level, "verdict": j.verdict, "reason": j.reason,
        "departed_at": j.departed_at, "departure": j.departure, "evaluations": j.evaluations,
        "notified_departure": j.departed_at if notified else None,
        "forecasts": [f.as_dict() for f in j.forecasts]}))


def _notify(cmd: str, run: str, verdict: str) -> None:
    """Run the --on-depart command; its failure is reported, never fatal (watching goes on)."""
    full = f"{cmd} {shlex.quote(run)} {shlex.quote(verdict)}"
    try:
        rc = subprocess.run(full, shell=True, timeout=300).returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"warning: --on-depart for {run} failed: {e}", file=sys.stderr)
        return
    if rc:
        print(f"warning: --on-depart for {run} exited {rc}", file=sys.stderr)


class RunNames:
    """What names a run on its line: its id, and beside it the variant (shortened as the
    tables shorten it, `legend` saying the axes) and the seed; a log's run, whose name is
    already variant[/seed<N>], by that name alone."""

    def __init__(self, js) -> None:
        from ablate.analysis.labels import shorten

        ids = [j for j in js if not j.run.startswith(j.variant)]
        self.legend, self.short = shorten(list(dict.fromkeys(j.variant for j in ids)))

    def label(self, j) -> str:
        if j.run.startswith(j.variant):
            return j.run
        return f"{j.run} {self.short.get(j.variant, j.variant)} seed {j.seed}"


def run_names(js) -> RunNames:
    return RunNames(js)


def line(j, name_w: int = NAME_W, width: int = WIDTH, label: Optional[str] = None) -> str:
    """One run's verdict: the run's label (padded to `name_w`: its id, variant and seed), its
    verdict, then its parts (_parts), as many a line as `width` holds; a part that does not
    fit goes whole onto the next line, indented under the first: a number is never cut from
    its band, nothing is cut. No line is longer than `width` unless one part alone is (a
    label is cut with ~ to leave the verdict room)."""
    label = j.run if label is None else label
    room = max(12, width - 9)  # the verdict's 8 characters and a space stay on the line
    name_w = min(name_w, room)
    head = f"{_short(label, name_w):<{name_w}} {j.verdict:<8}".rstrip() + " "
    indent = " " * (len(head) if width - len(head) >= 40 else 4)
    lines, cur = [], head
    parts = _parts(j)
    for i, part in enumerate(parts):
        piece = part if i == 0 else f"; {part}"
        end = 0 if i == len(parts) - 1 else 1  # the ";" that ends a line before a break
        if len(cur) + len(piece) + end > width and cur.strip():
            lines.append(cur.rstrip() + (";" if i else ""))
            cur, piece = indent, part
        cur += piece
    return "\n".join([*lines, cur.rstrip()])


def _parts(j) -> list[str]:
    """The latest evaluation with its band (the verdict says on which side), a renewal, today's
    forecast at the budget, where it is flat; or what a waiting run needs. Numbers as every
    command prints them (ablate/number_text.py)."""
    from ablate.number_text import compute, estimate, interval, number

    if j.verdict == "waiting":
        return [j.reason.replace("no forecast yet: needs about ", "needs ~")]
    if j.forecast is None:  # behind on a fall from its peak alone, before any forecast
        return [j.fall.short(), f"needs ~{count(j.needs, 'more evaluation')} for a forecast"
                if j.needs else "no forecast"]
    judged = [p for p in j.points if p.side != "past"]
    if j.verdict == "departed":
        parts = [f"{j.departure} since {compute(j.departed_at)}"
                 + ("; back inside" if j.returned else "")]
    elif j.verdict == "behind" and judged and judged[-1].side != "below" and j.today_band:
        p = judged[-1]
        parts = [f"{number(p.score, j.today_band)} below today's fit "
                 f"{interval(*j.today_band)} @{compute(p.compute)}"]
    elif judged:
        p = judged[-1]
        parts = [f"{estimate(p.score, (p.lo, p.hi))} @{compute(p.compute)}"]
    else:
        parts = [f"frozen @{compute(j.forecast.frozen_at)}, nothing after it yet"]
    if j.fall is not None:  # fell from its own peak (ablate/analysis/sag.py): compare names it too
        parts.append(j.fall.short())
    if j.forecast.rule == "renewed":
        parts.append(f"renewed @{compute(j.forecast.frozen_at)}")
    if j.at_budget:
        b = j.at_budget
        parts.append(f"@{compute(j.budget)}: {estimate(b['score'], (b['lo'], b['hi']))}")
    if j.stops_paying is not None:
        parts.append(f"flat by {compute(j.stops_paying)}")
    return parts


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "~"


def _clean(o: Any) -> Any:
    """JSON-safe: NaN/inf as null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o

