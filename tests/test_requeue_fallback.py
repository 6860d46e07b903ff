"""The job requeues whatever the trainer does (issue 31 item 5): job.py's Fallback calls
submitit's own USR2 handler (chained, not replaced) when the trainer misses the window, and a
stop that ends without a requeue marks the run failed, never leaving it `running`."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
import time
from pathlib import Path

from submitit.core.utils import UncompletedJobError

from ablate.studies.launch.job import hand_over
from ablate.studies.launch.slurm import requeue_within
from trainer import rundir

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, countdown: int) -> tuple[subprocess.CompletedProcess, float, Path]:
    run, folder = tmp_path / "run", tmp_path / "jobs"
    run.mkdir()
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "_fallback_script.py"), str(run),
                          str(folder), str(countdown), "1.0"],
                         env=env, capture_output=True, text=True, timeout=120)
    return out, time.monotonic() - t0, run


@pytest.mark.slow
def test_a_trainer_missing_the_window_is_requeued_by_submitits_handler(tmp_path):
    out, _, run = _run(tmp_path, countdown=3)
    # submitit's local requeue exit code; a fallback that never fired would end the script's
    # minute-long "step" with exit 0 and "the fallback did not fire"
    assert out.returncode == 144 and "did not fire" not in out.stderr, out.stderr[-2000:]
    assert (tmp_path / "jobs" / "4242_submitted.pkl").exists()  # submitit pickled the job
    st = rundir.read_status(run)
    assert st["state"] == "running" and "fallback" in st["requeued"]


@pytest.mark.slow
def test_no_requeue_left_marks_the_run_failed(tmp_path):
    out, _, run = _run(tmp_path, countdown=-1)  # submitit: "timed-out too many times"
    assert out.returncode == 1, out.stderr[-2000:]
    st = rundir.read_status(run)
    assert st["state"] == "failed" and "not requeued" in st["error"]
    assert "too many times" in st["error"]


def test_hand_over_without_a_requeue_marks_the_run_failed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rundir.write_status(run, "running", 5)
    hand_over(None, run)  # outside submitit: nothing can requeue
    assert rundir.read_status(run)["state"] == "failed"

    def give_up(signum, frame):
        raise UncompletedJobError("Job not requeued because: timed-out too many times.")

    rundir.write_status(run, "running", 5)
    try:
        hand_over(give_up, run)
    except UncompletedJobError:
        pass
    st = rundir.read_status(run)
    assert st["state"] == "failed" and "too many times" in st["error"]


def test_requeue_within_leaves_a_margin_inside_the_signal_window():
    from ablate.studies.launch.slurm import Section as SlurmProfile

    assert requeue_within(SlurmProfile(signal_delay_s=300)) == 270
    assert requeue_within(SlurmProfile(signal_delay_s=900)) == 810
    assert 0 < requeue_within(SlurmProfile(signal_delay_s=20)) < 20
