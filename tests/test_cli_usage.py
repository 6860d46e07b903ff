"""Usage errors and help as a user sees them, through `ablate.cli.main`, the function the
installed console script calls (in process: tests/_cli.py). Typer >= 0.26 vendors its own
click, which an in-process check against click's classes (CliRunner) once missed: every typo
printed a traceback. main() itself maps every usage error, so calling it shows what the
script shows; the tests marked slow run the installed console script itself.

ABLATE_CLI=/path/to/ablate runs the console-script checks against another install.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

import pytest

from _cli import ablate as _in_process, ablate_script, console_script
from ablate.cli import _register, app
from ablate.cli.usage import build_command, unwrap

WIDTH = 100


def ablate(*args: str, columns: int = WIDTH):
    return _in_process(*args, columns=columns)


USAGE = {
    # id: (argv, fragments the one line must contain, case-insensitive)
    "no_args": ((), ["ablate:", "no command given", "compare", "sweep", "--help"]),
    "unknown_command": (("nosuch",), ["ablate:", "nosuch", "--help"]),
    "unknown_option": (("compare", "--bogus", "x"), ["ablate compare:", "--bogus",
                                                     "'ablate compare --help'"]),
    "missing_argument": (("compare",), ["ablate compare:", "missing argument", "source"]),
    "missing_option": (("plan", "results/x"), ["ablate plan:", "missing option", "--budget"]),
    "bad_number": (("plan", "results/x", "--budget", "abc"), ["ablate plan:", "--budget",
                                                         ("number", "float")]),
    "option_without_value": (("sweep", "recipes/loss_agg.yaml", "--results"),
                             ["ablate sweep:", "--results"]),
}


@pytest.mark.parametrize("case", sorted(USAGE))
def test_usage_error_is_one_line_exit_2(case):
    argv, fragments = USAGE[case]
    r = ablate(*argv)
    text = r.stdout + r.stderr
    assert r.returncode == 2, text
    assert "Traceback" not in text
    assert r.stdout == "" and r.stderr.count("\n") == 1, text
    for f in fragments:  # a tuple: any one of them (typer versions word some errors apart)
        assert any(a.lower() in r.stderr.lower() for a in ((f,) if isinstance(f, str) else f)), \
            (f, r.stderr)


def test_version_prints_the_installed_version():
    r = ablate("--version")
    assert r.returncode == 0 and r.stdout == f"ablate {version('ablate')}\n", r


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown_option", "missing_argument"])
def test_the_console_script_itself_gives_one_line_exit_2(case):
    """The installed script (not only main()): what a shell sees."""
    if console_script() is None:
        pytest.skip("no `ablate` console script on PATH (pip install -e .)")
    argv, fragments = USAGE[case]
    r = ablate_script(*argv)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and all(f.lower() in r.stderr.lower() for f in fragments)
    v = ablate_script("--version")
    assert v.returncode == 0 and v.stdout == f"ablate {version('ablate')}\n", v


def _commands() -> dict:
    _register()
    return build_command(app).commands


@pytest.mark.parametrize("cmd", [""] + sorted(_commands()))
def test_help_fits_100_columns_and_flags_show_no_type(cmd):
    r = ablate(*([cmd] if cmd else []), "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert "<bool>" not in r.stdout
    assert "--help" in r.stdout


@pytest.mark.parametrize("cmd", sorted(_commands()))
def test_help_sentences_wrap_at_the_terminal_not_at_the_source(cmd):
    """At 250 columns a paragraph shorter than the text column is on one line: a line break
    carried over from the docstring would split it (as `compare`'s did, at any width)."""
    command = _commands()[cmd]
    wide = ablate(cmd, "--help", columns=250).stdout
    listing = ablate("--help", columns=250).stdout
    paragraphs = [p for p in unwrap(command.help or "").split("\n\n") if not p.startswith("\b")]
    assert paragraphs
    first = re.sub(r"\s+", " ", paragraphs[0])
    if len(first) < 200:  # the commands panel's text column is ~230 wide at 250 columns
        assert any(first in line for line in listing.splitlines()), (first, listing)
    for p in paragraphs:
        p = re.sub(r"\s+", " ", p)
        if len(p) < 200 and "\n" not in p:
            assert any(p in line for line in wide.splitlines()), (p, wide)


def test_each_short_option_means_one_thing_across_commands():
    meaning: dict[str, set[str]] = {}
    for name, command in _commands().items():
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if re.fullmatch(r"-[A-Za-z]", o)):
                meaning.setdefault(short, set()).update(longs or [f"{name}:{param.name}"])
    clashes = {s: sorted(m) for s, m in meaning.items() if len(m) > 1}
    assert not clashes, clashes


def test_bad_input_from_a_command_is_one_line_exit_2(tmp_path):
    r = ablate("compare", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert str(tmp_path / "missing") in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_an_exit_code_raised_by_a_command_is_passed_on():
    """`raise typer.Exit(1)` (how `ablate run` reports a run that did not finish) comes back from
    click's non-standalone mode as a return value; main used to drop it and exit 0."""
    code = ("import typer\nfrom ablate.cli import app, main\n"
            "@app.command('boom')\ndef boom() -> None:\n    raise typer.Exit(3)\n"
            "main(['boom'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
