"""Run `ablate ARGS` the way a test needs it: in process (fast tier) or as the installed
console script (the few tests about the real entry point: exit codes from a shell, signals,
another folder's PATH).

In process is the default: it goes through the same `ablate.cli.main` the console script
calls, with the same argument parsing, error mapping and exit codes, so it shows everything a
subprocess would except the interpreter start (~2-3 s of importing torch per call, which made
~150 CLI calls the largest cost of the old suite).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    """What a caller of `ablate` sees: the exit code and the two streams."""

    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:  # an assertion message that shows what the command printed
        return (f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}"
                f"\n--- stderr ---\n{self.stderr[-4000:]}")


@contextlib.contextmanager
def _environ(env: Mapping[str, Optional[str]]) -> Iterator[None]:
    """os.environ with `env` applied (None removes a key), restored afterwards."""
    old = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def ablate(*args: object, cwd: Optional[Path] = None, columns: Optional[int] = 100,
           env: Optional[Mapping[str, Optional[str]]] = None) -> Result:
    """`ablate ARGS` in this process, from `cwd`, at a `columns`-wide pipe (None: COLUMNS
    unset, a pipe's full width), no colour."""
    from ablate.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    base = {"COLUMNS": None if columns is None else str(columns), "NO_COLOR": "1",
            "TERM": "dumb", "FORCE_COLOR": None}
    with _environ({**base, **(env or {})}), contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(_chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())


def console_script() -> Optional[str]:
    """ABLATE_CLI (another install), else the `ablate` console script installed beside this
    interpreter (a venv's, even when the venv is not on PATH), else the one on PATH, or None."""
    beside = Path(sys.executable).with_name("ablate")
    return (os.environ.get("ABLATE_CLI") or (str(beside) if beside.exists() else None)
            or shutil.which("ablate"))


def ablate_script(*args: object, cwd: Optional[Path] = None, columns: Optional[int] = 100,
                  timeout: float = 300, env: Optional[Mapping[str, str]] = None,
                  tests_on_path: bool = True) -> subprocess.CompletedProcess:
    """The installed console script in a subprocess, this tree (and tests/, for the stand-in
    entries, unless `tests_on_path` is False) on PYTHONPATH, at a `columns`-wide pipe (None:
    COLUMNS unset): only for what in process cannot show."""
    exe = console_script()
    cmd = [exe] if exe else [sys.executable, "-m", "ablate"]
    path = f"{ROOT}:{ROOT / 'tests'}" if tests_on_path else str(ROOT)
    full = dict(os.environ, PYTHONPATH=path, NO_COLOR="1", TERM="dumb", **(env or {}))
    full.pop("COLUMNS", None)
    if columns is not None:
        full["COLUMNS"] = str(columns)
    full.pop("FORCE_COLOR", None)
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=full)


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Start children here as an interactive shell starts a foreground job: SIGINT at its
    default. A test runner started in the background (`cmd &` in a script, nohup, some CI
    agents) has SIGINT ignored, every child inherits that, and a Ctrl-C test then waits for an
    exit that cannot come (seen: test_ctrl_c_stops_the_waiting_not_the_runs timed out after
    60 s on a machine where the suite ran as a background job). While a Python handler is
    installed here, exec gives the child the default."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
