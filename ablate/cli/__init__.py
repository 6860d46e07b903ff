"""The `ablate` command line: a thin typer shell over the typed Python API.

Each area registers its commands from its own module so the CLI stays one small file per
concern. `main()` maps `InputError` and every usage error to one line on stderr and exit code 2
(no traceback), whatever typer/click version is installed.

    app.py        the typer application and the options every command shares
    curves.py     `fit`, `compare`, `extrapolate`         plan.py     `plan`
    sweep.py      `sweep` (plain and adaptive)            dryrun.py   `sweep --dry-run`
    within.py     `sweep --within`
    waiting.py    `sweep --wait`'s end (Ctrl-C, failed runs); live.py: its live view
    status.py     `status`, `schema`                      init.py     `init`
    tune.py       `tune`                                  run.py      `run`
    report.py     `report`                                watch.py    `watch`
    render.py, tables.py  the terminal tables; width.py: the one width every command prints at
    delayed_progress.py  a bar shown only for slow work; usage.py: usage errors and help text
                  alike on every typer/click version
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from ablate.cli.app import app  # noqa: F401  (the entry points and tests take it from here)


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    from ablate.cli import curves, init, plan, report, run, sweep, status, tune, watch  # noqa: F401


def main(args: Optional[Sequence[str]] = None) -> None:
    """Console entry point: bad input -> one line on stderr, exit 2; no traceback."""
    from ablate.cli.usage import build_command, command_path, exit_for, no_command_line

    _register()
    command = build_command(app)
    argv = list(sys.argv[1:] if args is None else args)
    if not argv:  # one line, not the whole help (click 8.1 printed help, exit 0; 8.2+ exit 2)
        print(no_command_line(command), file=sys.stderr)
        sys.exit(2)
    try:
        rv: Any = command.main(args=argv, prog_name="ablate", standalone_mode=False)
    except BaseException as e:  # noqa: B036 - exit_for re-raises what it does not handle
        sys.exit(exit_for(e, command_path(command, argv)))
    # In non-standalone mode click returns an `Exit`'s code (e.g. `raise typer.Exit(1)` in
    # `ablate run` when the run failed) instead of exiting: pass it on. Commands return None.
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
