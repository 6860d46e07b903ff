"""trainer/dist/abort.py: a rank that raises ends the whole job within seconds (not at the process
group's 120-minute timeout), and status.json's error is the failing rank's root cause in one
line (the engine's own exception, not the wrapper that reached the trainer)."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
import time
from pathlib import Path

from tests._multirank_util import free_port, rank_env
from trainer.dist.abort import error_line

ROOT = Path(__file__).resolve().parents[1]


def test_error_line_is_the_innermost_cause():
    try:
        try:
            raise ValueError("Free memory on device cuda:0 is less than desired\nsecond line")
        except ValueError as e:
            raise RuntimeError("Engine core initialization failed. See root cause above.") from e
    except RuntimeError as e:
        assert error_line(e) == "ValueError: Free memory on device cuda:0 is less than desired"
    carried = RuntimeError("wrapper")
    carried.root_cause = "MemoryError: from the engine's log"
    assert error_line(carried) == "MemoryError: from the engine's log"
    assert error_line(KeyError("k")) == "KeyError: 'k'"


@pytest.mark.slow
def test_a_failed_rank_ends_the_job_within_a_minute(tmp_path):
    port, run_dir = free_port(), tmp_path / "run"
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "_abort_rank_script.py"),
                               str(run_dir)], cwd=ROOT,
                              env=rank_env(tmp_path / "cache", rank, 2, port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(2)]
    outs, ended = ["", ""], [0.0, 0.0]
    deadline = time.time() + 240  # start-up (torch import) on a loaded machine + the abort
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        for i, p in enumerate(procs):
            if p.poll() is not None and not ended[i]:
                ended[i] = time.time()
        time.sleep(0.2)
    for i, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
        if not ended[i]:
            ended[i] = time.time()
        outs[i] = p.communicate()[0]
    assert all(p.returncode not in (None, 0) for p in procs), outs
    raised = float(next(ln.split()[1] for ln in outs[1].splitlines() if ln.startswith("RAISED")))
    waited = [t - raised for t in ended]
    print(f"rank 0 ended {waited[0]:.1f} s, rank 1 {waited[1]:.1f} s after rank 1 raised")
    assert max(waited) < 60, (waited, outs)
    assert "aborting rank 0: rank 1: ValueError" in outs[0], outs[0]  # by the watchdog
    assert "UNREACHED" not in outs[0]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["step"] == 3
    assert status["error"] == ("rank 1: ValueError: Free memory on device cuda:0 (1.2/79.1 GiB) "
                               "is less than desired GPU memory utilization (0.9, 71.2 GiB)")
