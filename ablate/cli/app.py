"""The `ablate` application object and the options every command shares.

Its own module, under the package's `main()`, so the command modules (curves, sweep, status...)
import it without importing the package that imports them (no import cycle).
"""

from __future__ import annotations

import math

import typer

from ablate.analysis import A_MARGIN
from ablate.errors import InputError

app = typer.Typer(
    name="ablate",
    help="Run RL recipe ablations and compare them by fitted scaling curves (ScaleRL sigmoid: "
    "asymptote A, efficiency B).\n\n"
    "Start here: `ablate init` writes a starter study (4 runs of the CPU proxy, minutes on a "
    "laptop) into this folder; `ablate sweep study.yaml --wait` trains them; `ablate compare "
    "results/NAME` prints the answer (NAME: the folder's name). Logs from another trainer "
    "(CSV, JSONL, TensorBoard, MLflow, a W&B export): `ablate compare LOG`. Every command has "
    "--help; the docs: docs/index.md in the repository.",
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


def package_version() -> str:
    """The installed distribution's version (pyproject's `version`), read from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ablate")
    except PackageNotFoundError:  # run from a source tree that was never pip-installed
        return "unknown (not installed: pip install -e .)"


def _show_version(value: bool) -> None:
    if value:
        print(f"ablate {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print the ablate version and exit."),
) -> None:
    # A callback without a docstring: the group's help stays the `help=` given to Typer above.
    pass
