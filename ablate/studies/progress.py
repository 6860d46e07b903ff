"""The live view of `ablate sweep --wait`: one line per run (variant, seed, state, step /
budget), refreshed while runs are queued or running, and a message naming the files to read
as soon as a run fails or diverges. Everything goes to stderr, so `--json` stays pure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from ablate.studies.status import RunState, study_states

ACTIVE = ("queued", "running")
PROBLEM = ("failed", "diverged", "interrupted", "cancelled")
STATE_STYLE = {"done": "green", "running": "cyan", "queued": "blue", "failed": "red",
               "diverged": "magenta", "cancelled": "yellow", "interrupted": "yellow",
               "pending": "dim"}


def where_to_look(study_dir: Path, s: RunState) -> list[str]:
    """The files that explain a run's end: its status.json (error, traceback) and the job's
    stdout/stderr logs that submitit keeps in the study's _submitit folder."""
    study_dir = Path(study_dir)
    job = (s.job_id or "").split(":")[-1]
    logs = sorted(str(p) for p in (study_dir / "_submitit").glob(f"{job}_*log.*")) if job else []
    return [str(study_dir / s.run_id / "status.json")] + logs


def _budgets(study_dir: Path) -> dict[str, Optional[int]]:
    """Step budget of each run from its config (None for compute-only budgets)."""
    from ablate.analysis.gather import read_variants

    out: dict[str, Optional[int]] = {}
    for v in read_variants(Path(study_dir)):
        budget = ((v.get("config") or {}).get("budget") or {})
        out[v["run_id"]] = budget.get("steps")
    return out


def _table(states: list[RunState], budgets: dict[str, Optional[int]], title: str):
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    for col in ("variant", "seed", "state", "progress", "step", "run_id"):
        t.add_column(col, no_wrap=col in ("variant", "run_id"))
    for s in states:
        total = budgets.get(s.run_id)
        step = s.step or 0
        # The trainer's own share of the budget spent (FLOPs budgets have no step total).
        share = s.progress if s.progress is not None else (
            min(step / total, 1.0) if total else None)
        bar = ProgressBar(total=1.0, completed=share, width=24) if share is not None else ""
        where = f"{step}/{total}" if total else str(step)
        if share is not None and not total:
            where += f" ({share:.0%})"
        t.add_row(s.name, str(s.seed), f"[{STATE_STYLE.get(s.state, '')}]{s.state}[/]", bar,
                  where, s.run_id)
    return t


def watch(study_dir: Path, *, poll_s: float = 2.0, timeout_s: Optional[float] = None,
          show: bool = True, console: Any = None) -> list[RunState]:
    """Block until no run is queued or running; returns the final states. With `show`, a
    live per-run table on stderr and one message per run that fails or diverges."""
    from rich.console import Console
    from rich.live import Live

    con = console or Console(stderr=True)
    budgets = _budgets(study_dir)
    t0 = time.time()
    told: set[str] = set()

    def title(states: list[RunState]) -> str:
        counts: dict[str, int] = {}
        for s in states:
            counts[s.state] = counts.get(s.state, 0) + 1
        return (f"{Path(study_dir).name}: " + " ".join(f"{k}={n}" for k, n in sorted(counts.items()))
                + f"  ({time.time() - t0:.0f}s)")

    states = study_states(study_dir)
    with Live(_table(states, budgets, title(states)), console=con, refresh_per_second=2,
              transient=False) if show else _Null() as live:
        while True:
            states = study_states(study_dir)
            for s in states:
                if s.state in PROBLEM and s.run_id not in told:
                    told.add(s.run_id)
                    if show:
                        why = f": {s.error}" if s.error else ""
                        con.print(f"[{STATE_STYLE[s.state]}]{s.state}[/] {s.name} seed {s.seed} "
                                  f"(run {s.run_id}) at step {s.step}{why}\n  look at: "
                                  + ", ".join(where_to_look(study_dir, s)))
            if show:
                live.update(_table(states, budgets, title(states)))
            if not any(s.state in ACTIVE for s in states) or (
                    timeout_s is not None and time.time() - t0 > timeout_s):
                break
            time.sleep(poll_s)
    if show:
        con.print()  # the final view stays; what follows starts on its own line
    return states


class _Null:
    def __enter__(self) -> "_Null":
        return self

    def __exit__(self, *a: Any) -> None:
        return None
