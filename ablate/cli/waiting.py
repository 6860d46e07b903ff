"""`sweep --wait`: what the wait ends with. Ctrl-C stops the waiting (never the runs) with one
line saying what goes on and how to follow, stop or resume it; runs that failed make the exit
status non-zero, with each one's cause, instead of an answer computed from nothing.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import typer

from ablate.number_text import count

if TYPE_CHECKING:
    from ablate.studydir import RunState

FAILED = ("failed", "interrupted", "cancelled")  # ended without a verdict (diverged is one)
ACTIVE = ("queued", "running")


def watch_or_stop(study_dir: Path | str, study: Path | str, *, show: bool = True
                  ) -> list[RunState]:
    """The live wait; on Ctrl-C, one line on stderr and exit 130 (no traceback)."""
    from ablate.cli.live import watch

    try:
        return watch(Path(study_dir), show=show)
    except KeyboardInterrupt:
        # On a new line: the live view's last frame ends without one.
        print("\n" + stopped_line(Path(study_dir), study), file=sys.stderr)
        raise typer.Exit(130) from None


def stopped_line(study_dir: Path, study: Path | str) -> str:
    """What Ctrl-C left: the runs go on (local jobs ignore the terminal's Ctrl-C: see the
    local executor), how to follow them, stop them and pick up again; wrapped at the width
    (ablate/cli/width.py), whole words."""
    from ablate.studies.status import study_states

    try:
        states = study_states(study_dir)
    except Exception:  # noqa: BLE001 - a second look must not turn Ctrl-C into a traceback
        states = []
    from ablate.cli.width import columns

    return wrap(stopped_text(states, study_dir, study), columns(sys.stderr))


def stopped_text(states: Sequence[RunState], study_dir: Path | str, study: Path | str) -> str:
    """The stop advice names only running runs' jobs, and queued ones only where the same
    command dequeues them (STOP_DEQUEUES: `scancel` of a queued Slurm job, said so); a
    queued local run's process is waiting for a slot, and a signal there would end it as
    "interrupted" and spend an attempt, so it is left queued."""
    from ablate.studies import launch

    running = [s for s in states if s.state == "running"]
    queued = [s for s in states if s.state == "queued"]
    dequeued = [s for s in queued if s.job_id and getattr(
        launch.executor_of(s.job_id), "STOP_DEQUEUES", False)]
    left_queued = len(queued) - len(dequeued)
    live = len(running) + len(queued)
    text = (f"stopped waiting (Ctrl-C); {count(live, 'run')} "
            f"{'goes' if live == 1 else 'go'} on in the background "
            f"({len(running)} running, {len(queued)} queued): follow with "
            f"`ablate status {study_dir}`")
    stop = stop_command(sorted({s.job_id for s in running + dequeued if s.job_id}))
    if stop:
        text += f"; stop them: {stop}"
        if dequeued:
            text += f" (dequeues the {count(len(dequeued), 'queued run')})"
        if left_queued:
            text += (f"; the {count(left_queued, 'queued local run')} "
                     f"{'is' if left_queued == 1 else 'are'} left queued and start as slots free")
    return text + f"; `ablate sweep {study}` resumes what does not finish"


def wrap(text: str, width: int) -> str:
    """Lines of at most `width` (a word longer than that alone on its line, never split)."""
    return textwrap.fill(text, max(width, 20), break_long_words=False, break_on_hyphens=False)


def stop_command(job_ids: Sequence[str]) -> str:
    """The command that stops these jobs ("" when none is known), each executor's for its
    own jobs (launch.stop_command): `kill -INT` of local jobs' processes, `scancel` of Slurm
    jobs..."""
    from ablate.studies import launch

    return launch.stop_command(list(job_ids))


def failed_runs(states: Sequence[RunState]) -> list[RunState]:
    return [s for s in states if s.state in FAILED]


def failure_lines(failed: Sequence[RunState], total: int, study_dir: Path | str,
                  study: Path | str, width: Optional[int] = 100) -> list[str]:
    """`2 of 4 runs failed; first: NAME seed 0: CAUSE` (cut to `width`), then where to look
    and how to retry."""
    first = failed[0]
    cause = f": {one_line(first.error)}" if first.error else f" ({first.state})"
    head = clip(f"{len(failed)} of {total} runs failed; first: {first.name} seed {first.seed}"
                f"{cause}", width)
    return [head, f"each cause: ablate status {study_dir}; after a fix, `ablate sweep {study}` "
            "retries them"]


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def clip(text: str, width: Optional[int]) -> str:
    """`text` cut to `width` characters, ending in "..." when cut (None: no limit)."""
    if width is None or len(text) <= width:
        return text
    return text[:max(width - 3, 1)].rstrip() + "..."
