"""The `ablate` command line: a thin typer shell over the typed Python API.

Each area registers its commands from its own module (curves, study, run) so the CLI stays
one small file per concern. `main()` maps `InputError` to exit code 2 with a one-line message.
"""

from __future__ import annotations

import math
import sys

import typer

from ablate.analysis import A_MARGIN
from ablate.errors import InputError

app = typer.Typer(
    name="ablate",
    help="Run RL recipe ablations and compare them by fitted scaling curves (ScaleRL sigmoid: "
    "asymptote A, efficiency B).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _check_margin(margin: float) -> float:
    if not (margin >= 0 and math.isfinite(margin)):
        raise InputError(f"--margin {margin}: must be a number >= 0 (the paper uses {A_MARGIN})")
    return margin


def margin_option(help: str):
    """--margin, the paper's run-to-run tie margin on A, checked the same way by every command."""
    return typer.Option(A_MARGIN, "--margin", help=help, callback=_check_margin)


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    from ablate.cli import curves, plan, report, run, study  # noqa: F401


def main() -> None:
    """Console entry point: bad input -> one line on stderr, exit 2; no traceback."""
    _register()
    try:
        app(standalone_mode=False)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click usage errors come through here in standalone_mode=False
        import click

        if isinstance(e, click.exceptions.UsageError):
            e.show()
            sys.exit(2)
        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise
