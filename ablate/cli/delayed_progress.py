"""A progress bar that appears only when the work takes long enough to wait for.

Fitting a handful of short curves takes a fraction of a second, and a bar that flashes up and
vanishes is noise; 100 long curves take tens of seconds, and silence then looks like a hang. So
the bar (rich, on stderr, transient) is shown once the work has run for `delay` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

DELAY_S = 1.0


@contextmanager
def delayed_progress(console: Console, *, disable: bool = False,
                     delay: float = DELAY_S) -> Iterator[Progress]:
    """A rich Progress whose display starts after `delay` seconds (never when `disable`)."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True, disable=disable)
    lock = threading.Lock()
    state = {"started": False, "closed": False}

    def show() -> None:
        with lock:
            if not state["closed"]:
                bar.start()
                state["started"] = True

    timer = threading.Timer(delay, show)
    timer.daemon = True
    if not disable:
        timer.start()
    try:
        yield bar
    finally:
        timer.cancel()
        with lock:
            state["closed"] = True
            if state["started"]:
                bar.stop()
