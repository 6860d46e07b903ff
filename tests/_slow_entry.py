"""A stand-in trainer entry that trains slowly (status.json + metrics.jsonl through
trainer.rundir, one step every 0.3 s for the budget's steps): long enough for a test to press
Ctrl-C while runs are running (tests/test_outside_repo.py)."""

from __future__ import annotations

import time
from pathlib import Path


def run(config, run_dir: Path) -> None:
    """Honours a stop signal as the trainer does (trainer.dist.preempt): at the next step boundary
    it records the step it stops at and returns."""
    from trainer import rundir
    from trainer.dist import preempt

    run_dir = Path(run_dir)
    total = config.budget.steps
    start = int(rundir.read_status(run_dir).get("step") or 0)  # resumes where it stopped
    for step in range(start + 1, total + 1):
        if preempt.requested():
            preempt.mark_stopped(step - 1)
            return
        time.sleep(0.3)
        rundir.write_status(run_dir, "running", step, total_steps=total)
        rundir.append_metrics(run_dir, {"step": step, "gpu_hours": step / 100,
                                        "eval/pass_rate": 0.01 * step})
    rundir.write_status(run_dir, "done", total, total_steps=total)


def long_error(config, run_dir: Path) -> None:
    """Fails at once with an error longer than a terminal line, over two lines."""
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB " + "(detail) " * 40
                       + "\nsecond line")
