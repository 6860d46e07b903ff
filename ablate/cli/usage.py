"""Usage errors and help text that read the same on every typer/click version the pin allows.

Why this exists: typer >= 0.2x vendors its own copy of click (`typer._click`), so its usage
errors are not `click.exceptions.UsageError` and an `isinstance` check against click never
matches (every typo printed a traceback). Errors are therefore recognised by what they are
(a class named `UsageError` in the MRO, with `format_message()` and `exit_code`), which holds
for click 8.x and for typer's vendored copy alike. The same versions render help with rich and
keep the docstrings' source line breaks (a sentence broken mid-line at any width) and print
`<bool>` next to every flag; `build_command` normalises both once, before parsing.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

import typer

from ablate.errors import EXIT_NOT_YET, InputError, NoAnswerYet


def _names(e: BaseException) -> set[str]:
    return {c.__name__ for c in type(e).__mro__}


def one_line(text: str) -> str:
    """Collapse whitespace (click messages may carry newlines) into a single line."""
    return " ".join(text.split())


def usage_line(e: Any, fallback_path: str = "ablate") -> str:
    """`ablate compare: no such option: --bogus (try 'ablate compare --help')` for a usage error
    from either click or typer's vendored click: the command, what is wrong, where to look.
    `fallback_path` names the command when the error carries no context (typer's parser
    raises "option requires an argument" without one)."""
    ctx = getattr(e, "ctx", None)
    path = getattr(ctx, "command_path", None) or fallback_path
    msg = one_line(e.format_message()).rstrip(".")
    if len(msg) > 1 and msg[0].isupper() and msg[1].islower():
        msg = msg[0].lower() + msg[1:]  # "No such option" -> "no such option"; keep "A", "JSON"
    return f"{path}: {msg} (try '{path} --help')"


def no_command_line(command: Any) -> str:
    """The one line for a bare `ablate`: what is missing and the commands there are."""
    names = [n for n, c in getattr(command, "commands", {}).items() if not c.hidden]
    return f"ablate: no command given; one of {', '.join(names)} (try 'ablate --help')"


def command_path(command: Any, argv: list[str]) -> str:
    """`ablate SUBCOMMAND` when argv names one, else `ablate`."""
    names = getattr(command, "commands", {})
    return f"ablate {argv[0]}" if argv and argv[0] in names else "ablate"


def exit_for(e: BaseException, path: str = "ablate") -> int:
    """Print the one line for a user-facing failure and return its exit code; re-raise anything
    else (an internal error keeps its traceback, exit 1). `path`: see `usage_line`."""
    names = _names(e)
    if isinstance(e, InputError):
        print(f"error: {e}", file=sys.stderr)
        return 2
    if isinstance(e, NoAnswerYet):
        print(f"not yet: {e}", file=sys.stderr)
        return EXIT_NOT_YET
    if isinstance(e, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        return 130
    if "UsageError" in names and hasattr(e, "format_message"):
        print(usage_line(e, path), file=sys.stderr)
        return 2
    if "ClickException" in names and hasattr(e, "format_message"):  # e.g. a FileError
        print(f"error: {one_line(e.format_message())}", file=sys.stderr)
        return int(getattr(e, "exit_code", 1))
    if "Abort" in names:  # click's / typer's Abort: a prompt was cancelled
        print("aborted", file=sys.stderr)
        return 130
    if "Exit" in names and isinstance(getattr(e, "exit_code", None), int):
        return e.exit_code  # type: ignore[attr-defined]
    raise e


# ---------------------------------------------------------------------------------------------
# Help text


_VERBATIM = re.compile(r"^(\s|[-*] |\$ |ablate )")


def unwrap(text: str) -> str:
    """Join the source line breaks inside each prose paragraph, so the renderer wraps sentences
    at the terminal width instead of at the docstring's. Paragraphs (blank-line separated) stay;
    a `\\b` paragraph, a list or an indented/command example keeps its lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for p in paragraphs:
        lines = p.split("\n")
        if p.startswith("\b") or any(_VERBATIM.match(line) for line in lines[1:]):
            out.append(p)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _hide_flag_type(param: Any) -> None:
    """A flag takes no value, so no `<bool>` after it (typer >= 0.2x prints the type of every
    option; an empty metavar is what it prints instead)."""
    if getattr(param, "is_flag", False) and not getattr(param, "count", False) \
            and getattr(param, "metavar", None) is None:
        param.metavar = ""


def _polish(command: Any, name: str) -> None:
    for attr in ("help", "short_help"):
        if getattr(command, attr, None):
            setattr(command, attr, unwrap(getattr(command, attr)))
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            param.help = unwrap(param.help)
        _hide_flag_type(param)
    ctx_class = getattr(command, "context_class", None)
    if ctx_class is not None and hasattr(command, "get_help_option"):
        # `--help` is made lazily per command (cached on it by click >= 8.2 / typer's copy).
        help_option = command.get_help_option(ctx_class(command, info_name=name))
        if help_option is not None:
            _hide_flag_type(help_option)
    for sub_name, sub in getattr(command, "commands", {}).items():
        _polish(sub, sub_name)


def build_command(app: typer.Typer) -> Any:
    """The click command typer builds for `app`, with help text normalised (see module doc)."""
    command = typer.main.get_command(app)
    _polish(command, "ablate")
    return command
