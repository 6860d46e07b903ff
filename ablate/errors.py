"""One exception type for bad user input.

The CLI turns `InputError` into a one-line message on stderr and exit code 2 (no traceback);
anything else is an internal error (exit 1). Raise it *before* writing anything, so bad input
never leaves partial files behind.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: a file, key, column or value that must be fixed.

    The message should name where (file, line or key/column), what is wrong and what would be
    valid, in one line.
    """


class NoDataYet(InputError):
    """The input is well formed but holds nothing to analyse yet (a study whose runs have
    logged no evaluation). A command that can say something without the data (the report's
    run table) catches this one; every other InputError, a column that does not exist among
    those logged included, is bad input wherever it is raised."""


#: The exit code of "not yet" (docs/JSON.md): the input is fine, the data cannot answer yet.
EXIT_NOT_YET = 3


class NoAnswerYet(Exception):
    """Well-formed input whose data cannot answer yet: no variant's curve can be fit (each one
    still rising without a bend, too few evaluations), no forecast yet. Not bad input (exit 2):
    a script polling an early study must be able to tell "wait" from "fix your file". The CLI
    prints it as one line and exits EXIT_NOT_YET, after whatever answer could be printed."""
