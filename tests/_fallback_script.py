"""A job whose trainer misses the stop signal's window, under submitit's real USR2 handler.

argv: run_dir, folder, max_num_timeout, within_s. Builds submitit's own SignalHandler
(submitit/core/job_environment.py: what JobEnvironment._handle_signals installs) for a
RunJob in the local job environment, puts the trainer's flag handler on USR2 the way
RunJob.__call__ does, arms job.py's Fallback, sends itself USR2 and then "trains" for a
minute without ever reaching a boundary. Fallback must requeue (exit code 144, submitit's
local requeue code, and the job pickled) or, if submitit gives up, mark the run failed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from submitit.core.job_environment import SignalHandler
from submitit.core.utils import DelayedSubmission, JobPaths
from submitit.local.local import LocalJobEnvironment

from ablate.studies.launch.job import Fallback, RunJob
from trainer import rundir
from trainer.dist import preempt

run, folder = Path(sys.argv[1]), Path(sys.argv[2])
countdown, within = int(sys.argv[3]), float(sys.argv[4])
os.environ.update(SUBMITIT_LOCAL_JOB_ID="4242", SUBMITIT_LOCAL_GLOBALID="0")
delayed = DelayedSubmission(RunJob([str(run)], requeue_within_s=within))
delayed.set_timeout(60, countdown)
handler = SignalHandler(LocalJobEnvironment(), JobPaths(folder, job_id="4242"), delayed)
signal.signal(signal.SIGUSR2, handler.checkpoint_and_try_requeue)  # as submitit does
rundir.write_status(run, "running", 3)
requeue = preempt.install(signal.SIGUSR2)  # RunJob.__call__: the trainer's flag, submitit's kept
Fallback(requeue, within, 0, lambda: run)
os.kill(os.getpid(), signal.SIGUSR2)
time.sleep(60)  # a step that never reaches a boundary
print("the fallback did not fire", file=sys.stderr)
sys.exit(0)
