"""What a Ray job runs (ablate/studies/launch/ray.py's entrypoint), on every rank:
`python -m ablate.studies.launch.ray_job RUN_DIR ENTRY`.

The same training as every other job (job.py RunJob.train_all: the run's adapter, its
state written by rank 0), without submitit: a Ray job has no requeue of its own, so a stop
(`ray job stop`: SIGTERM to every process of the job; or SIGINT) makes the trainer checkpoint
at its next step boundary and the run read "stopped", which the next `ablate sweep` resumes.
Rank from RANK (torchrun's; 0 for a one-process job).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ablate.studies.launch.job import USER_STOPS, RunJob, load_entry, mark_stopped
from ablate.adapters.builtin import preempt
from trainer.rundir import FINAL_STATES, read_status


def main(argv: list[str]) -> int:
    run_dir, entry = Path(argv[0]), argv[1]
    rank = int(os.environ.get("RANK", "0"))
    for sig in (signal.SIGINT, signal.SIGTERM):  # a stop: checkpoint, then "stopped"
        preempt.install(sig)
    job = RunJob([str(run_dir)], entry=entry)
    job.current = None
    todo = [run_dir] if read_status(run_dir).get("state") not in FINAL_STATES else []
    failed = RunJob.train_all(todo, load_entry(entry), rank, job)
    if preempt.stopped_at() is not None and preempt.signal_name() in USER_STOPS:
        if rank == 0 and job.current is not None:
            mark_stopped(job.current)
        return 143  # ended by the stop, as a SIGTERM'd process would
    if failed:
        print("run failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
