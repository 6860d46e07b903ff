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
