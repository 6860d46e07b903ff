"""The live view of `ablate sweep --wait`: one line per run (variant, seed, state, step /
budget), refreshed while runs are queued or running, and a message naming the files to read
as soon as a run fails or diverges. Everything goes to stderr, so `--json` stays pure.

Only the drawing lives here: the waiting is ablate.studies.status.wait_for_runs (the one wait
loop), which calls the view on every poll."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.text import Text

from ablate.analysis.labels import shorten
from ablate.cli.tables import Col, table
from ablate.cli.width import console as console_for
from ablate.studies.status import study_states, wait_for_runs
from ablate.studydir import PROBLEM_STATES, RunState, read_variants, where_to_look

STATE_STYLE = {"done": "green", "running": "cyan", "queued": "blue", "failed": "red",
               "diverged": "magenta", "cancelled": "yellow", "interrupted": "yellow",
               "stopped": "yellow", "pending": "dim"}


def _budgets(study_dir: Path) -> dict[str, Optional[int]]:
    """Step budget of each run from its config (None for compute-only budgets)."""
    out: dict[str, Optional[int]] = {}
    for v in read_variants(Path(study_dir)):
        budget = ((v.get("config") or {}).get("budget") or {})
        out[v["run_id"]] = budget.get("steps")
    return out


BAR_WIDTH = 16  # with the other columns, a row fits 80 columns for labels up to ~20 characters


def _table(states: list[RunState], budgets: dict[str, Optional[int]], title: str,
           console: Any = None):
    """The live view: variant (shortened to what differs, the axes named once), seed, state,
    a bar of the budget spent, step / budget and the run id, laid out for the terminal's width
    (ablate/cli/tables.py: labels whole, cells at most two lines)."""
    bars: list[Any] = []
    steps: list[str] = []
    for s in states:
        total = budgets.get(s.run_id)
        step = s.step or 0
        # The trainer's own share of the budget spent (FLOPs budgets have no step total).
        share = s.progress if s.progress is not None else (
            min(step / total, 1.0) if total else None)
        bars.append(ProgressBar(total=1.0, completed=share, width=BAR_WIDTH)
                    if share is not None else "")
        where = f"{step}/{total}" if total else str(step)
        steps.append(where + (f" ({share:.0%})" if share is not None and not total else ""))
    legend, short = shorten(list(dict.fromkeys(s.name for s in states)))
    cols = [Col("variant", [short[s.name] for s in states], justify="left", whole=True,
                keep=True),
            Col("seed", [str(s.seed) for s in states], drop=2),
            Col("state", [Text(s.state, style=STATE_STYLE.get(s.state, "")) for s in states],
                justify="left", keep=True),
            Col("progress", bars, justify="left", width=BAR_WIDTH, drop=4),
            Col("step", steps, drop=1),
            Col("run_id", [s.run_id for s in states], justify="left", whole=True, drop=3)]
    return table(console or console_for(stderr=True), title, cols, legend=legend)


def watch(study_dir: Path, *, poll_s: float = 2.0, timeout_s: Optional[float] = None,
          show: bool = True, console: Any = None) -> list[RunState]:
    """Block until no run is queued or running; returns the final states. With `show`, a
    live per-run table on stderr and one message per run that fails or diverges."""
    if not show:
        return wait_for_runs(study_dir, poll_s=poll_s, timeout_s=timeout_s)
    con = console or console_for(stderr=True)
    view = _View(Path(study_dir), con)
    with Live(view.table(None), console=con, refresh_per_second=2, transient=False) as live:
        states = wait_for_runs(study_dir, poll_s=poll_s, timeout_s=timeout_s,
                               on_update=lambda st: live.update(view.update(st)))
    con.print()  # the final view stays; what follows starts on its own line
    return states


class _View:
    """The table of the latest poll, and one message per run that ended badly (told once)."""

    def __init__(self, study_dir: Path, console: Any) -> None:
        self.study_dir, self.con = study_dir, console
        self.budgets = _budgets(study_dir)
        self.t0 = time.time()
        self.told: set[str] = set()

    def title(self, states: list[RunState]) -> str:
        counts: dict[str, int] = {}
        for s in states:
            counts[s.state] = counts.get(s.state, 0) + 1
        return (f"{self.study_dir.name}: " + " ".join(f"{k}={n}" for k, n in sorted(counts.items()))
                + f"  ({time.time() - self.t0:.0f}s)")

    def table(self, states: Optional[list[RunState]]):
        if states is None:
            states = study_states(self.study_dir)
        return _table(states, self.budgets, self.title(states), self.con)

    def update(self, states: list[RunState]):
        for s in states:
            if s.state in PROBLEM_STATES and s.run_id not in self.told:
                self.told.add(s.run_id)
                why = f": {s.error}" if s.error else ""
                # names, errors and paths as written: "[...]" in them is not markup
                self.con.print(f"[{STATE_STYLE[s.state]}]{s.state}[/] "
                               + escape(f"{s.name} seed {s.seed} (run {s.run_id}) at step "
                                        f"{s.step}{why}"))
                # Paths whole on one line (soft_wrap: no newline of rich's inside a path, so a
                # long one still copies as one; the terminal folds it for the eye).
                self.con.print("  look at: " + escape(", ".join(where_to_look(self.study_dir, s))),
                               soft_wrap=True)
        return self.table(states)
