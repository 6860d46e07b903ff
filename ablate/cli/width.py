"""The one rule for how wide every command prints (tables, paragraphs, watch lines, the dry
run): COLUMNS when set (a script or a test asking for a width), else the terminal's, else
PIPED columns on a pipe or a file.

Piped, rich would wrap at 80 and the dry run used to print every fact on one line (lines of
500 characters that a pager or a narrow log viewer cuts mid-word); 100 is a width every
viewer holds and that still fits a ranking with its intervals (issue 52).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import IO, Iterable, Optional

from rich.console import Console

PIPED = 100
NARROWEST = 40  # below this nothing reads as a table; lines are laid out for 40 and may wrap


def _isatty(stream: Optional[IO]) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def columns(stream: Optional[IO] = None) -> int:
    """How many columns `stream` (default stdout) is printed in, by the rule above."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(NARROWEST, int(env))
    if _isatty(sys.stdout if stream is None else stream):
        return max(NARROWEST, shutil.get_terminal_size((PIPED, 24)).columns)
    return PIPED


def console(stderr: bool = False) -> Console:
    """A rich Console that prints at `columns()`: made when used, so a COLUMNS set after
    import (an in-process caller) is seen."""
    stream = sys.stderr if stderr else sys.stdout
    env = os.environ.get("COLUMNS", "").strip()
    if _isatty(stream) and not env.isdigit():  # rich measures the terminal, resizes included
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=columns(stream))


def fold(lines: Iterable[str], width: int, keep: Iterable[str] = ()) -> list[str]:
    """Prose lines wider than `width` folded at words under their own indent (a terminal or a
    pager would cut them mid-word); `keep` (a table laid out for the width, a command folded
    as a shell reads it) stays as it is."""
    import textwrap

    keep = set(keep)
    out: list[str] = []
    for line in lines:
        if line in keep or len(line) <= width:
            out.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line, width, subsequent_indent=lead + "    ",
                             break_long_words=False, break_on_hyphens=False)
    return out
